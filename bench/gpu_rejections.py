"""Which random GPU tilings VerifyGPUCode rejects, and how many the shared-memory check catches first.

    .venv/bin/python bench/gpu_rejections.py C6 dense1024 --target nvidia/nvidia-h100 --replays 150

Draws configurations that keep the thread limits (as sampling does), replays each, and compares
`metatune/space/shared_memory.py`'s estimate with the postprocessors' verdict: rejections the
check catches, rejections it misses (with the constraint VerifyGPUCode's own lowering breaks),
and accepted schedules it would wrongly turn down (must be none). Runs on any CPU: nothing is built.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import numpy as np

# VerifyGPUCode's lowering (src/s_tir/meta_schedule/postproc/verify_gpu_code.cc, TVM 0.27) and its constraints.
_LOWERING = [
    ("s_tir", "LowerCrossThreadReduction"), ("s_tir", "LowerInitBlock"),
    ("s_tir", "PlanAndUpdateBufferAllocationLocation"), ("s_tir", "ConvertBlocksToOpaque"),
    ("s_tir", "LiftThreadBinding"), ("s_tir", "ManifestSharedMemoryLocalStage"), ("s_tir", "CompactBufferAllocation"),
    ("tirx", "StmtSimplify"), ("s_tir", "LowerAutoCopy"), ("s_tir", "UnifyThreadBinding"),
    ("s_tir", "LowerMatchBuffer"), ("s_tir", "InjectSoftwarePipeline"), ("s_tir", "LowerOpaqueBlock"),
    ("tirx", "FlattenBuffer"), ("tirx", "BF16ComputeLegalize"), ("tirx", "NarrowDataType"), ("tirx", "StmtSimplify"),
    ("tirx", "VectorizeLoop"), ("s_tir", "InjectVirtualThread"), ("s_tir", "InjectDoubleBuffer"),
    ("tirx", "StorageRewrite"), ("s_tir", "MergeSharedMemoryAllocations"), ("tirx", "LowerIntrin"),
]
_ARGS = {"NarrowDataType": (32,), "VectorizeLoop": (True,)}


def _lowering():
    import tvm
    from tvm.s_tir import transform as s_tir
    from tvm.tirx import transform as tirx

    modules = {"s_tir": s_tir, "tirx": tirx}
    return tvm.transform.Sequential([getattr(modules[m], name)(*_ARGS.get(name, ())) for m, name in _LOWERING])


def broken_constraint(sch, target) -> str:
    """The VerifyGPUCode constraint a postprocessed schedule breaks ('lowering' if lowering fails)."""
    import tvm
    from tvm.s_tir.analysis import verify_gpu_code

    func = sch.mod["main"].with_attr("global_symbol", "main").with_attr("target", target)
    try:
        lowered = _lowering()(tvm.IRModule({"main": func.with_attr("tirx.noalias", True)}))["main"]
    except RuntimeError as err:
        return "lowering: " + str(err).splitlines()[0][:60]
    limits = {"max_shared_memory_per_block": int(target.attrs["max_shared_memory_per_block"]),
              "max_threads_per_block": int(target.attrs["max_threads_per_block"]),
              "max_vthread": 8, "max_vector_bytes": 16}
    alone = [name for name in limits if not verify_gpu_code(lowered, {**{k: 1 << 40 for k in limits}, name: limits[name]})]
    return "+".join(alone) or "thread extents"


def survey(workload: str, target_text: str, replays: int, seed: int) -> None:
    import tvm

    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.space.shared_memory import shared_memory_bytes
    from metatune.workload.operators import resolve_workload

    target = tvm.target.Target(target_text)
    space = SearchSpace(DesignSpaces(resolve_workload(workload), target))
    spaces = space.knob_spaces[0].spaces
    limit = spaces.shared_memory_limit
    rng = np.random.default_rng(seed)
    outcome: collections.Counter[str] = collections.Counter()
    missed: collections.Counter[str] = collections.Counter()
    check_ms: list[float] = []
    done = draws = 0
    while done < replays and draws < 1000 * replays:
        ks = space.knob_spaces[draws % len(space.knob_spaces)]
        draws += 1
        config = ks.default._replace(decisions=tuple(k.choices[int(rng.integers(len(k.choices)))] for k in ks.knobs))
        if ks.check(config) is not None or (candidate := ks.schedule(config, postprocess=False)) is None:
            continue
        done += 1
        sch = candidate.sch
        start = time.perf_counter()
        size = shared_memory_bytes(sch.mod)
        check_ms.append(1e3 * (time.perf_counter() - start))
        caught = size is not None and size > limit
        sch.enter_postproc()
        accepted = all(p.apply(sch) for p in spaces.postprocs)
        outcome["accepted" if accepted else "rejected"] += 1
        if accepted and caught:
            outcome["accepted but turned down (must be 0)"] += 1
        elif not accepted and caught:
            outcome["rejected, caught by the check"] += 1
        elif not accepted:
            missed[broken_constraint(sch, target)] += 1
    print(f"{workload} on {target_text}: {done} replays, check median {statistics.median(check_ms):.1f} ms; "
          f"{dict(outcome)}; rejections the check misses: {dict(missed) or 'none'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", help="workload texts or ResNet-18 layer names (C1..C12, dense1024)")
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--replays", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for workload in args.workloads:
        survey(workload, args.target, args.replays, args.seed)


if __name__ == "__main__":
    main()
