"""Search time of `metatune`'s BatchBO per batch, on any target, without building a kernel.

    .venv/bin/python bench/search_time.py C6 --target nvidia/nvidia-h100 --batches 3 --threads 1,2

Drives BatchBO with the zoo checkpoint for the target, the way `tune_tir` does, but answers each
batch with a synthetic latency (a fixed function of the tile decisions) instead of building and
timing kernels, so that the GP, the task model and the mutation chains run as in a real batch
while only the search is timed. Compares the number of threads that build the candidate pool
(`--threads`), each run in turn in this process with the same seed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def synthetic_latency(candidate: object) -> float:
    """Seconds from the innermost tile factors and categorical choices of a schedule's trace."""
    trace = candidate.sch.trace  # type: ignore[attr-defined]
    total = 0.0
    for inst in trace.insts:
        decision = trace.decisions.get(inst) if inst.kind.name.startswith("Sample") else None
        if decision is None:
            continue
        if inst.kind.name == "SamplePerfectTile":
            total += (np.log2(int(decision[-1])) - 3) ** 2
        elif inst.kind.name == "SampleCategorical":
            total += abs(int(decision) - 2)
    return 1e-3 * float(np.exp(0.2 * total))


def time_batches(workload: str, target: str | None, batches: int) -> list[float]:
    """Seconds to propose each batch of 16."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from metatune.env.device import fingerprint_for_target
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.search.batch_bo import BatchBO
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.workload.operators import resolve_workload

    import_tensor_intrinsics()
    fingerprint = fingerprint_for_target(target)
    trained, _, _ = resolve_checkpoint("auto", fingerprint)
    cost_model = MetaTuneCostModel(trained)
    context = ms.TuneContext(mod=resolve_workload(workload).irmodule(), target=fingerprint.tvm_target(),
                             space_generator="post-order-apply", search_strategy=BatchBO(seed=0), task_name="main")
    context.pre_tuning(max_trials=16 * batches, num_trials_per_iter=16, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=cost_model)
    seconds = []
    for _ in range(batches):
        started = time.perf_counter()
        candidates = context.generate_measure_candidates()
        seconds.append(time.perf_counter() - started)
        results = [RunnerResult(run_secs=[synthetic_latency(c)], error_msg=None) for c in candidates]
        context.notify_runner_results(candidates, results)
        cost_model.update(context, candidates, results)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", help="workload text or a ResNet-18 layer name (C1..C12)")
    parser.add_argument("--target", help="a --target text, e.g. nvidia/nvidia-h100 (default: this machine)")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated build thread counts to compare")
    args = parser.parse_args()

    from metatune.space import parallel

    print(f"{args.workload} on {args.target or 'this machine'}: seconds to propose a batch of 16 (median over the batches after the first)")
    for threads in [int(t) for t in args.threads.split(",")]:
        with ThreadPoolExecutor(max_workers=threads) as executor:
            parallel._executor = lambda executor=executor: executor  # type: ignore[assignment]
            seconds = time_batches(args.workload, args.target, args.batches)
        steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
        print(f"  {threads} build threads: {', '.join(f'{s:.1f}' for s in seconds)} s -> {steady:.1f} s a batch, "
              f"{steady / 16:.2f} s a trial")


if __name__ == "__main__":
    main()
