"""Device fingerprint: what the CPU is, which TVM target to compile for, and a stable id.

The id names the ISA class rather than the marketing model so that every VM of the same
CPU generation resolves to the same dataset and zoo checkpoint. The ISA class is read from
the CPU flags because hypervisors often report a model number that LLVM maps to the wrong
CPU (a Sapphire Rapids guest can be detected as "rocketlake").
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

# Flags that change what LLVM may emit for the tensor programs we tune.
CODEGEN_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd", "sve",
)

# (LLVM cpu, flags it needs), most capable first; the first whose flags are all present wins.
X86_ISA_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sapphirerapids", ("avx512f", "avx512_bf16", "avx512_fp16")),
    ("cooperlake", ("avx512f", "avx512_bf16", "avx512_vnni")),
    ("cascadelake", ("avx512f", "avx512_vnni")),
    ("skylake-avx512", ("avx512f", "avx512bw", "avx512vl")),
    ("haswell", ("avx2", "fma")),
    ("x86-64", ()),
)


@dataclass(frozen=True)
class DeviceFingerprint:
    """Everything about a device that decides which measurements and models apply to it."""

    arch: str
    vendor: str
    cpu_model: str
    isa_class: str
    flags: tuple[str, ...]
    num_cores: int
    llvm_host_cpu: str
    target: dict[str, Any] = field(default_factory=dict)

    @property
    def device_id(self) -> str:
        return f"{self.arch}-{self.isa_class}-{self.num_cores}c"

    @property
    def isa_family(self) -> str:
        """Devices of one family can share code: same architecture and vector ISA level."""
        return self.arch

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        data["device_id"] = self.device_id
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DeviceFingerprint":
        fields = {k: v for k, v in data.items() if k != "device_id"}
        fields["flags"] = tuple(fields.get("flags", ()))
        return cls(**fields)

    def tvm_target(self) -> "Any":
        import tvm

        return tvm.target.Target(self.target)


def _read_cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if info:
                        break  # first processor block is enough
                    continue
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def classify_isa(arch: str, flags: set[str]) -> str:
    if arch in ("x86_64", "amd64"):
        for cpu, needed in X86_ISA_CLASSES:
            if all(flag in flags for flag in needed):
                return cpu
    return "generic"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def fingerprint_from_flags(
    arch: str, vendor: str, cpu_model: str, flags: set[str], num_cores: int, llvm_host_cpu: str
) -> DeviceFingerprint:
    """Fingerprint from what was read about a CPU, here or on a remote device (/proc/cpuinfo flag names)."""
    isa_class = classify_isa(arch, flags)
    mcpu = isa_class if isa_class != "generic" else llvm_host_cpu
    return DeviceFingerprint(
        arch=arch,
        vendor=vendor,
        cpu_model=cpu_model,
        isa_class=isa_class,
        flags=tuple(sorted(f for f in CODEGEN_FLAGS if f in flags)),
        num_cores=num_cores,
        llvm_host_cpu=llvm_host_cpu,
        target={"kind": "llvm", "mcpu": mcpu, "num-cores": num_cores},
    )


def local_fingerprint() -> DeviceFingerprint:
    """Fingerprint of the machine this process runs on."""
    from tvm.target import codegen

    info = _read_cpuinfo()
    return fingerprint_from_flags(
        arch=platform.machine(),
        vendor=info.get("vendor_id", "unknown"),
        cpu_model=info.get("model name", "unknown"),
        flags=set((info.get("flags") or info.get("Features") or "").split()),
        num_cores=usable_cores(),
        llvm_host_cpu=str(codegen.llvm_get_system_cpu()),
    )
