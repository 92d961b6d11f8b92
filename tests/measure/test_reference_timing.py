"""Reference timing: a fresh process, passes alternating with TVM's, `unstable` when the
estimate's interval is wide or other processes used the cores.

Real timings throughout: the TVM side is a compiled kernel timed by TVM's time_evaluator, the
reference is PyTorch in its own process, and the load is real busy-looping processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from typing import Callable

import numpy as np
import pytest

from metatune import MetatuneError
from metatune.env.device import usable_cores
from metatune.measure.reference_timing import (
    MIN_PASSES,
    ONEDNN_LIBRARY,
    OPERATOR_RTOL,
    OTHER_LOAD_LIMIT,
    UNCERTAINTY_LIMIT,
    Estimate,
    ReferenceSpec,
    compare,
    torch_operator,
    wait_until_idle,
)
from metatune.measure.check import output_error
from metatune.workload.operators import FAMILIES, Workload
from tests.conftest import SMALL_SHAPES

WORKLOAD = Workload.parse("dense:m=128,n=128,k=128")
PASS_S = 0.3


def tvm_pass(workload: Workload, target) -> Callable[[], float]:
    """One TVM pass over the workload's unscheduled kernel: milliseconds, median of repeats."""
    import tvm

    rt_mod = tvm.compile(workload.irmodule(), target=target)
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(x, dev) for x in workload.random_inputs(seed=0)]
    out = tvm.runtime.tensor(np.zeros(workload.reference(workload.random_inputs(seed=0)).shape, "float32"), dev)
    timer = rt_mod.jit().time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=int(PASS_S * 1000 / 5))
    return lambda: statistics.median(timer(*args, out).results) * 1e3


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def test_a_reference_taken_while_other_processes_load_the_cores_is_unstable(target):
    """Busy loops on every core start at the second TVM pass and run to the end: both sides are
    slowed alike from then on, so only the CPU time the loops take shows it; the comparison is
    flagged and gives no speed-up."""
    timed = tvm_pass(WORKLOAD, target)
    hogs: list[subprocess.Popen] = []
    passes = 0

    def loaded_from_the_second_pass() -> float:
        nonlocal passes
        passes += 1
        if passes == 2:
            hogs.extend(busy_loops(2 * usable_cores()))
        return timed()

    try:
        # the fewest passes: under this load the interval stays wide, and more passes would only take longer
        comparison = compare(ReferenceSpec.operator(WORKLOAD, usable_cores(), PASS_S), loaded_from_the_second_pass,
                             passes=MIN_PASSES, max_passes=MIN_PASSES)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert len(hogs) == 2 * usable_cores()
    assert comparison.other_cores > OTHER_LOAD_LIMIT * (os.cpu_count() or 1)
    assert comparison.unstable and comparison.speedup is None
    assert any(reason.startswith("other processes kept") for reason in comparison.reasons)
    summary = comparison.summary()
    assert "unstable" in summary and "×" not in summary
    data = comparison.to_json()
    assert data["unstable"] and data["speedup"] is None


def test_the_json_carries_every_pass_of_both_sides_in_alternating_order(target):
    comparison = compare(ReferenceSpec.operator(WORKLOAD, usable_cores(), PASS_S), tvm_pass(WORKLOAD, target),
                         passes=MIN_PASSES, max_passes=MIN_PASSES)
    data = json.loads(json.dumps(comparison.to_json()))
    tvm, reference = data["tvm"], data["reference"]
    assert len(tvm["passes_ms"]) == len(reference["passes_ms"]) == MIN_PASSES
    starts = [t for pair in zip(tvm["at_s"], reference["at_s"]) for t in pair]
    assert starts == sorted(starts) and len(set(starts)) == 2 * MIN_PASSES  # TVM, reference, TVM, ...
    for side in (tvm, reference):
        assert side["median_ms"] == pytest.approx(statistics.median(side["passes_ms"]), rel=1e-3)
        assert 1 + side["spread"] == pytest.approx(max(side["passes_ms"]) / min(side["passes_ms"]), rel=1e-3)
        low, high = side["interval_ms"]
        assert min(side["passes_ms"]) <= low <= side["median_ms"] <= high <= max(side["passes_ms"])
    ratios = [r / t for r, t in zip(reference["passes_ms"], tvm["passes_ms"])]
    assert data["ratios"] == pytest.approx(ratios, rel=1e-4)
    assert data["ratio"]["median"] == pytest.approx(statistics.median(ratios), rel=1e-4)
    assert data["ratio"]["low"] <= data["ratio"]["median"] <= data["ratio"]["high"]
    assert 0 <= data["other_cores"] < usable_cores()
    assert data["spec"] == {"kind": "operator", "name": str(WORKLOAD), "threads": usable_cores(), "pass_s": PASS_S,
                            "device": "cpu", "inputs": [], "library": "PyTorch eager"}
    assert data["library"] == "PyTorch eager"
    assert data["process"] == "fresh" and data["flops"] == WORKLOAD.flops and reference["max_rel_error"] < 1e-4
    assert data["unstable"] == bool(data["reasons"]) and len(data["load_average"]) == 2
    if data["unstable"]:
        assert data["speedup"] is None
    else:
        assert data["speedup"] == pytest.approx(statistics.median(ratios), rel=1e-4)


