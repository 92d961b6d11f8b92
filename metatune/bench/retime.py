"""Re-time, side by side, the kernels a bench's runs would deploy: comparisons free of the host's drift.

Why: a bench tunes one strategy after another, minutes apart, and on a shared VM the same kernel
can run twice as slow ten minutes later (docs/BENCHMARKS.md, "Search designs on the validation
suite"), so best latencies taken during tuning compare the host's phases as much as the strategies.
Here, per workload, the kernel each run would deploy after each budget (`best_so_far`: the one TVM's
database returns first, by the latencies it saw while tuning) is built and timed again together with all the others, in rounds of
shuffled order; a kernel's latency is the median of its rounds' medians. Every kernel is checked
against NumPy on the way (the measurer checks each one after timing it); a check that fails is
reported as the run's failure at that budget, never as a slow kernel.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable

import numpy as np

from metatune import MetatuneError
from metatune.bench.harness import BenchConfig, RunKey, plan, write_json
from metatune.bench.suites import BenchWorkload, load_suite
from metatune.env.device import fingerprint_for_target
from metatune.measure.database import best_so_far, record_of, trial_lines
from metatune.measure.measurer import Measurer
from metatune.tune.tuner import check_database_device

RETIMED_FILE = "retimed.json"
PARTIAL_FILE = "retimed.partial.json"  # a re-timing in progress: retimed.json stays the last finished one


def retime_workload(measurer: Measurer, bench_workload: BenchWorkload, keys: list[RunKey], out: Path,
                    budgets: list[int], rounds: int, rng: np.random.Generator) -> dict[str, Any]:
    """Every run's deployed kernels of one workload, timed again in `rounds` shuffled rounds."""
    kernels: dict[str, Any] = {}  # trace JSON -> MeasureCandidate: a kernel two runs share is timed once
    entries = []
    for key in keys:
        lines = trial_lines(key.db_dir(out), bench_workload.workload.irmodule())
        for d in best_so_far(lines, budgets):
            trace = json.dumps(lines[d.trial][1][0], sort_keys=True)
            if trace not in kernels:
                kernels[trace] = record_of(lines[d.trial]).as_measure_candidate()
            entries.append((key, d, trace))
    traces = list(kernels)
    samples: dict[str, list[float]] = {t: [] for t in traces}
    failures: dict[str, str] = {}
    for _ in range(rounds):
        order = [traces[i] for i in rng.permutation(len(traces))]
        for trace, result in zip(order, measurer.measure(bench_workload.workload, [kernels[t] for t in order])):
            if result.ok:
                samples[trace].append(result.median_s)
            else:
                failures[trace] = f"{result.failure.value}: {result.message}"
    flops = bench_workload.workload.flops
    runs = []
    for key, d, trace in entries:
        run = {"strategy": key.strategy, "repeat": key.repeat, "budget": d.budget, "trial": d.trial + 1,
               "tuned_gflops": round(flops / d.latency_s / 1e9, 3), "rounds_s": [round(s, 9) for s in samples[trace]]}
        if trace in failures:  # it ran while tuning: a failure now is news, reported, never hidden as slow
            run.update(gflops=None, failure=failures[trace])
        else:
            run["gflops"] = round(flops / statistics.median(samples[trace]) / 1e9, 3)
        runs.append(run)
    return {"kernels": len(traces), "runs": runs}


def retime_bench(config: BenchConfig, rounds: int = 3, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Re-time every workload's deployed kernels into `config.out/retimed.json`; returns its content."""
    if rounds < 1:
        raise MetatuneError("--rounds must be >= 1")
    suite = load_suite(config.suite)
    keys = [key for _, key in plan(suite, config.strategies, config.repeats) if key.db_dir(config.out).exists()]
    if not keys:
        raise MetatuneError(f"{config.out} holds no runs of suite {config.suite} to re-time")
    fingerprint = fingerprint_for_target(config.target)
    for key in keys:  # kernels tuned on another machine, timed here, would be tabulated as that machine's
        check_database_device(key.db_dir(config.out), fingerprint)
    data: dict[str, Any] = {"device_id": fingerprint.device_id, "rounds": rounds, "budgets": config.budgets,
                            "workloads": {}}
    rng = np.random.default_rng(0)
    with Measurer(fingerprint.tvm_target()) as measurer:
        for bench_workload in suite:
            own = [k for k in keys if k.workload == bench_workload.name]
            if own:
                echo(f"re-timing {bench_workload.name}: the kernels of {len(own)} runs, {rounds} rounds")
                data["workloads"][bench_workload.name] = retime_workload(measurer, bench_workload, own, config.out,
                                                                         config.budgets, rounds, rng)
                write_json(config.out / PARTIAL_FILE, data)  # workload by workload, to look at while it runs
                failed = [r for r in data["workloads"][bench_workload.name]["runs"] if r.get("failure")]
                for run in failed:
                    echo(f"warning: {bench_workload.name} [{run['strategy']}] trial {run['trial']} failed when "
                         f"timed again: {run['failure']}")
    (config.out / PARTIAL_FILE).replace(config.out / RETIMED_FILE)
    return data
