"""NVIDIA GPUs: the GPU class a device id names, this machine's GPU, and the TVM target for it.

A GPU's id names its compute capability and its model (`cuda-sm90-h100`): the capability decides
which instructions and schedule rules apply, the model decides the costs (SM count, clocks, memory
bandwidth). The model is read the same way from a TVM tag (`nvidia/nvidia-h100`) and from the
name the driver reports (`NVIDIA H100 80GB HBM3`), so that data measured for the tag and a tuning
run on the real GPU meet under one id. Memory size and the SXM module are left out of the model
(an A100 40GB and 80GB share it); a PCIe or NVL part keeps its suffix, having fewer SMs or lower
clocks than the SXM part TVM's tags describe.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from metatune.env.target import target_json

# Words of a GPU name that say nothing about the chip: brand, memory size and type, SXM module.
_NOT_MODEL = re.compile(r"nvidia|geforce|tesla|gpu|\d{2,}gb?|hbm\d*e?|g?ddr\d*x?|sxm\d*")

UNKNOWN_MODEL = "generic"


def gpu_model(name: str) -> str:
    """`NVIDIA GeForce RTX 4090` -> `rtx4090`, `nvidia/nvidia-h100` -> `h100`; "generic" if nothing is left."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and not _NOT_MODEL.fullmatch(w)]
    return "".join(words) or UNKNOWN_MODEL


def compute_class(arch: str) -> str:
    """`sm_90a` (a target's arch) or `9.0` (a device's compute version) -> `sm90`."""
    found = re.fullmatch(r"sm_(\d+)[a-z]?", arch) or re.fullmatch(r"(\d+)\.(\d+)", arch)
    if found is None:
        return arch.replace("_", "")
    return "sm" + "".join(found.groups())


@dataclass(frozen=True)
class GpuInfo:
    """What the CUDA driver says about a GPU (TVM's device attributes)."""

    name: str
    compute_version: str
    sm_count: int
    memory_bytes: int
    max_threads_per_block: int
    max_shared_memory_per_block: int
    warp_size: int
    l2_cache_size_bytes: int


def local_gpu() -> GpuInfo | None:
    """This machine's first CUDA GPU, None without one (or with a TVM built without CUDA)."""
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        return None
    return GpuInfo(name=str(dev.device_name), compute_version=str(dev.compute_version),
                   sm_count=int(dev.multi_processor_count), memory_bytes=int(dev.total_global_memory),
                   max_threads_per_block=int(dev.max_threads_per_block),
                   max_shared_memory_per_block=int(dev.max_shared_memory_per_block), warp_size=int(dev.warp_size),
                   l2_cache_size_bytes=int(dev.l2_cache_size_bytes or 0))


@functools.lru_cache(maxsize=1)
def nvidia_tags() -> dict[str, dict[str, Any]]:
    """TVM's `nvidia/...` target tags and the plain target each stands for."""
    import tvm

    return {str(tag): target_json(tvm.target.Target(str(tag)))
            for tag in tvm.target.list_tags() if str(tag).startswith("nvidia/")}


def tag_for_config(config: dict[str, Any]) -> str | None:
    """The one tag a target is (a database record keeps the target without its tag), if exactly one."""
    found = [tag for tag, tag_config in nvidia_tags().items() if tag_config == config]
    return found[0] if len(found) == 1 else None


def gpu_target(info: GpuInfo) -> dict[str, Any]:
    """The target for a GPU: TVM's tag for its model when there is one (it also knows registers
    and L2 size), else one built from the driver's limits."""
    import tvm

    cls, model = compute_class(info.compute_version), gpu_model(info.name)
    for tag, config in sorted(nvidia_tags().items()):
        if gpu_model(tag) == model and compute_class(str(config.get("arch", ""))) == cls:
            return config
    config = {"kind": "cuda", "arch": f"sm_{cls[2:]}", "max_num_threads": info.max_threads_per_block,
              "max_threads_per_block": info.max_threads_per_block,
              "max_shared_memory_per_block": info.max_shared_memory_per_block, "thread_warp_size": info.warp_size}
    if info.l2_cache_size_bytes:
        config["l2_cache_size_bytes"] = info.l2_cache_size_bytes
    return target_json(tvm.target.Target(config))
