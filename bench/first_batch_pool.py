"""Offline: is the cost model's top-q of a larger random pool faster? Simulated on a dataset's records.

    .venv/bin/python -m bench.first_batch_pool datasets/x86_64-znver5-2c x86_64-znver5-2c/v2 \
        --config train/configs/x86_64-znver5-2c.yaml --q 4,8,16 --pool 25,50,100,200

BatchBO's first batch is the zero-shot model's top-q of `pool_random` uniform random configurations.
A dataset's records are uniform random configurations with measured latencies, so drawing N of a
workload's records, ranking them with the checkpoint (no adaptation, k = 0) and taking the best true
latency among the top q simulates that batch for pools of up to the records a workload holds. Printed:
per workload and (q, N), the mean over draws of best-of-the-q's speed relative to the workload's
fastest record, then the geometric mean over workloads. With `--config` the workloads are that training
config's validation split (never trained on, but its early stopping was chosen on it); without it, every workload of the dataset.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch


def best_of_top(predicted: np.ndarray, truth: np.ndarray, pool: np.ndarray, q: int) -> float:
    """The true log-throughput of the fastest of the q pool entries the model scores highest."""
    return float(truth[pool[np.argsort(-predicted[pool])[:q]]].max())


def main() -> None:
    from metatune.encode.graphs import load_encoded
    from metatune.encode.supergraph import GraphEncoder
    from metatune.learn.config import load_config
    from metatune.learn.evaluate import gcn_adapter
    from metatune.learn.named_checkpoint import open_checkpoint
    from metatune.learn.train import load_splits

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("checkpoint", help="zoo id or checkpoint file")
    parser.add_argument("--config", type=Path, help="training config whose validation workloads to use")
    parser.add_argument("--q", default="4,8,16", help="batch sizes")
    parser.add_argument("--pool", default="25,50,100,200", help="pool sizes (at most a workload's records)")
    parser.add_argument("--draws", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(2)
    trained = open_checkpoint(args.checkpoint).trained
    if args.config:
        _, _, workloads, _ = load_splits(args.dataset, load_config(args.config))
    else:
        workloads = load_encoded(args.dataset, GraphEncoder(trained.builder.template))
    rank = gcn_adapter(trained.model, trained.builder, workloads, trained.maml)
    rng = np.random.default_rng(0)
    qs, pools = [int(x) for x in args.q.split(",")], [int(x) for x in args.pool.split(",")]
    found: dict[tuple[int, int], list[float]] = {}
    for t, w in enumerate(workloads):
        truth = w.log_thr.numpy().astype(float)
        pred = np.asarray(rank(t, np.array([], dtype=int), np.arange(len(w)), 0)).reshape(-1)
        for q in qs:
            for n in (n for n in pools if q <= n <= len(w)):
                best = [best_of_top(pred, truth, rng.choice(len(w), n, replace=False), q) for _ in range(args.draws)]
                found.setdefault((q, n), []).append(float(np.mean(2.0 ** (np.array(best) - truth.max()))))
        print(w.key, {f"q{q} N{n}": round(v[-1], 3) for (q, n), v in found.items()}, flush=True)
    print(f"geometric mean over {len(workloads)} workloads:")
    for (q, n), v in found.items():
        print(f"  top {q:>3} of {n:>4} random: {np.exp(np.mean(np.log(v))):.3f} of the fastest record")


if __name__ == "__main__":
    main()
