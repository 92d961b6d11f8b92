"""Correctness of compiled schedules against each family's NumPy reference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import Schedule

DEFAULT_RTOL = 1e-3  # float32 vs float64 reference; winograd's transforms cost ~1e-4


class WrongResultError(MetatuneError):
    """A compiled schedule disagrees with the NumPy reference."""


def output_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute error relative to the largest reference magnitude."""
    scale = max(float(np.max(np.abs(ref))), 1e-6)
    return float(np.max(np.abs(out.astype(np.float64) - ref))) / scale


def worst_output_error(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> float:
    """The largest `output_error` over several outputs; NaN if any is (Python's `max` would drop a NaN
    that is not first)."""
    return float(np.max([output_error(o, e) for o, e in zip(outputs, expected)]))


def device_type(target: "tvm.target.Target") -> str:
    """The runtime device a target's kernels run on: `cuda` for CUDA targets, else `cpu`."""
    return "cuda" if target.kind.name == "cuda" else "cpu"


def run_on_inputs(rt_mod: Any, workload: Workload, inputs: list[np.ndarray], out_shape: tuple[int, ...],
                  device: "str | tvm.runtime.Device" = "cpu") -> np.ndarray:
    """Run a compiled `main(inputs..., out)` on `device` (a kind: its device 0; or a device, a remote one
    too) and return the output. The output starts as NaN, so that an element the kernel never writes
    fails the check (from zeros it would pass wherever the reference is 0: half a ReLU's outputs)."""
    import tvm

    dev = tvm.device(device, 0) if isinstance(device, str) else device
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.full(out_shape, np.nan, "float32"), dev)
    rt_mod["main"](*args, out)
    return out.numpy()


class ReferenceCheck:
    """Random inputs and the expected output of one workload, computed once."""

    def __init__(self, workload: Workload, seed: int = 0, rtol: float = DEFAULT_RTOL, device: str = "cpu") -> None:
        self.workload = workload
        self.rtol = rtol
        self.device = device
        self.inputs = workload.random_inputs(seed)
        self.expected = workload.reference(self.inputs)

    def error(self, rt_mod: Any, device: "tvm.runtime.Device | None" = None) -> float:
        out = run_on_inputs(rt_mod, self.workload, self.inputs, self.expected.shape,
                            self.device if device is None else device)
        return output_error(out, self.expected)

    def passes(self, rt_mod: Any, device: "tvm.runtime.Device | None" = None) -> tuple[bool, float]:
        err = self.error(rt_mod, device)
        return bool(np.isfinite(err) and err <= self.rtol), err


def check_schedule(workload: Workload, sch: "Schedule", target: "tvm.target.Target", rtol: float = DEFAULT_RTOL) -> float:
    """Compile a schedule, run it on random inputs and raise if it disagrees with NumPy."""
    import tvm

    rt_mod = tvm.compile(sch.mod, target=target)
    ok, err = ReferenceCheck(workload, rtol=rtol, device=device_type(target)).passes(rt_mod)
    return _checked(workload, ok, err, rtol)


def _checked(workload: Workload, ok: bool, err: float, rtol: float) -> float:
    if not ok:
        raise WrongResultError(f"{workload}: max relative error {err:.2e} exceeds {rtol:g}")
    return err


def check_schedule_remotely(workload: Workload, sch: "Schedule", target: "tvm.target.Target", session: Any,
                            rtol: float = DEFAULT_RTOL) -> float:
    """`check_schedule` with the kernel run on the CPU behind an RPC `session`: for a device whose
    instructions this machine lacks (its kernels would die here on an illegal instruction)."""
    import tempfile

    import tvm

    rt_mod = tvm.compile(sch.mod, target=target)
    with tempfile.TemporaryDirectory(prefix="metatune-check-") as tmp:
        path = f"{tmp}/kernel.so"
        rt_mod.export_library(path)
        session.upload(path)
    remote = session.load_module("kernel.so")
    ok, err = ReferenceCheck(workload, rtol=rtol).passes(remote, session.cpu(0))
    return _checked(workload, ok, err, rtol)
