"""How often the kernel TVM deploys is not the fastest median a run saw, and how much slower it read.

    .venv/bin/python -m bench.deployed_kernel docs/bench/other-networks-256/databases.tar.gz \
        docs/bench/resnet18-v2-256/databases.tar.gz --budgets 16,32,64,128,256

TVM's database returns a workload's records by the mean of their timed repeats, so `compile_tir` and
a model's build deploy the lowest mean; the tuning curves give the lowest median repeat. For every
run database (one `database_tuning_record.json` per run directory, in directories or `.tar.gz`
archives of them) and budget, this compares the two picks: how many differ, and the median repeat of
TVM's pick over the curves' best (1.0 = no loss).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import tarfile
from pathlib import Path
from typing import Iterator

from metatune.fileio import RECORD_FILE
from metatune.measure.database import best_so_far
from metatune.measure.measurer import median_latency, successful_run_seconds


def record_files(source: Path) -> Iterator[tuple[str, list[str]]]:
    """(run name, record lines) of every run database under a directory or in a .tar.gz archive."""
    if source.is_dir():
        for path in sorted(source.rglob(RECORD_FILE)):
            yield str(path.parent), path.read_text().splitlines()
        return
    with tarfile.open(source) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith(RECORD_FILE):
                yield f"{source}:{member.name}", archive.extractfile(member).read().decode().splitlines()


def lowest_median(lines: list[tuple[None, list]], budget: int) -> float | None:
    medians = [median_latency(s, high=True) for _, r in lines[:budget] if (s := successful_run_seconds(r[1]))]
    return min(medians, default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sources", nargs="+", type=Path, help="run databases: directories or .tar.gz archives")
    parser.add_argument("--budgets", default="16,32,64,128,256")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]

    pairs: dict[str, int] = collections.Counter()
    losses: dict[str, list[float]] = collections.defaultdict(list)
    for name, text in (run for source in args.sources for run in record_files(source)):
        strategy = re.sub(r"-r\d+$", "", Path(name).parent.name)  # runs/<workload>/<strategy>-r<repeat>/
        lines = [(None, json.loads(line)[1]) for line in text if line.strip()]
        for deployed in best_so_far(lines, budgets):
            pairs[strategy] += 1
            best_median = lowest_median(lines, deployed.budget)
            if deployed.latency_s > best_median:
                losses[strategy].append(deployed.latency_s / best_median)
    for strategy in [*sorted(pairs), "all"]:
        n = sum(pairs.values()) if strategy == "all" else pairs[strategy]
        ratios = [r for rs in losses.values() for r in rs] if strategy == "all" else losses[strategy]
        spread = f"; its median over the lowest: median {statistics.median(ratios):.3f}x, max {max(ratios):.3f}x" \
            if ratios else ""
        print(f"{strategy}: {len(ratios)} of {n} (run, budget) pairs deploy a kernel whose median is not the "
              f"lowest seen{spread}")


if __name__ == "__main__":
    main()
