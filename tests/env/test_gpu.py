"""CUDA GPUs as devices: ids that name the compute class and model, from a tag, a target or this
machine's GPU; CPU ids and cards unchanged. Only the test of a real GPU needs one."""

from __future__ import annotations

import json
import subprocess

import pytest

from metatune import MetatuneError
from metatune.env import device as device_module
from metatune.env.device import (
    DeviceFingerprint,
    fingerprint_for_gpu,
    fingerprint_for_target,
    fingerprint_from_flags,
    require_runnable,
)
from metatune.env.gpu import GpuInfo, compute_class, gpu_model, local_gpu, nvidia_tags
from metatune.fileio import REPO_ROOT
from tests.processes import run_metatune

H100 = GpuInfo(name="NVIDIA H100 80GB HBM3", compute_version="9.0", sm_count=132, memory_bytes=85_045_919_744,
               max_threads_per_block=1024, max_shared_memory_per_block=49152, warp_size=32,
               l2_cache_size_bytes=52_428_800)
RTX4090 = GpuInfo(name="NVIDIA GeForce RTX 4090", compute_version="8.9", sm_count=128, memory_bytes=25_757_220_864,
                  max_threads_per_block=1024, max_shared_memory_per_block=49152, warp_size=32,
                  l2_cache_size_bytes=75_497_472)
A100 = GpuInfo(name="NVIDIA A100-SXM4-40GB", compute_version="8.0", sm_count=108, memory_bytes=42_505_273_344,
               max_threads_per_block=1024, max_shared_memory_per_block=49152, warp_size=32,
               l2_cache_size_bytes=41_943_040)


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100pcie"), ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx3080ti"), ("NVIDIA RTX A6000", "rtxa6000"),
    ("nvidia/nvidia-h100", "h100"), ("nvidia/geforce-rtx-3080", "rtx3080"), ("nvidia/rtx-a6000", "rtxa6000"),
    ("NVIDIA GH200 144G HBM3e", "gh200"), ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA", "generic"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.10gb", "a100mig1g"), ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "a100mig3g"),
])
def test_gpu_names_and_tags_give_one_model(name, model):
    assert gpu_model(name) == model


def test_compute_class_from_a_target_arch_or_a_device_compute_version():
    assert compute_class("sm_90a") == compute_class("9.0") == "sm90"
    assert compute_class("sm_86") == compute_class("8.6") == "sm86" and compute_class("10.0") == "sm100"


@pytest.mark.parametrize("target, device_id", [
    ("nvidia/nvidia-h100", "cuda-sm90-h100"), ("nvidia/nvidia-a100", "cuda-sm80-a100"),
    ("nvidia/geforce-rtx-3080", "cuda-sm86-rtx3080"),
    ('{"kind": "cuda", "arch": "sm_86"}', "cuda-sm86-generic"),
])
def test_a_cuda_target_names_its_gpu_without_one_here(target, device_id):
    fp = fingerprint_for_target(target)
    assert fp.device_id == device_id and fp.vendor == "NVIDIA" and fp.arch == "cuda"
    assert DeviceFingerprint.from_json(fp.to_json()) == fp
    assert fp.tvm_target().kind.name == "cuda"


def test_a_database_target_without_its_tag_is_still_the_tagged_gpu():
    """TVM exports a tag's target without the tag: records of an `nvidia/nvidia-h100` run say only sm_90a."""
    config = nvidia_tags()["nvidia/nvidia-h100"]
    assert fingerprint_for_target(json.dumps(config)).device_id == "cuda-sm90-h100"


def test_a_local_gpu_is_named_by_its_driver_name_and_targeted_by_its_tag():
    h100 = fingerprint_for_gpu(H100)
    assert h100.device_id == "cuda-sm90-h100" and h100.num_cores == 132 and h100.memory_bytes == H100.memory_bytes
    assert h100.target == nvidia_tags()["nvidia/nvidia-h100"] and h100.cpu_model == H100.name
    assert h100.device_id == fingerprint_for_target("nvidia/nvidia-h100").device_id  # data for the tag applies
    rtx = fingerprint_for_gpu(RTX4090)  # no TVM tag: a target from the driver's limits
    assert rtx.device_id == "cuda-sm89-rtx4090"
    assert rtx.target["arch"] == "sm_89" and rtx.target["max_threads_per_block"] == 1024
    assert rtx.target["max_shared_memory_per_block"] == 49152 and rtx.target["thread_warp_size"] == 32
    assert fingerprint_for_gpu(A100).device_id == "cuda-sm80-a100"
    assert DeviceFingerprint.from_json(rtx.to_json()) == rtx


def test_cuda_means_this_machines_gpu(monkeypatch):
    monkeypatch.setattr(device_module, "local_gpu", lambda: H100)
    fp = fingerprint_for_target("cuda")
    assert fp == fingerprint_for_gpu(H100)
    options = fingerprint_for_target('{"kind": "cuda", "max_threads_per_block": 512}')
    assert options.device_id == "cuda-sm90-h100" and options.target["max_threads_per_block"] == 512
    require_runnable(fingerprint_for_target("nvidia/nvidia-h100"))
    monkeypatch.setattr(device_module, "local_gpu", lambda: A100)
    with pytest.raises(MetatuneError, match="is a cuda-sm90-h100; this machine's GPU is NVIDIA A100"):
        require_runnable(fingerprint_for_target("nvidia/nvidia-h100"))
    monkeypatch.setattr(device_module, "local_gpu", lambda: None)
    with pytest.raises(MetatuneError, match="has none"):
        fingerprint_for_target("cuda")


@pytest.mark.skipif(local_gpu() is None, reason="no CUDA GPU on this machine")
def test_this_machines_gpu():
    info = local_gpu()
    fp = fingerprint_for_target("cuda")
    assert fp == fingerprint_for_gpu(info) and fp.device_id.startswith(f"cuda-{compute_class(info.compute_version)}-")
    assert fp.num_cores == info.sm_count > 0 and fp.memory_bytes > 0
    require_runnable(fp)


def test_cpu_ids_and_cards_are_unchanged():
    spr = fingerprint_from_flags("x86_64", "GenuineIntel", "Intel(R) Xeon(R) Processor",
                                 {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16"},
                                 2, "rocketlake")
    assert spr.device_id == "x86_64-sapphirerapids-2c"
    card = json.loads((REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c" / "card.json").read_text())
    assert DeviceFingerprint.from_json(card["device"]).to_json() == card["device"]  # no GPU fields added
    zen3 = fingerprint_from_flags("x86_64", "AuthenticAMD", "AMD EPYC", {"avx", "avx2", "fma", "sse4_2"}, 2, "znver3",
                                  cpu_family=25, model=1)
    assert zen3.device_id == "x86_64-znver3-2c" and "model" not in zen3.to_json()


def _device(*args: str) -> subprocess.CompletedProcess:
    return run_metatune(["device", *args], timeout=120)


def test_device_command_shows_a_gpu_target_on_any_machine():
    out = _device("--target", "nvidia/nvidia-h100", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["device_id"] == "cuda-sm90-h100"


@pytest.mark.skipif(local_gpu() is not None, reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2():
    out = _device("--target", "cuda")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "nvidia/nvidia-h100" in out.stderr
