"""Reference points every tuned result is read against: the best library and the hardware.

* PyTorch eager (oneDNN on x86) on the same operator, shapes and layout, with as many threads
  as TVM uses; its output is checked against the workload's NumPy reference, so the latency
  belongs to the same computation.
* The machine's measured fp32 peak: a large matmul in PyTorch.
Timing uses `torch.utils.benchmark.Timer.blocked_autorange` (median of blocks), in two passes:
noise on a shared machine only slows a kernel down, so the faster pass is kept, and the spread
between the passes is recorded so that a reference measured on a busy machine is visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from metatune.workload.operators import Workload

if TYPE_CHECKING:
    import torch
    from torch.utils.benchmark import Timer

PEAK_MATMUL_SIZE = 4096
TIMING_PASSES = 2
SPREAD_WARNING = 0.10


@dataclass(frozen=True)
class TorchReference:
    latency_us: float
    gflops: float
    max_rel_error: float
    spread: float

    @property
    def disturbed(self) -> bool:
        """True when the two timing passes disagree: the machine was probably busy."""
        return self.spread > SPREAD_WARNING


def _timed_passes(timer: "Timer", min_run_time_s: float) -> tuple[float, float]:
    """Seconds of the faster pass and the relative spread (slower / faster - 1) between passes."""
    medians = [timer.blocked_autorange(min_run_time=min_run_time_s).median for _ in range(TIMING_PASSES)]
    return min(medians), max(medians) / min(medians) - 1


def torch_operator(workload: Workload) -> Callable[..., "torch.Tensor"]:
    """The PyTorch call computing the same function as the workload's TOPI compute."""
    import torch
    import torch.nn.functional as F

    p = workload.params
    family = workload.family
    if family == "conv1d":
        return lambda x, w: F.conv1d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "conv1d_transpose":
        return lambda x, w: F.conv_transpose1d(x, w, stride=p["stride"], padding=p["pad"])
    if family in ("conv2d", "conv2d_winograd"):
        return lambda x, w: F.conv2d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "conv2d_transpose":
        return lambda x, w: F.conv_transpose2d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "depthwise_conv2d":
        return lambda x, w: F.conv2d(x, w, stride=p["stride"], padding=p["pad"], groups=p["c"])
    if family == "dense":
        return lambda x, w: F.linear(x, w)
    if family == "dense_bias_relu":
        return lambda x, w, b: torch.relu(F.linear(x, w, b))
    if family == "batch_matmul":
        return lambda a, b: torch.bmm(a, b.transpose(1, 2))
    raise ValueError(f"no PyTorch reference for family {family!r}")


def torch_reference(workload: Workload, threads: int, min_run_time_s: float = 1.0) -> TorchReference:
    """Median latency of PyTorch eager on the workload, after checking its output against NumPy."""
    import torch
    from torch.utils.benchmark import Timer

    inputs = workload.random_inputs(seed=0)
    tensors = [torch.from_numpy(x) for x in inputs]
    op = torch_operator(workload)
    with torch.no_grad():
        out = op(*tensors).numpy()
    expected = workload.reference(inputs)
    max_rel_error = float(np.max(np.abs(out - expected)) / max(np.max(np.abs(expected)), 1e-12))
    if max_rel_error > 1e-4:
        raise AssertionError(f"PyTorch reference of {workload} differs from NumPy (max rel. error {max_rel_error:.2e})")
    timer = Timer(stmt="with torch.no_grad(): op(*tensors)", globals={"op": op, "tensors": tensors, "torch": torch},
                  num_threads=threads)
    seconds, spread = _timed_passes(timer, min_run_time_s)
    return TorchReference(round(seconds * 1e6, 3), round(workload.flops / seconds / 1e9, 3), max_rel_error,
                          round(spread, 4))


def fp32_peak_gflops(threads: int, size: int = PEAK_MATMUL_SIZE, min_run_time_s: float = 2.0) -> float:
    """Measured fp32 throughput of a size³ matmul: what this machine sustains in practice."""
    import torch
    from torch.utils.benchmark import Timer

    a, b = torch.randn(size, size), torch.randn(size, size)
    timer = Timer(stmt="torch.mm(a, b)", globals={"a": a, "b": b, "torch": torch}, num_threads=threads)
    seconds, _ = _timed_passes(timer, min_run_time_s)
    return round(2 * size**3 / seconds / 1e9, 1)
