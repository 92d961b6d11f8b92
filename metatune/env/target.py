"""TVM targets from what a user types, and the CPU target classes metatune supports.

TVM 0.27 takes targets as JSON dicts or tags (`nvidia/nvidia-h100`); the command-line form
`llvm -mcpu=znver3 -num-cores=2` that most tutorials show now raises. `--target` accepts all
three, so a target copied from TVM's documentation or from `metatune device` works as written.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from metatune import MetatuneError

if TYPE_CHECKING:
    import tvm

# One target per CPU target class whose design spaces differ (vector width, rfactor choices,
# arm_cpu schedule rules). The super-graph template is probed on all of them and the tests
# check every family on each, so a model trained on one machine can encode programs of any.
CPU_TARGET_CLASSES: dict[str, dict[str, Any]] = {
    "avx512": {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2},
    "avx2-intel": {"kind": "llvm", "mcpu": "haswell", "num-cores": 2},
    "avx2-amd": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2},
    "sse": {"kind": "llvm", "mcpu": "x86-64", "num-cores": 2},
    "neon": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"], "num-cores": 2},
}

# One target per CUDA class whose design spaces can differ (compute capability decides which
# schedule rules apply); the GPU super-graph template is probed on both.
GPU_TARGET_CLASSES: dict[str, str] = {
    "sm90": "nvidia/nvidia-h100",
    "sm75": "nvidia/geforce-rtx-2080-ti",
}

_LIST_OPTIONS = {"mattr", "keys", "libs", "cl-opt"}


class TargetError(MetatuneError):
    """A target that TVM cannot parse, or one this machine cannot run."""


def _cli_value(key: str, value: str) -> Any:
    if key in _LIST_OPTIONS:
        return [v for v in value.split(",") if v]
    if value.lstrip("-").isdigit():
        return int(value)
    if value in ("true", "false"):
        return value == "true"
    return value


def target_dict_from_cli(text: str) -> dict[str, Any]:
    """`llvm -mcpu=znver3 -num-cores=2 -mattr=+avx2,+fma` -> TVM's JSON form."""
    kind, *options = text.split()
    config: dict[str, Any] = {"kind": kind}
    for option in options:
        if not option.startswith("-"):
            raise TargetError(f"bad target {text!r}: option {option!r} should look like -key=value")
        key, sep, value = option.lstrip("-").partition("=")
        config[key] = _cli_value(key, value) if sep else True
    return config


def target_spec(text: str | dict[str, Any]) -> str | dict[str, Any]:
    """What the user wrote, before TVM fills in defaults: a dict, or a tag or kind name. Tells
    `cuda` (this machine's GPU) from a target that names one (`{"kind": "cuda", "arch": "sm_90"}`)."""
    if not isinstance(text, str):
        return text
    stripped = text.strip()
    if not stripped:
        raise TargetError("empty --target")
    if stripped.startswith("{"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as err:
            raise TargetError(f"bad target JSON {stripped!r}: {err}") from None
    if " -" in f" {stripped}" and " " in stripped:
        return target_dict_from_cli(stripped)
    return stripped


def parse_target(text: str | dict[str, Any]) -> "tvm.target.Target":
    """A TVM target from a JSON dict (or its text), a tag, a kind name, or the CLI string form."""
    import tvm

    spec = target_spec(text)
    try:
        target = tvm.target.Target(spec)
    except Exception as err:  # noqa: BLE001 - TVM raises several error types for a bad target
        last = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        raise TargetError(f"TVM cannot make a target of {text!r}: {last}") from None
    _check_llvm_cpu(target, text)
    cores = target.attrs.get("num-cores")
    if cores is not None and int(cores) < 1:
        raise TargetError(f"bad target {text!r}: num-cores is {int(cores)}, and a device has at least 1 core")
    return target


def _check_llvm_cpu(target: "tvm.target.Target", text: str | dict[str, Any]) -> None:
    """LLVM only warns about an unknown -mcpu and compiles for a generic CPU: refuse it instead."""
    from tvm.target import codegen

    if target.kind.name != "llvm" or "mcpu" not in target.attrs:
        return
    mcpu = str(target.attrs["mcpu"])
    triple = str(target.attrs.get("mtriple", "")) or str(codegen.llvm_get_system_triple())
    if not codegen.llvm_is_valid_cpu(mcpu, triple):
        raise TargetError(f"-mcpu={mcpu} in target {text!r} is not a CPU LLVM knows for {triple}")


def target_json(target: "tvm.target.Target") -> dict[str, Any]:
    """The target as plain JSON that recreates it: its attributes less those TVM derives
    (`keys`, `feature.*`) and an empty tag."""
    out: dict[str, Any] = {}
    for key, value in target.export().items():
        key = str(key)
        if key == "keys" or key.startswith("feature.") or (key == "tag" and not str(value)):
            continue
        if isinstance(value, (bool, int, float)):
            out[key] = value
        elif isinstance(value, str) or not hasattr(value, "__iter__"):
            out[key] = str(value)
        else:
            out[key] = [str(v) for v in value]
    return out
