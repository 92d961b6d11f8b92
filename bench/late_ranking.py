"""Which model would guide a tuner's late search better? Ranking a run's later proposals from its earlier ones.

    .venv/bin/python -m bench.late_ranking runs/val-factor --strategy metatune --train 128

For each workload of a bench output directory, the run's first `--train` measured configurations
are what a tuner knows at that point; the rest (the configurations the search proposed next, near
what it had found) are to be ranked. Three models score them: the zoo checkpoint zero-shot, the
same adapted by MAML's inner loop on the first `--train` (as `metatune` does while tuning), and
TVM's XGBModel on PerStoreFeature trained on those alone (BatchBO's task model and TVM's default
tuner's model). Reported per model: pairwise accuracy over the later configurations (Kendall's tau
→ share of correctly ordered pairs), and the best latency among its 16 favourites relative to the
best of them all (1.0: its top 16 hold the best). Unlike `metatune evaluate`, which ranks uniformly
random programs, this ranks what a search actually proposes late, where the guide's choices matter.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.stats import kendalltau

from bench.model_args import add_model_arguments, resolve_model

TOP = 16  # one batch


def pairwise_accuracy(scores: Sequence[float], latencies: Sequence[float]) -> float:
    """Share of pairs a model orders like the measurements (higher score = lower latency)."""
    tau = kendalltau(scores, -np.asarray(latencies, dtype=np.float64)).statistic
    return float((1.0 + tau) / 2.0)


def top_quality(scores: Sequence[float], latencies: Sequence[float], top: int = TOP) -> float:
    """Best latency of all / best latency among the `top` best-scored (1.0: they include the best)."""
    lat = np.asarray(latencies, dtype=np.float64)
    favourites = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:top]
    return float(lat.min() / lat[favourites].min())


def read_run(run_dir: Path) -> list[Any]:
    """(record, latency) in measurement order, successful measurements only."""
    from bench.search_moves import latency, read_records

    return [(r, latency(r)) for r in read_records(run_dir) if np.isfinite(latency(r))]


def model_scores(trained: Any, context: Any, known: list[Any], later: list[Any]) -> dict[str, np.ndarray]:
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from metatune.cost_model.xgb import new_xgb
    from metatune.search.online_model import MetaTuneCostModel

    known_mc = [r.as_measure_candidate() for r, _ in known]
    later_mc = [r.as_measure_candidate() for r, _ in later]
    results = [RunnerResult(run_secs=[lat], error_msg=None) for _, lat in known]
    meta = MetaTuneCostModel(trained)
    scores = {"zoo checkpoint, zero-shot": np.asarray(meta.predict(context, later_mc))}
    meta.update(context, known_mc, results)
    scores["zoo checkpoint, adapted"] = np.asarray(meta.predict(context, later_mc))
    task = new_xgb()
    task.update(context, known_mc, results)
    scores["XGBModel on the task alone"] = np.asarray(task.predict(context, later_mc))
    return scores


def main() -> None:
    from tvm.s_tir.meta_schedule import TuneContext

    from metatune.workload.operators import resolve_workload

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a `metatune bench --out` directory")
    parser.add_argument("--strategy", default="metatune", help="whose runs (their databases) to read")
    parser.add_argument("--train", type=int, default=128, help="measurements the models learn from")
    add_model_arguments(parser)
    parser.add_argument("--json", type=Path, help="write the per-workload numbers here")
    args = parser.parse_args()
    target, trained, checkpoint = resolve_model(args)
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for result_file in sorted((args.out / "runs").glob(f"*/{args.strategy}-r0.json")):
        run = read_run(result_file.with_suffix(""))
        known, later = run[: args.train], run[args.train :]
        if len(later) < 2 * TOP:
            continue
        workload = resolve_workload(json.loads(result_file.read_text())["workload"])
        context = TuneContext(mod=workload.irmodule(), target=target, task_name="main")
        latencies = [lat for _, lat in later]
        scores = model_scores(trained, context, known, later)
        rows[result_file.parent.name] = {name: {"pairwise_acc": round(pairwise_accuracy(s, latencies), 3),
                                                f"top{TOP}_quality": round(top_quality(s, latencies), 3)}
                                         for name, s in scores.items()}
        print(result_file.parent.name, json.dumps(rows[result_file.parent.name]))
    if not rows:
        raise SystemExit(f"no {args.strategy} run in {args.out} has {args.train + 2 * TOP} successful measurements")
    print(f"\nmedian over {len(rows)} workloads ({args.strategy} runs; learn from the first {args.train}, "
          f"rank the rest; checkpoint {checkpoint}):")
    for name in next(iter(rows.values())):
        acc = np.median([r[name]["pairwise_acc"] for r in rows.values()])
        top = np.median([r[name][f"top{TOP}_quality"] for r in rows.values()])
        print(f"  {name:<28} pairwise accuracy {acc:.3f}   best of its top {TOP} / best {top:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"strategy": args.strategy, "train": args.train, "checkpoint": checkpoint,
                                         "workloads": rows}, indent=1))


if __name__ == "__main__":
    main()
