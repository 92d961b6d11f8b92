"""Device fingerprint: what the CPU is, which TVM target to compile for, and a stable id.

The id `<arch>-<cpu class>-<cores>c` names the microarchitecture class (an LLVM CPU name:
`sapphirerapids` for an Intel Sapphire Rapids, `znver3` for an AMD Zen 3) rather than the
marketing model, so that every VM of one CPU generation resolves to the same dataset and zoo
checkpoint, while machines whose costs differ (another vendor, generation or core count) get
different ids. The class is read from the vendor, the CPU family and the flags, because
hypervisors often report a model number that LLVM maps to the wrong CPU (a Sapphire Rapids
guest can be detected as "rocketlake") and hide the model name ("AMD EPYC").

A CUDA GPU's id names its compute capability and model instead (`cuda-sm90-h100`, env/gpu.py):
`--target cuda` is this machine's GPU, a tag or a target JSON names one without it being here.

A device can also be a target other than this machine (`--target`): its fingerprint then
comes from the target alone, and `require_runnable` refuses to measure on it here.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from metatune import MetatuneError
from metatune.env.gpu import UNKNOWN_MODEL, GpuInfo, compute_class, gpu_model, gpu_target, local_gpu, tag_for_config
from metatune.env.target import TargetError, parse_target, target_json, target_spec

# Flags that change what LLVM may emit for the tensor programs we tune.
CODEGEN_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd", "sve",
)

# LLVM's feature names where /proc/cpuinfo spells them differently.
LLVM_TO_CPUINFO = {
    "sse4.2": "sse4_2", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16", "amx-tile": "amx_tile", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8",
}

# Intel classes: (LLVM cpu, flags it needs), most capable first; the first whose flags are all present wins.
X86_ISA_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sapphirerapids", ("avx512f", "avx512_bf16", "avx512_fp16")),
    ("cooperlake", ("avx512f", "avx512_bf16", "avx512_vnni")),
    ("cascadelake", ("avx512f", "avx512_vnni")),
    ("skylake-avx512", ("avx512f", "avx512bw", "avx512vl")),
    ("haswell", ("avx2", "fma")),
    ("x86-64", ()),
)

# AMD Zen classes by CPU family (and model for family 0x17), with the flags each implies.
AMD_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("znver5", ("avx512f", "avx2", "fma")),
    ("znver4", ("avx512f", "avx512bw", "avx512vl", "avx2", "fma")),
    ("znver3", ("avx2", "fma")),
    ("znver2", ("avx2", "fma")),
    ("znver1", ("avx2", "fma")),
)

# Every x86 class from most to least capable: nearness for choosing a checkpoint.
X86_CLASS_ORDER: tuple[str, ...] = (
    "sapphirerapids", "cooperlake", "cascadelake", "skylake-avx512", "znver5", "znver4", "znver3", "znver2",
    "znver1", "haswell", "x86-64",
)


@dataclass(frozen=True)
class DeviceFingerprint:
    """Everything about a device that decides which measurements and models apply to it.

    For a GPU: `cpu_model` is the GPU's name, `isa_class` its compute class (`sm90`), `num_cores` its
    SM count (0: not known from a target alone), `model` what the id names (`h100`)."""

    arch: str
    vendor: str
    cpu_model: str
    isa_class: str  # the CPU class the id names: an LLVM CPU name (sapphirerapids, znver3), "generic"
    flags: tuple[str, ...]
    num_cores: int
    llvm_host_cpu: str
    target: dict[str, Any] = field(default_factory=dict)
    model: str = ""  # a GPU's model (env/gpu.py); empty for a CPU, which its class names
    memory_bytes: int = 0  # a GPU's memory, 0 when not known

    @property
    def device_id(self) -> str:
        if self.model:
            return f"{self.arch}-{self.isa_class}-{self.model}"
        return f"{self.arch}-{self.isa_class}-{self.num_cores}c"

    @property
    def isa_family(self) -> str:
        """Devices of one family can share code: same architecture and vector ISA level."""
        return self.arch

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        if not self.model:  # a CPU: its JSON stays what cards and RPC servers have always written
            del data["model"], data["memory_bytes"]
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


def _amd_class(flags: set[str], cpu_family: int | None, model: int | None, llvm_host_cpu: str) -> str | None:
    """The Zen generation (from the CPU family when known, else LLVM's host CPU name, else flags), as far
    as the flags allow: a hypervisor can hide AVX-512 from a Zen 4/5 guest, whose kernels compiled for
    its generation would then die on an illegal instruction, so such a guest is the best class it can run."""
    generation = _zen_generation(flags, cpu_family, model, llvm_host_cpu)
    needed = dict(AMD_CLASSES)
    for name in (generation, "znver3"):
        if name in needed and all(flag in flags for flag in needed[name]):
            return name
    return None


def _zen_generation(flags: set[str], cpu_family: int | None, model: int | None, llvm_host_cpu: str) -> str | None:
    if cpu_family == 0x1A:
        return "znver5"
    if cpu_family == 0x19:
        return "znver4" if "avx512f" in flags else "znver3"
    if cpu_family == 0x17:
        return "znver2" if model is not None and model >= 0x30 else "znver1"
    if llvm_host_cpu.startswith("znver"):
        return llvm_host_cpu
    if "avx2" in flags:
        return "znver4" if "avx512f" in flags else "znver3" if "vaes" in flags else "znver2"
    return None


def classify_isa(arch: str, flags: set[str], vendor: str = "unknown", cpu_family: int | None = None,
                 model: int | None = None, llvm_host_cpu: str = "") -> str:
    """The CPU class a device id names (an LLVM CPU name), "generic" outside x86-64."""
    if arch not in ("x86_64", "amd64"):
        return "generic"
    if vendor == "AuthenticAMD":
        amd = _amd_class(flags, cpu_family, model, llvm_host_cpu)
        if amd is not None:
            return amd
    for cpu, needed in X86_ISA_CLASSES:
        if all(flag in flags for flag in needed):
            return cpu
    return "x86-64"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def fingerprint_from_flags(
    arch: str, vendor: str, cpu_model: str, flags: set[str], num_cores: int, llvm_host_cpu: str,
    cpu_family: int | None = None, model: int | None = None,
) -> DeviceFingerprint:
    """Fingerprint from what was read about a CPU, here or on a remote device (/proc/cpuinfo flag names)."""
    isa_class = classify_isa(arch, flags, vendor, cpu_family, model, llvm_host_cpu)
    mcpu = isa_class if isa_class != "generic" else llvm_host_cpu
    return DeviceFingerprint(
        arch=arch,
        vendor=vendor,
        cpu_model=cpu_model,
        isa_class=isa_class,
        flags=_codegen_flags(flags),
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
        cpu_family=_int_or_none(info.get("cpu family")),
        model=_int_or_none(info.get("model")),
    )


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _target_arch(config: dict[str, Any], host_arch: str) -> str:
    triple = str(config.get("mtriple", ""))
    return triple.split("-")[0] if triple else host_arch


def _llvm_flags(target: "Any") -> set[str]:
    """The target's CPU features in /proc/cpuinfo spelling (what LLVM may emit for it)."""
    from tvm.target import codegen

    features = {str(f) for f in codegen.llvm_get_cpu_features(target)}
    flags = {LLVM_TO_CPUINFO.get(f, f) for f in features}
    if "neon" in features:
        flags.add("asimd")
    return flags


def fingerprint_for_target(text: str | None, host: DeviceFingerprint | None = None) -> DeviceFingerprint:
    """The device a `--target` names: this machine when None; this machine compiled for another
    CPU class or features when the target runs here (`x86_64-znver3-as-haswell-2c`,
    `x86_64-sapphirerapids-as-generic_avx2_fma-2c`); else a device known from
    the target alone (`aarch64-generic-2c`), which can be encoded for but not measured here.
    A CUDA target: `cuda` (no arch) is this machine's GPU; a tag, or a target equal to one, names
    its GPU (`cuda-sm90-h100`); any other arch is `cuda-smXY-generic`."""

    host = host or local_fingerprint()
    if text is None:
        return host
    spec = target_spec(text)
    if spec == "cuda" or (isinstance(spec, dict) and spec.get("kind") == "cuda" and "arch" not in spec):
        return _local_gpu_fingerprint(text, spec)
    target = parse_target(text)
    config = target_json(target)
    kind = str(config["kind"])
    if kind == "cuda":
        tag = spec if isinstance(spec, str) and spec.startswith("nvidia/") else tag_for_config(config)
        return gpu_fingerprint(tag or "unknown", config, model=gpu_model(tag) if tag else UNKNOWN_MODEL)
    if kind != "llvm":
        name = str(config.get("arch") or kind)
        return DeviceFingerprint(arch=kind, vendor="unknown", cpu_model="unknown", isa_class=name, flags=(),
                                 num_cores=int(config.get("num-cores", 1)), llvm_host_cpu="", target=config)
    arch = _target_arch(config, host.arch)
    if arch == host.arch and "mcpu" not in config and "mattr" not in config and "mcpu" in host.target:
        # LLVM's default CPU is "generic" (SSE2 on x86-64): plain `llvm` here means this machine's CPU
        config["mcpu"] = host.target["mcpu"]
        target = parse_target(config)
    flags = _llvm_flags(target) if "mcpu" in config or "mattr" in config else set(host.flags)
    cores = int(config.setdefault("num-cores", host.num_cores if arch == host.arch else 1))
    mcpu = str(config.get("mcpu", ""))
    if arch == host.arch and mcpu == str(host.target.get("mcpu", "")) and "mattr" not in config:
        # This machine's own class, as measuring without --target compiles for it. Not checked against the
        # flags: LLVM's features of a class can name extensions a guest does not report and that tensor
        # programs never use (Sapphire Rapids' AMX), while the class itself was chosen from this CPU's flags.
        return DeviceFingerprint(arch=arch, vendor=host.vendor, cpu_model=host.cpu_model,
                                 isa_class=host.isa_class, flags=host.flags, num_cores=cores,
                                 llvm_host_cpu=host.llvm_host_cpu, target=config)
    if arch == host.arch and not missing_flags(flags, host):
        # Compiled for another class, or with other features, the programs use only those instructions.
        return DeviceFingerprint(arch=arch, vendor=host.vendor, cpu_model=host.cpu_model,
                                 isa_class=f"{host.isa_class}-as-{mcpu or 'generic'}{_features_suffix(config)}",
                                 flags=_codegen_flags(flags), num_cores=cores, llvm_host_cpu=host.llvm_host_cpu,
                                 target=config)
    return DeviceFingerprint(arch=arch, vendor="unknown", cpu_model="unknown", isa_class=mcpu or "generic",
                             flags=_codegen_flags(flags), num_cores=cores, llvm_host_cpu="", target=config)


def _features_suffix(config: dict[str, Any]) -> str:
    """`-mattr=+avx2,+fma,-avx512f` as `_avx2_fma_no.avx512f`: in any order the same, and only characters a
    zoo id may hold."""
    names = sorted(f[1:] if f.startswith("+") else f"no.{f[1:]}" if f.startswith("-") else f
                   for f in map(str, config.get("mattr", ())))
    return "".join("_" + re.sub(r"[^A-Za-z0-9.]", ".", name) for name in names)


def gpu_fingerprint(name: str, target: dict[str, Any], sm_count: int = 0, memory_bytes: int = 0,
                    model: str | None = None) -> DeviceFingerprint:
    """A CUDA GPU by name (or tag) and target; the model defaults to the one the name says."""
    return DeviceFingerprint(arch="cuda", vendor="NVIDIA", cpu_model=name,
                             isa_class=compute_class(str(target.get("arch", ""))), flags=(), num_cores=sm_count,
                             llvm_host_cpu="", target=target, model=model or gpu_model(name),
                             memory_bytes=memory_bytes)


def fingerprint_for_gpu(info: GpuInfo) -> DeviceFingerprint:
    """A GPU the driver describes (env/gpu.py `local_gpu`): its name, SM count, memory and full target."""
    return gpu_fingerprint(info.name, gpu_target(info), info.sm_count, info.memory_bytes)


def _local_gpu_fingerprint(text: str | dict[str, Any], spec: str | dict[str, Any]) -> DeviceFingerprint:
    """`cuda` without an arch: this machine's GPU, with the options the target adds."""
    info = local_gpu()
    if info is None:
        raise TargetError(f"target {text!r} is this machine's CUDA GPU, and it has none TVM can use; name the GPU "
                          "instead: a tag such as nvidia/nvidia-h100, or '{\"kind\": \"cuda\", \"arch\": \"sm_90\"}'")
    fp = fingerprint_for_gpu(info)
    if isinstance(spec, dict) and set(spec) - {"kind"}:
        config = target_json(parse_target({**fp.target, **spec}))
        fp = gpu_fingerprint(info.name, config, info.sm_count, info.memory_bytes)
    return fp


def _codegen_flags(flags: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(f for f in CODEGEN_FLAGS if f in set(flags)))


def missing_flags(flags: Iterable[str], host: DeviceFingerprint) -> list[str]:
    """Code-generation flags a target uses that this host's CPU lacks."""
    return sorted(f for f in set(flags) & set(CODEGEN_FLAGS) if f not in host.flags)


def require_runnable(device: DeviceFingerprint, host: DeviceFingerprint | None = None) -> None:
    """Refuse, in one line, to measure on a device this machine (or the RPC server `host`) cannot run."""

    remote = host is not None
    host = host or local_fingerprint()
    if device.arch == "cuda":
        _require_gpu(device)
        return
    if device.arch in ("rocm", "vulkan", "opencl", "metal"):
        raise MetatuneError(f"target {device.target} runs on {device.arch}: metatune measures CPUs (llvm) and "
                            "NVIDIA GPUs (cuda); it can encode programs for this target but not time them")
    if device.arch != host.arch:
        raise MetatuneError(f"target {device.target} is for {device.arch}; this machine is {host.arch} "
                            "and cannot run its kernels (encode for it, or measure on such a device over RPC)")
    missing = missing_flags(device.flags, host)
    if missing:
        raise MetatuneError(f"target {device.target} uses {', '.join(missing)}, which this CPU "
                            f"({host.device_id}) lacks: its kernels cannot run here")
    threads = host.num_cores if remote else int(os.environ.get("TVM_NUM_THREADS") or host.num_cores)
    if device.num_cores != threads:
        # Kernels run on that many threads whatever the target says: timings of 2 threads filed as a 4c device.
        how = "TVM_NUM_THREADS says" if threads != host.num_cores else "this process may use"
        raise MetatuneError(f"target {device.target} is a {device.num_cores}-core device, but kernels here run on "
                            f"{threads} threads ({how}; {host.device_id}): give -num-cores={threads}, or run "
                            f"metatune on {device.num_cores} cores (taskset -c) of a machine that has them")


def _require_gpu(device: DeviceFingerprint) -> None:
    """Measure a GPU's programs only on that GPU: an A100's timings filed as an H100's would mix devices."""
    info = local_gpu()
    if info is None:
        raise MetatuneError(f"target {device.device_id} needs an NVIDIA GPU and this machine has none TVM can use: "
                            "encode for it here, measure on such a GPU (or over RPC)")
    here = fingerprint_for_gpu(info)
    if device.model != UNKNOWN_MODEL and device.device_id != here.device_id:
        raise MetatuneError(f"target {device.target} is a {device.device_id}; this machine's GPU is {info.name} "
                            f"({here.device_id}): use --target cuda, or measure on such a GPU")
