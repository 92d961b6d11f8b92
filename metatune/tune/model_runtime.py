"""Run a compiled model on the CPU, check it against PyTorch, and time both the same way.

Both sides use every usable core (TVM through TVM_NUM_THREADS, set by the Measurer before
the runtime starts its thread pool; PyTorch through torch.set_num_threads), and both report
the median of repeated runs, each repeat at least `min_repeat_ms` long.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from metatune.measure.check import WrongResultError, output_error

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
        return statistics.median(timer(tvm.runtime.tensor(x, self.device)).results) * 1e3


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


def torch_latency_ms(module: "torch.nn.Module", example: "torch.Tensor", threads: int, repeat: int,
                     min_repeat_ms: int = 50) -> float:
    """PyTorch eager: median over `repeat` repeats, each averaging enough calls to last
    `min_repeat_ms` (as TVM's time_evaluator does); the caller's thread count is restored."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            return _median_ms(lambda: module(example), repeat, min_repeat_ms)
    finally:
        torch.set_num_threads(previous)


def _median_ms(fn: Callable[[], Any], repeat: int, min_repeat_ms: int) -> float:
    fn()  # warm-up, as time_evaluator discards its first call
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    number = max(1, int(np.ceil(min_repeat_ms / 1e3 / max(once, 1e-9))))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples) * 1e3
