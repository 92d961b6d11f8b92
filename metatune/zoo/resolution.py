"""Choosing the checkpoint for a device: exact match, else the nearest of its ISA family."""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metatune.env.device import AMD_CLASSES, X86_CLASS_ORDER, X86_ISA_CLASSES, DeviceFingerprint, local_fingerprint
from metatune.zoo import index
from metatune.zoo.errors import NoCheckpointError, TemplateVersionError, ZooError, ZooWarning
from metatune.zoo.index import TRAIN_HINT, ZooEntry, describe, read_index

_X86_ORDER = list(X86_CLASS_ORDER)
_INTEL_ORDER = [name for name, _ in X86_ISA_CLASSES]
_AMD_FLAGS = dict(AMD_CLASSES)


def fingerprint_from_id(device_id: str) -> DeviceFingerprint:
    """A best-effort fingerprint from `<arch>-<cpu class>-<N>c` (flags implied by the class), or
    from a GPU's `cuda-sm<XY>-<model>`."""
    arch, _, rest = device_id.partition("-")
    if arch == "cuda":
        compute, _, model = rest.partition("-")
        if not re.fullmatch(r"sm[0-9]+", compute) or not re.fullmatch(r"[a-z0-9]+", model):
            raise ZooError(f"bad device id {device_id!r}: expected cuda-smXY-MODEL, e.g. cuda-sm90-h100")
        return DeviceFingerprint(arch=arch, vendor="NVIDIA", cpu_model=model, isa_class=compute, flags=(),
                                 num_cores=0, llvm_host_cpu="", model=model)
    isa_class, _, cores = rest.rpartition("-")
    if not arch or not isa_class or not re.fullmatch(r"[1-9][0-9]*c", cores):
        raise ZooError(f"bad device id {device_id!r}: expected ARCH-CPU_CLASS-Nc, e.g. x86_64-znver3-2c")
    flags: set[str] = set(_AMD_FLAGS.get(isa_class, ()))
    if isa_class in _INTEL_ORDER:
        for _, needed in X86_ISA_CLASSES[_INTEL_ORDER.index(isa_class):]:
            flags.update(needed)
    return DeviceFingerprint(arch=arch, vendor="unknown", cpu_model="unknown", isa_class=isa_class,
                             flags=tuple(sorted(flags)), num_cores=int(cores[:-1]), llvm_host_cpu=isa_class)


def _isa_distance(a: str, b: str) -> int:
    if a == b:
        return 0
    if a in _X86_ORDER and b in _X86_ORDER:
        return abs(_X86_ORDER.index(a) - _X86_ORDER.index(b))
    return len(_X86_ORDER)


def _vector_tier(flags: set[str]) -> int:
    """Widest SIMD the flags allow: what most decides which schedules win on a CPU."""
    if "avx512f" in flags:
        return 3
    if flags & {"avx", "avx2", "sve"}:
        return 2
    return 1


def _compute_capability(isa_class: str) -> int:
    return int(isa_class[2:]) if re.fullmatch(r"sm[0-9]+", isa_class) else 0


def _closeness(entry: ZooEntry, device: DeviceFingerprint) -> tuple:
    """Sort key, smaller is closer: vector width, ISA class distance, flag overlap (Jaccard),
    core-count ratio, then the newest version. GPUs: compute capability distance, then the newest."""
    if device.arch == "cuda":
        return (abs(_compute_capability(entry.isa_class) - _compute_capability(device.isa_class)), -entry.number)
    a, b = set(entry.flags), set(device.flags)
    jaccard = len(a & b) / len(a | b) if a | b else 1.0
    return (abs(_vector_tier(a) - _vector_tier(b)), _isa_distance(entry.isa_class, device.isa_class), -jaccard,
            abs(math.log2(max(entry.num_cores, 1) / max(device.num_cores, 1))), -entry.number)


@dataclass(frozen=True)
class Resolution:
    """The checkpoint chosen for a device, and why."""

    entry: ZooEntry
    device_id: str
    exact: bool
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"device_id": self.device_id, "exact": self.exact, "warning": self.warning,
                "checkpoint": self.entry.id, "directory": str(self.entry.directory), "entry": self.entry.to_json()}


def resolve(device: DeviceFingerprint | str | None = None, root: Path | None = None, *,
            template_version: str | None = None) -> Resolution:
    """Choose the checkpoint for a device (default: this machine).

    Exact device id, newest version first; else the closest checkpoint of the same ISA family,
    with a ZooWarning (also returned in `Resolution.warning`); else NoCheckpointError. Only
    checkpoints of the code's template version are candidates: others cannot be loaded.
    """
    root = Path(root) if root is not None else index.default_zoo_dir()
    if device is None:
        device = local_fingerprint()
    elif isinstance(device, str):
        device = fingerprint_from_id(device)
    entries = read_index(root)
    family = [e for e in entries if e.isa_family == device.isa_family]
    if not family:
        raise NoCheckpointError(f"no zoo checkpoint for device {device.device_id} (family {device.isa_family}) "
                                f"in {root}; {describe(entries)}; {TRAIN_HINT}")
    code_version = template_version if template_version is not None else index.code_template_version(device.arch)
    usable = [e for e in family if e.template_version == code_version]
    stale = [e for e in family if e.template_version != code_version and e.device_id == device.device_id]
    exact = [e for e in usable if e.device_id == device.device_id]
    if exact:
        return Resolution(max(exact, key=lambda e: e.number), device.device_id, exact=True)
    if usable:
        best = min(usable, key=lambda e: _closeness(e, device))
        shared = len(set(best.flags) & set(device.flags))
        why = (f"compute capability {best.isa_class} vs {device.isa_class}" if device.arch == "cuda" else
               f"ISA {best.isa_class} vs {device.isa_class}, {shared} of {len(set(device.flags))} flags shared, "
               f"{best.num_cores} vs {device.num_cores} cores")
        message = (
            f"no zoo checkpoint for device {device.device_id}; using {best.id} trained on {best.device_id} "
            f"(nearest in the {device.isa_family} family: {why})"
            + (f"; {', '.join(e.id for e in stale)} for this device use(s) an old template" if stale else "")
            + f". Predictions may be less accurate: adapt this one to the device in about 10 min with "
            f"`metatune zoo adapt --from {best.id}`, or train a native one (`make train-zoo DEVICES="
            f"{device.device_id}` with a config train/configs/{device.device_id}.yaml)"
        )
        warnings.warn(message, ZooWarning, stacklevel=2)
        return Resolution(best, device.device_id, exact=False, warning=message)
    newest = max(family, key=lambda e: (e.device_id == device.device_id, e.number))
    raise TemplateVersionError(f"every {device.isa_family} checkpoint (e.g. {newest.id})",
                               newest.template_version, code_version)
