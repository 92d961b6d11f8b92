"""Build time per batch: TVM's LocalBuilder (a new worker pool per batch) vs the kept pool, alternated.

    .venv/bin/python -m bench.build_pool conv2d:n=1,c=16,h=14,w=14,k=16,r=3,s=3,stride=1,pad=1 \
        --batch 16 --rounds 8

Each round builds one batch of random schedules of the workload with each builder, in alternating
order, so that the host's slow and fast phases fall on both alike; every batch is new schedules, the
same ones for both builders. Printed: each round's seconds per builder, the median per builder and
their ratio, and the resident memory of the kept pool's workers after each round (a leak would grow
it: the reason TVM gives for starting a new pool every batch).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import psutil


def timed_build(builder, inputs) -> float:
    """Seconds to build `inputs`; the artifacts are removed (the measurer removes them after timing)."""
    start = time.perf_counter()
    results = builder.build(inputs)
    seconds = time.perf_counter() - start
    failed = [r.error_msg for r in results if r.error_msg]
    for r in results:
        if r.artifact_path:
            shutil.rmtree(os.path.dirname(r.artifact_path), ignore_errors=True)
    if failed:
        print(f"  {len(failed)} of {len(inputs)} failed to build: {failed[0].splitlines()[-1][:120]}")
    return seconds


def worker_rss_mb(builder) -> list[float]:
    pool = builder._pool  # pylint: disable=protected-access
    procs = [w._proc for w in pool._worker_map.values() if w._proc] if pool else []  # pylint: disable=protected-access
    return [round(psutil.Process(p.pid).memory_info().rss / 2**20) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--batch", type=int, default=16, help="candidates per build call (the tuners' default: 16)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from tvm.s_tir.meta_schedule.builder import BuilderInput, LocalBuilder

    from metatune.env.device import local_fingerprint, usable_cores
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.measure.builder import kept_pool_builder
    from metatune.measure.measurer import build_without_intrinsics
    from metatune.space.knob_space import DesignSpaces
    from metatune.workload.operators import resolve_workload

    import_tensor_intrinsics()
    workload = resolve_workload(args.workload)
    target = local_fingerprint().tvm_target()
    candidates = DesignSpaces(workload, target).random_candidates(args.batch * args.rounds, seed=args.seed)
    workers = usable_cores()
    builders = {
        "new pool per batch (LocalBuilder)": LocalBuilder(max_workers=workers, f_build=build_without_intrinsics),
        "kept pool": kept_pool_builder(workers, 30.0, build_without_intrinsics),
    }
    seconds: dict[str, list[float]] = {name: [] for name in builders}
    print(f"{workload}: {args.rounds} rounds of {args.batch} candidates, {workers} build workers")
    for i in range(args.rounds):
        batch = candidates[i * args.batch:(i + 1) * args.batch]
        inputs = [BuilderInput(c.measure_candidate().sch.mod, target) for c in batch]
        order = list(builders) if i % 2 == 0 else list(reversed(builders))
        for name in order:
            seconds[name].append(timed_build(builders[name], inputs))
        print(f"round {i}: " + ", ".join(f"{name} {seconds[name][-1]:.2f} s" for name in builders)
              + f"; kept workers {worker_rss_mb(builders['kept pool'])} MB")
    builders["kept pool"].shutdown()
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    for name, median in medians.items():
        print(f"median {name}: {median:.2f} s per batch ({median / args.batch:.3f} s per candidate)")
    new, kept = medians.values()
    print(f"kept pool: {new / kept:.2f}x faster, {(new - kept) / args.batch:.3f} s less per candidate")


if __name__ == "__main__":
    main()
