"""Would the zoo checkpoint have pointed a search at a workload's fastest known kernels? Their zero-shot
scores placed among random configurations of the same design spaces.

    .venv/bin/python -m bench.prior_rank runs/other-256 --workloads gpt2-mlp-out gpt2-scores --random 1000

For each workload of a bench output directory, every successful measurement of every run (any strategy,
any repeat) is pooled: the fastest kernels any run found there. The checkpoint scores them with no sample
of the workload (what BatchBO's prior says before the task's data corrects it), and scores `--random`
configurations drawn as the search's pool draws its random part. Reported per workload: the rank
correlation of the score with the measured speed over the pooled kernels, and the percentile of the
score of each of the `--top` fastest among the random ones (100: scored above every random configuration).
A fastest kernel at the 99th percentile is among the few a batch picks from a pool of a few hundred; at the
80th, the prior alone would not propose it, and only the task's own measurements can lead the search there.
`--target` must be the target the bench tuned for (default: this machine).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import spearmanr

from bench.model_args import add_model_arguments, resolve_model


def percentile_among(scores: Sequence[float], reference: Sequence[float]) -> np.ndarray:
    """For each score, the share (in %) of `reference` scores strictly below it."""
    ref = np.sort(np.asarray(reference, dtype=np.float64))
    return 100.0 * np.searchsorted(ref, np.asarray(scores, dtype=np.float64), side="left") / len(ref)


def fastest(latencies: Sequence[float], top: int) -> np.ndarray:
    """Indices of the `top` lowest latencies, fastest first."""
    return np.argsort(np.asarray(latencies, dtype=np.float64), kind="stable")[:top]


def main() -> None:
    from tvm.s_tir.meta_schedule import TuneContext

    from bench.late_ranking import read_run
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.space.knob_space import DesignSpaces
    from metatune.workload.operators import resolve_workload

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a `metatune bench --out` directory")
    parser.add_argument("--workloads", nargs="*", help="suite names (default: every workload of the directory)")
    parser.add_argument("--random", type=int, default=1000, help="random configurations to place the kernels among")
    parser.add_argument("--top", type=int, default=8, help="the fastest kernels to place")
    add_model_arguments(parser)
    parser.add_argument("--json", type=Path, help="write the per-workload numbers here")
    args = parser.parse_args()
    target, trained, checkpoint = resolve_model(args)
    model = MetaTuneCostModel(trained)
    names = args.workloads or sorted(p.name for p in (args.out / "runs").iterdir() if p.is_dir())
    rows: dict[str, dict[str, object]] = {}
    for name in names:
        run_files = sorted((args.out / "runs" / name).glob("*-r*.json"))
        if not run_files:
            raise SystemExit(f"{args.out / 'runs' / name}: no run of this workload")
        workload = resolve_workload(json.loads(run_files[0].read_text())["workload"])
        measured = [m for f in run_files if f.with_suffix("").is_dir() for m in read_run(f.with_suffix(""))]
        context = TuneContext(mod=workload.irmodule(), target=target, task_name="main")
        latencies = np.array([lat for _, lat in measured])
        scores = np.asarray(model.predict(context, [r.as_measure_candidate() for r, _ in measured]))
        random = DesignSpaces(workload, target).random_candidates(args.random, seed=0)
        random_scores = np.asarray(model.predict(context, [c.measure_candidate() for c in random]))
        best = fastest(latencies, args.top)
        places = percentile_among(scores[best], random_scores)
        rows[name] = {"measured": len(measured), "random": len(random),
                      "spearman": round(float(spearmanr(scores, -latencies).statistic), 3),
                      "fastest_us": [round(float(latencies[i]) * 1e6, 1) for i in best],
                      "percentile": [round(float(p), 1) for p in places]}
        print(name, json.dumps(rows[name]), flush=True)
    print(f"\nzero-shot scores of {checkpoint}: percentile of the fastest known kernel among random configurations")
    for name, row in rows.items():
        places = row["percentile"]
        print(f"  {name:<22} fastest {places[0]:5.1f}   median of the top {len(places)} "  # type: ignore[index]
              f"{np.median(places):5.1f}   rank correlation over {row['measured']} kernels {row['spearman']:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"checkpoint": checkpoint, "random": args.random, "workloads": rows}, indent=1))


if __name__ == "__main__":
    main()
