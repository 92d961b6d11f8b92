"""Which checkpoint ranks this dataset's programs best? Several checkpoints, the same draws, every workload.

    .venv/bin/python -m bench.rank_checkpoints datasets/x86_64-sapphirerapids-2c-adapt-cpu \
        x86_64-sapphirerapids-2c/v5 x86_64-znver5-2c/v2 --json F

`metatune evaluate --transfer` compares checkpoints on a dataset's held-out split only; a dataset made
for another purpose (`zoo adapt`'s measurements, or tuning databases brought in with `metatune dataset
import`) is worth ranking whole, whatever its split says, when none of the checkpoints was trained on it.
Protocol as `metatune evaluate`: per workload and k, the same support/query draws for every checkpoint,
each adapted by MAML's inner loop on the support set (what `tune` does), then the median over workloads.

`--retimed A.json B.json` ranks instead the programs `bench/retime_dataset.py` timed again on this host
(two passes, their geometric mean as the truth), at k = 0: a check that does not trust the stored labels.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch


def open_models(data: Path, names: list[str]) -> dict:
    """The checkpoints' trained models, which must share one template (the programs are encoded once); a
    checkpoint trained on this dataset is named on stderr (its numbers here include its training workloads)."""
    from metatune.learn.named_checkpoint import open_checkpoint

    named = {n: open_checkpoint(n) for n in names}
    templates = {n: m.trained.builder.template.version for n, m in named.items()}
    if len(set(templates.values())) > 1:
        raise SystemExit("the checkpoints encode programs with different templates: "
                         + ", ".join(f"{n} {t}" for n, t in templates.items()))
    for n, m in named.items():
        dataset = m.card.get("dataset")
        if isinstance(dataset, dict) and Path(data).name in (dataset.get("id"), Path(dataset.get("path", "")).name):
            print(f"warning: {n} was trained on {Path(data).name}: its numbers here include its training workloads",
                  file=sys.stderr)
    return {n: m.trained for n, m in named.items()}


def rank_dataset(data: Path, names: list[str], ks: tuple[int, ...], repeats: int) -> dict:
    from metatune.encode.graphs import load_encoded
    from metatune.encode.supergraph import GraphEncoder
    from metatune.learn.config import EvalConfig
    from metatune.learn.evaluate import evaluate, gcn_adapter

    models = open_models(data, names)
    workloads = load_encoded(data, GraphEncoder(next(iter(models.values())).builder.template))
    config = EvalConfig(ks=ks, repeats=repeats, methods=tuple(names))
    result = evaluate(workloads, {n: gcn_adapter(m.model, m.builder, workloads, m.maml) for n, m in models.items()},
                      config)
    return {"workloads": len(workloads), "metrics": result.metrics, "per_workload": result.per_workload}


def rank_retimed(data: Path, names: list[str], passes: list[Path]) -> dict:
    """Pairwise accuracy at k = 0 against this host's latencies of the re-timed programs."""
    from metatune.dataset.store import DatasetStore
    from metatune.encode.graphs import load_encoded
    from metatune.encode.supergraph import GraphEncoder
    from metatune.learn.evaluate import gcn_adapter
    from metatune.learn.metrics import pairwise_accuracy
    from metatune.measure.measurer import median_latency

    runs = [json.loads(p.read_text())["workloads"] for p in passes]
    models = open_models(data, names)
    workloads = load_encoded(data, GraphEncoder(next(iter(models.values())).builder.template))
    position = {w.key: i for i, w in enumerate(workloads)}
    methods = {n: gcn_adapter(m.model, m.builder, workloads, m.maml) for n, m in models.items()}  # k = 0: no support
    stores = {s.workload.key: s for s in DatasetStore(data)}
    scores: dict[str, dict[str, float]] = {n: {} for n in [*names, "stored labels"]}
    for name, entry in runs[0].items():
        key = entry["workload"]
        stored = [median_latency(s) for s in stores[key].run_secs()]
        rows = np.array([stored.index(x) for x in entry["stored_s"]])  # the re-timed programs' records
        now = np.exp(np.mean([np.log(run[name]["now_s"]) for run in runs], axis=0))
        truth = -np.log2(now)
        for n, method in methods.items():
            scores[n][key] = pairwise_accuracy(method(position[key], np.array([], dtype=int), rows, 0), truth)
        scores["stored labels"][key] = pairwise_accuracy(-np.log2(np.array(entry["stored_s"])), truth)
    return {"per_workload": scores, "median": {n: float(np.median(list(v.values()))) for n, v in scores.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("checkpoints", nargs="+", help="zoo ids or checkpoint files")
    parser.add_argument("--ks", default="0,16", help="support-set sizes")
    parser.add_argument("--repeats", type=int, default=3, help="support/query draws per workload and k")
    parser.add_argument("--retimed", type=Path, nargs="+", help="bench/retime_dataset.py JSONs of this dataset")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.retimed:
        out = rank_retimed(args.dataset, args.checkpoints, args.retimed)
        for name, value in out["median"].items():
            print(f"{name:32s} pairwise accuracy vs this host's timings, median over workloads: {value:.3f}")
    else:
        out = rank_dataset(args.dataset, args.checkpoints, tuple(int(k) for k in args.ks.split(",")), args.repeats)
        print(f"{out['workloads']} workloads of {args.dataset}: median pairwise accuracy / peak@1")
        for name, by_k in out["metrics"].items():
            print(f"{name:32s} " + "  ".join(f"k={k}: {m['pairwise_acc']:.3f} / {m['peak@1']:.2f}"
                                             for k, m in by_k.items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
