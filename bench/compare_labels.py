"""Two datasets of one spec, measured on two occasions: how far apart are their labels, program by program?

    .venv/bin/python -m bench.compare_labels datasets/x86_64-sapphirerapids-2c datasets/x86_64-sapphirerapids-2c-idle

A spec fixes which configurations a build measures (its seed), so two builds of the same spec for one
device class time the same programs. For every workload sealed in both, this matches records by their
stored trace and prints the ratio of the second dataset's latency to the first's (median, 10/90%
quantiles), Spearman's rank correlation, the fraction of program pairs both order alike (what a ranking
loss learns from), and how fast the first dataset's fastest program is by the second's labels. The
spread of the per-workload medians says whether a dataset's labels are on one scale across workloads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau, spearmanr


def compare_workload(first: list[float], second: list[float]) -> dict:
    """Latencies of the same programs in two datasets, in one order."""
    ratios = np.asarray(second) / np.asarray(first)
    best_first = int(np.argmin(first))
    return {
        "programs": len(first),
        "ratio_median": float(np.median(ratios)),
        "ratio_q10": float(np.quantile(ratios, 0.1)),
        "ratio_q90": float(np.quantile(ratios, 0.9)),
        "spearman": float(spearmanr(first, second).statistic),
        "pairs_alike": float((1 + kendalltau(first, second).statistic) / 2),
        "first_best_by_second": float(min(second) / second[best_first]),
    }


def compare_datasets(first_dir: Path, second_dir: Path) -> dict[str, dict]:
    from metatune.dataset.store import DatasetStore
    from metatune.measure.measurer import median_latency

    def sealed(directory: Path) -> dict:
        return {s.workload.key: s for s in DatasetStore(directory, repair=False) if s.sealed}

    first, second = sealed(first_dir), sealed(second_dir)
    out: dict[str, dict] = {}
    for key in sorted(first.keys() & second.keys()):
        latency = {}
        for name, store in (("first", first[key]), ("second", second[key])):
            latency[name] = dict(zip(store.trace_texts(), (median_latency(s) for s in store.run_secs())))
        common = sorted(latency["first"].keys() & latency["second"].keys())
        if len(common) >= 3:
            out[key] = {"split": first[key].split, **compare_workload([latency["first"][t] for t in common],
                                                                        [latency["second"][t] for t in common])}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("first", type=Path, help="a dataset directory")
    parser.add_argument("second", type=Path, help="a dataset of the same spec and device class")
    parser.add_argument("--json", type=Path, help="write the per-workload comparison here")
    args = parser.parse_args()

    from metatune.bench.report import geomean

    workloads = compare_datasets(args.first, args.second)
    if not workloads:
        raise SystemExit(f"no workload is sealed in both {args.first} and {args.second} with common programs")
    for key, w in workloads.items():
        print(f"{key:58s} {w['split']:8s} second/first median {w['ratio_median']:.3f} "
              f"(10-90% {w['ratio_q10']:.3f}-{w['ratio_q90']:.3f}), Spearman {w['spearman']:.3f}, "
              f"pairs alike {w['pairs_alike']:.3f}, first's best {w['first_best_by_second']:.3f} of the best")
    medians = [w["ratio_median"] for w in workloads.values()]
    print(f"{len(workloads)} workloads, {sum(w['programs'] for w in workloads.values())} programs: "
          f"geomean of the median ratios {geomean(medians):.3f}, their range {min(medians):.3f}-{max(medians):.3f}; "
          f"median Spearman {np.median([w['spearman'] for w in workloads.values()]):.3f}, "
          f"median pairs alike {np.median([w['pairs_alike'] for w in workloads.values()]):.3f}, "
          f"median first's best {np.median([w['first_best_by_second'] for w in workloads.values()]):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"first": str(args.first), "second": str(args.second),
                                         "workloads": workloads}, indent=1) + "\n")


if __name__ == "__main__":
    main()
