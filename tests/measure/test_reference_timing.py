"""Reference timing: a fresh process, passes alternating with TVM's, `unstable` when they disagree.

Real timings throughout: the TVM side is a compiled kernel timed by TVM's time_evaluator, the
reference is PyTorch in its own process, and the load is real busy-looping processes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
from typing import Callable

import numpy as np
import pytest

from metatune import MetatuneError
from metatune.env.device import usable_cores
from metatune.measure.reference_timing import SPREAD_LIMIT, ReferenceSpec, compare, wait_until_idle
from metatune.workload.operators import Workload

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
    """Busy loops on every core start at the second TVM pass: the passes after it are slower,
    so the comparison is flagged and gives no speed-up."""
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
        comparison = compare(ReferenceSpec.operator(WORKLOAD, usable_cores(), PASS_S), loaded_from_the_second_pass)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert len(hogs) == 2 * usable_cores()
    assert comparison.reference.spread > SPREAD_LIMIT
    assert comparison.unstable and comparison.speedup is None
    assert any("PyTorch eager passes differ" in reason for reason in comparison.reasons)
    summary = comparison.summary()
    assert "unstable" in summary and "×" not in summary
    data = comparison.to_json()
    assert data["unstable"] and data["speedup"] is None


def test_the_json_carries_every_pass_of_both_sides_in_alternating_order(target):
    comparison = compare(ReferenceSpec.operator(WORKLOAD, usable_cores(), PASS_S), tvm_pass(WORKLOAD, target),
                         passes=4)
    data = json.loads(json.dumps(comparison.to_json()))
    tvm, reference = data["tvm"], data["reference"]
    assert len(tvm["passes_ms"]) == len(reference["passes_ms"]) == 4
    starts = [t for pair in zip(tvm["at_s"], reference["at_s"]) for t in pair]
    assert starts == sorted(starts) and len(set(starts)) == 8  # TVM, reference, TVM, reference, ...
    for side in (tvm, reference):
        assert side["median_ms"] == pytest.approx(statistics.median(side["passes_ms"]), rel=1e-3)
        assert 1 + side["spread"] == pytest.approx(max(side["passes_ms"]) / min(side["passes_ms"]), rel=1e-3)
    assert data["spec"] == {"kind": "operator", "name": str(WORKLOAD), "threads": usable_cores(), "pass_s": PASS_S,
                            "device": "cpu"}
    assert data["process"] == "fresh" and data["flops"] == WORKLOAD.flops and reference["max_rel_error"] < 1e-4
    assert data["unstable"] == bool(data["reasons"]) and len(data["load_average"]) == 2
    if data["unstable"]:
        assert data["speedup"] is None
    else:
        assert data["speedup"] == pytest.approx(reference["median_ms"] / tvm["median_ms"], rel=1e-3)


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
    spec = ReferenceSpec.operator(Workload.parse("conv2d_bias:n=1,c=8,h=14,w=14,k=16,r=1,s=1,stride=2,pad=0"), 1)
    with pytest.raises(MetatuneError, match="no PyTorch reference for family 'conv2d_bias'"):
        compare(spec, None)


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
