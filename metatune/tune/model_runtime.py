"""Run a compiled model on the CPU, check it against PyTorch, and time it.

TVM uses every usable core (TVM_NUM_THREADS, set by the Measurer before the runtime starts its
thread pool); a timing is the median of repeated runs, each repeat at least `min_repeat_ms`
long. PyTorch eager is timed against it by `metatune.measure.reference_timing`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from metatune.measure.check import WrongResultError, output_error
from metatune.measure.measurer import median_latency

if TYPE_CHECKING:
    import torch

MODEL_RTOL = 1e-4  # float32 on both sides; BatchNorm folding alone costs ~1e-6


class CompiledModel:
    """A compiled Relax model on the Relax VM (CPU), called with NumPy inputs."""

    def __init__(self, executable: Any) -> None:
        import tvm
        from tvm import relax

        self.device = tvm.cpu(0)
        self.vm = relax.VirtualMachine(executable, self.device)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        import tvm

        out = self.vm["main"](tvm.runtime.tensor(x, self.device))
        while not hasattr(out, "numpy"):  # the frontend returns a tuple of outputs
            out = out[0]
        return out.numpy()

    def latency_ms(self, x: np.ndarray, repeat: int, min_repeat_ms: int = 50) -> float:
        import tvm

        timer = self.vm.time_evaluator("main", self.device, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return median_latency(timer(tvm.runtime.tensor(x, self.device)).results) * 1e3


def verify(compiled: CompiledModel, module: "torch.nn.Module", example: "torch.Tensor",
           rtol: float = MODEL_RTOL) -> tuple[float, float]:
    """(max error relative to the largest output magnitude, seconds of the TVM run); raises
    WrongResultError when TVM's output disagrees with PyTorch's."""
    import torch

    with torch.no_grad():
        expected = module(example).numpy().astype(np.float64)
    t0 = time.perf_counter()
    out = compiled(example.numpy())
    run_s = time.perf_counter() - t0
    if out.shape != expected.shape:
        raise WrongResultError(f"compiled model returns shape {out.shape}, PyTorch {expected.shape}")
    err = output_error(out, expected)
    if not (np.isfinite(err) and err <= rtol):
        raise WrongResultError(f"compiled model disagrees with PyTorch: max relative error {err:.2e} > {rtol:g}")
    return err, run_s


def repeats_for(run_s: float, budget_s: float = 5.0, lo: int = 3, hi: int = 15) -> int:
    """How many timed repeats fit the time budget, given one run's time."""
    return int(min(hi, max(lo, budget_s // max(run_s, 1e-6))))