def test_a_wide_interval_takes_more_pass_pairs_up_to_the_most_allowed(target):
    """Every other TVM pass reads four times slow: the speed-up's interval stays wide, so passes are added one
    pair at a time past `passes`, up to `max_passes`, and the comparison ends unstable, naming why."""
    timed = tvm_pass(WORKLOAD, target)
    count = 0

    def every_other_slowed() -> float:
        nonlocal count
        count += 1
        return timed() * (4.0 if count % 2 else 1.0)

    comparison = compare(ReferenceSpec.operator(WORKLOAD, usable_cores(), 0.05), every_other_slowed,
                         passes=MIN_PASSES, max_passes=MIN_PASSES + 2)
    data = comparison.to_json()
    assert len(data["tvm"]["passes_ms"]) == len(data["reference"]["passes_ms"]) == MIN_PASSES + 2 == count
    assert comparison.unstable and comparison.speedup is None
    assert any("interval reaches" in reason and f"after {MIN_PASSES + 2} passes" in reason
               for reason in comparison.reasons)


def test_one_slowed_pass_moves_neither_the_median_nor_its_interval_but_a_slow_phase_does():
    """The interval of a median from nine passes is their second fastest and second slowest."""
    steady = [10.0, 10.1, 9.9, 10.2, 10.0, 9.8, 10.1, 10.0, 9.9]
    one_slowed = Estimate.of([*steady[:4], 20.0, *steady[5:]])
    assert one_slowed.median == pytest.approx(10.0, abs=0.11) and one_slowed.uncertainty < UNCERTAINTY_LIMIT
    three_slowed = Estimate.of([*steady[:6], 14.0, 15.0, 16.0])
    assert three_slowed.uncertainty > UNCERTAINTY_LIMIT
    with pytest.raises(ValueError, match="at least 6"):
        Estimate.of(steady[:MIN_PASSES - 1])


def test_fewer_passes_than_an_interval_needs_are_refused():
    with pytest.raises(ValueError, match=f"at least {MIN_PASSES} passes"):
        compare(ReferenceSpec.operator(WORKLOAD, 1), None, passes=MIN_PASSES - 1)
    with pytest.raises(ValueError, match="below passes"):
        compare(ReferenceSpec.operator(WORKLOAD, 1), None, passes=MIN_PASSES + 1, max_passes=MIN_PASSES)


def test_waiting_for_idle_sees_a_thread_still_spinning():
    """What keeps a reference from running beside TVM's thread pool: CPU time of the process's
    other threads."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        assert not wait_until_idle(timeout_s=0.3)
    finally:
        stop.set()
        spinner.join()
    assert wait_until_idle(timeout_s=2.0)


def test_a_reference_that_cannot_be_built_is_one_error_not_a_hang():
    spec = ReferenceSpec("matmul", "64", 1, library="no-such-library")
    with pytest.raises(MetatuneError, match="no no-such-library matmul on cpu"):
        compare(spec, None)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_has_a_pytorch_reference_that_numpy_agrees_with(family):
    """A bench times PyTorch on each of its workloads after tuning them: a family without a
    reference (or with a wrong one) would stop it there."""
    import torch

    workload = Workload.parse(SMALL_SHAPES[family])
    inputs = workload.random_inputs(seed=0)
    with torch.inference_mode():
        out = torch_operator(workload)(*[torch.from_numpy(x) for x in inputs]).numpy()
    assert output_error(out, workload.reference(inputs)) <= OPERATOR_RTOL


def _torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _torch_has_cuda(), reason="needs PyTorch with an NVIDIA GPU")
def test_a_cuda_reference_is_timed_on_the_gpu_and_checked_against_numpy():
    """cuDNN's conv2d (TF32 off) agrees with NumPy, and a synchronised pass takes the kernel's time."""
    workload = Workload.parse("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1")
    timing = compare(ReferenceSpec.operator(workload, threads=1, pass_s=0.2, device="cuda"), None)
    assert timing.max_rel_error < 1e-4
    gflops = timing.flops / (timing.reference.median_ms / 1e3) / 1e9
    assert 100 < gflops < 100_000  # a launch-only timing would read far above any GPU's fp32 peak


def test_whole_model_references_stay_on_the_cpu():
    with pytest.raises(MetatuneError, match="CPU only"):
        compare(ReferenceSpec("model", "tinycnn", 1, device="cuda"), None)


def test_the_onednn_peak_matmul_is_checked_against_torch_mm_and_timed():
    """The peak's oneDNN matmul computes a @ b (not a @ b.T: oneDNN's linear transposes its weight)."""
    timing = compare(ReferenceSpec("matmul", "256", 1, pass_s=0.05, library=ONEDNN_LIBRARY), None)
    assert timing.max_rel_error is not None and timing.max_rel_error < 1e-5
    assert timing.flops == 2.0 * 256**3 and timing.reference.median_ms > 0


def test_a_peak_library_that_does_not_exist_there_is_one_error():
    with pytest.raises(MetatuneError, match="no oneDNN matmul on cuda"):
        compare(ReferenceSpec("matmul", "64", 1, device="cuda", library=ONEDNN_LIBRARY), None)
