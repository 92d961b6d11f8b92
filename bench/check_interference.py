"""Does checking kernels against NumPy disturb their timing? Batches with and without, alternated.

    .venv/bin/python bench/check_interference.py depthwise_conv2d:n=1,c=256,h=28,w=28,r=3,s=3,stride=1,pad=1 \
        --db runs/val-hedge/runs/depthwise/metatune-r0 --batches 16

The measurer runs each kernel once in this process to check it, and TVM's thread pool here then
spins for a while; if that happens while the runner's worker times the batch, the two share the
cores. This times the same kernels (the best `--kernels` of a tuning database, or random ones of
the workload's design spaces) in `--batches` alternating batches, checking on and off, and prints
each batch's GFLOPS and the median of the batch medians per setting. Alternating keeps the host's
slow and fast phases out of the comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path


def kernels(workload_text: str, db: Path | None, count: int) -> list:
    """Measure candidates: the fastest `count` records of `db`, or `count` random schedules."""
    from metatune.env.device import local_fingerprint
    from metatune.measure.database import record_of, trial_lines
    from metatune.measure.measurer import median_latency, successful_run_seconds
    from metatune.space.knob_space import DesignSpaces
    from metatune.workload.operators import resolve_workload

    workload = resolve_workload(workload_text)
    if db is None:
        spaces = DesignSpaces(workload, local_fingerprint().tvm_target())
        return [c.measure_candidate() for c in spaces.random_candidates(count, seed=0)]
    lines = trial_lines(db, workload.irmodule())
    latency = []
    for workload_json, record in lines:
        secs = successful_run_seconds(record[1])
        latency.append(median_latency(secs, high=True) if secs else float("inf"))
    best = sorted(range(len(lines)), key=latency.__getitem__)[:count]
    return [record_of(lines[i]).as_measure_candidate() for i in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload", help="workload text, e.g. dense:m=256,n=1024,k=512")
    parser.add_argument("--db", type=Path, help="a tuning database directory (default: random schedules)")
    parser.add_argument("--kernels", type=int, default=8)
    parser.add_argument("--batches", type=int, default=16, help="batches in all, alternating checked / unchecked")
    args = parser.parse_args()

    from metatune.env.device import local_fingerprint
    from metatune.measure.measurer import Measurer
    from metatune.workload.operators import resolve_workload

    workload = resolve_workload(args.workload)
    candidates = kernels(args.workload, args.db, args.kernels)
    medians: dict[bool, list[float]] = {True: [], False: []}
    with Measurer(local_fingerprint().tvm_target()) as measurer:
        for i in range(args.batches):
            checked = i % 2 == 0
            measurer.settings = dataclasses.replace(measurer.settings, verify=checked)
            gflops = [workload.flops / r.median_s / 1e9 for r in measurer.measure(workload, candidates) if r.ok]
            medians[checked].append(statistics.median(gflops))
            print(f"checked={checked!s:5} GFLOPS {[round(g, 1) for g in gflops]}", flush=True)
    on, off = statistics.median(medians[True]), statistics.median(medians[False])
    print(f"median of batch medians: checked {on:.1f}, unchecked {off:.1f} GFLOPS (checked / unchecked {on / off:.3f})")


if __name__ == "__main__":
    main()
