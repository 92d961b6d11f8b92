"""Reference points every tuned result is read against: the best library and the hardware.

* PyTorch eager (oneDNN on x86) on the same operator, shapes and layout, with as many threads
  as TVM uses; its output is checked against the workload's NumPy reference, so the latency
  belongs to the same computation.
* The machine's measured fp32 peak: a large matmul, the fastest of PyTorch's GEMM libraries
  (`torch.mm`, and oneDNN on a CPU: PyTorch's MKL runs its AVX2 code on AMD CPUs, about half
  of what an AVX-512 Zen core does, and a "peak" that tuned kernels beat twice is no peak).
Both are timed by `metatune.measure.reference_timing` (a fresh process, several passes, their
median with its 95% interval); an entry timed unstably (a wide interval, or other processes on
the cores) is marked `unstable`, and the tables give no ratio against it. Each entry of
references.json keeps every pass.
"""

from __future__ import annotations

from typing import Any

from metatune.measure.reference_timing import (
    MAX_PASSES,
    ONEDNN_LIBRARY,
    PASS_S,
    TORCH_LIBRARY,
    ReferenceSpec,
    compare,
)
from metatune.workload.operators import Workload

PEAK_MATMUL_SIZE = 4096
PEAK_PASS_S = 1.0  # a 4096³ matmul takes about half a second on two cores


def torch_reference(workload: Workload, threads: int, pass_s: float = PASS_S, device: str = "cpu",
                    max_passes: int = MAX_PASSES) -> dict[str, Any]:
    """PyTorch eager on the workload (on `device`: cpu, or cuda for cuDNN/cuBLAS), checked against
    NumPy: its references.json entry."""
    timing = compare(ReferenceSpec.operator(workload, threads, pass_s, device), None, max_passes=max_passes)
    assert timing.flops is not None
    estimate = timing.reference.estimate
    median_s = timing.reference.median_ms / 1e3
    return {"workload": str(workload), "latency_us": round(median_s * 1e6, 3),
            "gflops": round(timing.flops / median_s / 1e9, 3), "max_rel_error": timing.max_rel_error,
            "spread": round(timing.reference.spread, 4), "unstable": timing.unstable, "reasons": list(timing.reasons),
            "passes_us": [round(ms * 1e3, 3) for ms in timing.reference.passes_ms],
            "interval_us": [round(ms * 1e3, 3) for ms in (estimate.low, estimate.high)],
            "other_cores": round(timing.other_cores, 3),
            "load_average": [round(load, 2) for load in timing.load_average]}


def peak_libraries(device: str) -> tuple[str, ...]:
    """The GEMM libraries timed for the peak: `torch.mm` everywhere, oneDNN's too on a CPU."""
    return (TORCH_LIBRARY, ONEDNN_LIBRARY) if device == "cpu" else (TORCH_LIBRARY,)


def fp32_peak(threads: int, size: int = PEAK_MATMUL_SIZE, device: str = "cpu",
              max_passes: int = MAX_PASSES) -> dict[str, Any]:
    """Measured fp32 throughput of a size³ matmul (what this machine, or its GPU, sustains in
    practice), the fastest library's: `fp32_peak_gflops` (its median pass) and `fp32_peak`
    (its passes, spread, stability, and every library's median GFLOPS)."""
    flops = 2.0 * size**3
    timings = {library: compare(ReferenceSpec("matmul", str(size), threads, PEAK_PASS_S, device, library=library), None,
                                max_passes=max_passes)
               for library in peak_libraries(device)}
    library, timing = min(timings.items(), key=lambda item: item[1].reference.median_ms)
    passes = [round(flops / ms / 1e6, 1) for ms in timing.reference.passes_ms]
    estimate = timing.reference.estimate
    return {"fp32_peak_gflops": round(flops / timing.reference.median_ms / 1e6, 1),
            "fp32_peak": {"size": size, "library": library, "passes_gflops": passes,
                          "libraries_gflops": {name: round(flops / t.reference.median_ms / 1e6, 1)
                                               for name, t in timings.items()},
                          "spread": round(timing.reference.spread, 4),
                          "interval_gflops": [round(flops / ms / 1e6, 1) for ms in (estimate.high, estimate.low)],
                          "other_cores": round(timing.other_cores, 3),
                          "unstable": any(t.unstable for t in timings.values()),
                          "reasons": [f"{name}: {reason}" for name, t in timings.items() for reason in t.reasons],
                          "load_average": [round(load, 2) for load in timing.load_average]}}


def peak_unstable(references: dict[str, Any]) -> bool:
    """Whether the fp32 peak's timing was unstable (references measured before passes were kept: no)."""
    return bool(references.get("fp32_peak", {}).get("unstable"))


def warning(label: str, entry: dict[str, Any]) -> str | None:
    """The line to show when a reference's timing was unstable, else None."""
    if not entry.get("unstable"):
        return None
    return (f"warning: {label} is unstable ({'; '.join(entry['reasons'])}): the machine was busy; the tables "
            "give no ratio against it, re-measure it on an idle machine")


def changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Markdown: each reference before and after re-measuring, and by how much it moved."""
    lines = ["| reference | before | after | change | after: 95% interval | after: spread | after: unstable |",
             "|" + "---|" * 7]

    def row(name: str, before: float | None, after: float, interval: list[float], spread: float,
            unstable: bool) -> None:
        change = "—" if not before else f"{after / before - 1:+.1%}"
        lines.append(f"| {name} | {'—' if before is None else f'{before:.1f}'} | {after:.1f} | {change} | "
                     f"{interval[0]:.1f}–{interval[1]:.1f} | {spread:.1%} | {unstable} |")

    if "fp32_peak_gflops" in new:
        peak = new["fp32_peak"]
        row("fp32 peak GFLOPS", old.get("fp32_peak_gflops"), new["fp32_peak_gflops"], peak["interval_gflops"],
            peak["spread"], peak["unstable"])
    for name, entry in new.get("torch", {}).items():
        before = old.get("torch", {}).get(name, {}).get("gflops")
        flops_per_us = entry["gflops"] * entry["latency_us"]  # GFLOPS × µs = kFLOP: the operator's work
        interval = [flops_per_us / latency for latency in reversed(entry["interval_us"])]
        row(f"{name} PyTorch GFLOPS", before, entry["gflops"], interval, entry["spread"], entry["unstable"])
    return "\n".join(lines) + "\n"
