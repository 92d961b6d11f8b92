"""How far apart are two sets of tuning runs, workload by workload? Arms of an ablation, or one strategy twice.

    .venv/bin/python -m bench.run_to_run runs/val-prefix:metatune runs/val-fresh:metatune --budgets 16,32,64,128

Each side is a bench output directory and a strategy in it (repeat 0 unless `:rN` follows). Printed per
workload and budget: the second side's best GFLOPS over the first's as tuned (the run's own best-so-far
curve), then the geometric mean over the workloads both sides have, and the spread of the per-workload
log-ratios (their standard deviation, as a factor). Run with one strategy on both sides (two independent
runs of the same search: an A/A comparison) it says how large a difference one run per workload can show
by chance, which is what an ablation's geomean has to beat before it means anything. A bench seeds each
run with its repeat number, so `DIR:S:r0` against `OTHER:S:r0` shares the seed and shows measurement noise
only; `:r0` against `:r1` shows the seed's share too.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from metatune.bench.report import Run, load_runs, workload_order


@dataclass(frozen=True)
class Side:
    """One set of runs: a strategy's repeat in a bench output directory."""

    out: Path
    strategy: str
    repeat: int = 0

    @classmethod
    def parse(cls, text: str) -> "Side":
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[1]:
            raise argparse.ArgumentTypeError(f"expected DIR:STRATEGY[:rN], not {text!r}")
        repeat = 0
        if len(parts) == 3:
            if not parts[2].startswith("r") or not parts[2][1:].isdigit():
                raise argparse.ArgumentTypeError(f"the repeat is written rN (r0, r1, ...), not {parts[2]!r}")
            repeat = int(parts[2][1:])
        return cls(Path(parts[0]), parts[1], repeat)

    def runs(self) -> dict[str, Run]:
        """This side's runs by workload name."""
        if not (self.out / "runs").is_dir():
            raise SystemExit(f"{self.out} is not a bench output directory (no runs/ in it)")
        found = {r.name: r for r in load_runs(self.out)
                 if r.strategy == self.strategy and r.data.get("repeat", 0) == self.repeat}
        if not found:
            raise SystemExit(f"no runs of {self.strategy} (repeat {self.repeat}) in {self.out}")
        return found


def ratios(first: dict[str, Run], second: dict[str, Run], budget: int) -> dict[str, float]:
    """second / first best GFLOPS at `budget`, for the workloads both sides reached it on."""
    out = {}
    for name in first.keys() & second.keys():
        a, b = first[name].best_at(budget), second[name].best_at(budget)
        if a and b:
            out[name] = b / a
    return out


def geomean_and_spread(values: list[float]) -> tuple[float, float | None]:
    """Geometric mean, and the standard deviation of the log-values as a factor (None below two values)."""
    logs = [math.log(v) for v in values]
    spread = math.exp(statistics.stdev(logs)) if len(logs) > 1 else None
    return math.exp(statistics.fmean(logs)), spread


def table(first: Side, second: Side, budgets: list[int]) -> str:
    a, b = first.runs(), second.runs()
    names = [n for n in workload_order(list(a.values()) + list(b.values())) if n in a and n in b]
    per_budget = {budget: ratios(a, b, budget) for budget in budgets}
    lines = [f"second / first best GFLOPS as tuned; first = {first.out}:{first.strategy}:r{first.repeat}, "
             f"second = {second.out}:{second.strategy}:r{second.repeat}", "",
             "| workload | " + " | ".join(f"@{x}" for x in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for name in names:
        cells = [f"{per_budget[x][name]:.2f}×" if name in per_budget[x] else "–" for x in budgets]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    summary, spread_row = [], []
    for x in budgets:
        values = list(per_budget[x].values())
        if not values:
            summary.append("–")
            spread_row.append("–")
            continue
        mean, spread = geomean_and_spread(values)
        summary.append(f"**{mean:.2f}×** ({len(values)})")
        spread_row.append(f"{spread:.2f}×" if spread else "–")
    lines.append("| geomean (workloads) | " + " | ".join(summary) + " |")
    lines.append("| spread of a workload's ratio (1 s.d.) | " + " | ".join(spread_row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Side.parse, help="DIR:STRATEGY[:rN], the reference side")
    parser.add_argument("second", type=Side.parse, help="DIR:STRATEGY[:rN], compared with the first")
    parser.add_argument("--budgets", default="16,32,64,128,256", help="comma-separated trial budgets")
    args = parser.parse_args(argv)
    budgets = [int(x) for x in args.budgets.split(",")]
    print(table(args.first, args.second, budgets))


if __name__ == "__main__":
    main()
