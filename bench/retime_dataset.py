"""Is this machine the machine a dataset was measured on? Its stored programs, timed again here.

    .venv/bin/python bench/retime_dataset.py datasets/x86_64-sapphirerapids-2c --split heldout --records 16

Two hosts can share a device id (the same ISA class) and still time the same program differently:
another CPU model, memory system or hypervisor. For each workload of the split, this replays
`--records` stored programs (the fastest half of them from the stored top quarter, the rest drawn at
random), times them here with the dataset's own measuring settings, and prints the ratio of this
host's latency to the stored one per workload (median and 10/90% quantiles) and the Spearman rank
correlation of stored vs. now. A JSON with every program's two latencies goes to `--json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


def pick(latencies: list[float], count: int, rng: np.random.Generator) -> list[int]:
    """Indices: half from the fastest quarter (the kernels a tuner keeps), half from the rest at random."""
    order = sorted(range(len(latencies)), key=latencies.__getitem__)
    quarter = order[: max(1, len(order) // 4)]
    fast = list(rng.choice(quarter, size=min(count // 2, len(quarter)), replace=False))
    rest = [i for i in order if i not in fast]
    return fast + list(rng.choice(rest, size=min(count - len(fast), len(rest)), replace=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", type=Path, help="a dataset directory, e.g. datasets/x86_64-sapphirerapids-2c")
    parser.add_argument("--split", default="heldout", choices=["train", "heldout", "all"], help="which workloads")
    parser.add_argument("--records", type=int, default=16, help="stored programs timed again per workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every program's stored and new latency here")
    args = parser.parse_args()

    from metatune.bench.report import geomean
    from metatune.dataset.card import read_card
    from metatune.dataset.store import DatasetStore
    from metatune.env.device import local_fingerprint
    from metatune.measure.measurer import Measurer, MeasureSettings, median_latency

    card = read_card(args.dataset)
    if card is None:
        raise SystemExit(f"{args.dataset}: no dataset card")
    here = local_fingerprint()
    if card["device"]["device_id"] != here.device_id:
        raise SystemExit(f"{args.dataset} was measured on {card['device']['device_id']}, this is {here.device_id}")
    stored_settings = card.get("measure_settings", {})
    settings = MeasureSettings(**{k: v for k, v in stored_settings.items()
                                  if k in ("number", "repeat", "min_repeat_ms", "cache_flush", "rtol")})
    rng = np.random.default_rng(args.seed)
    stores = [s for s in DatasetStore(args.dataset, repair=False) if args.split == "all" or s.split == args.split]
    out: dict[str, dict] = {}
    print(f"{len(stores)} workloads of {args.dataset} ({card['device']['llvm_host_cpu']} there, "
          f"{here.llvm_host_cpu} here), {args.records} programs each")
    with Measurer(here.tvm_target(), settings) as measurer:
        for store in stores:
            stored = [median_latency(s) for s in store.run_secs()]
            chosen = pick(stored, args.records, rng)
            records = store.records()  # replaying only the chosen programs: a record's replay is the slow part
            results = measurer.measure(store.workload, [records[i].as_measure_candidate() for i in chosen])
            pairs = [(stored[i], r.median_s) for i, r in zip(chosen, results) if r.ok]
            ratios = sorted(now / then for then, now in pairs)
            entry = {"workload": store.workload.key, "stored_s": [p[0] for p in pairs], "now_s": [p[1] for p in pairs],
                     "failed": len(chosen) - len(pairs)}
            if len(pairs) >= 3:
                entry.update(ratio_median=statistics.median(ratios), ratio_q10=float(np.quantile(ratios, 0.1)),
                             ratio_q90=float(np.quantile(ratios, 0.9)),
                             spearman=float(spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic),
                             best_ratio=min(p[1] for p in pairs) / min(p[0] for p in pairs))
                print(f"{store.dir.name:48s} now/stored median {entry['ratio_median']:.3f} "
                      f"(10-90% {entry['ratio_q10']:.3f}-{entry['ratio_q90']:.3f}), fastest {entry['best_ratio']:.3f}, "
                      f"Spearman {entry['spearman']:.3f}, failed {entry['failed']}", flush=True)
            out[store.dir.name] = entry
    medians = [e["ratio_median"] for e in out.values() if "ratio_median" in e]
    if medians:
        print(f"geomean over {len(medians)} workloads of the median now/stored latency: {geomean(medians):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"dataset": str(args.dataset), "here": here.to_json(),
                                         "there": card["device"], "workloads": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
