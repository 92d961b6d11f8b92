"""How much room a budget leaves: one strategy's re-timed best vs the fastest kernel any run has found.

    .venv/bin/python -m bench.headroom docs/bench/checked-after-timing/resnet18-256-retimed.json:xgb@256 \
        docs/bench/resnet18-late-256/retimed.json docs/bench/resnet18-promoted/retimed.json --peak 454

A ratio "tuner A / tuner B at budget N" can only be as large as the fastest kernel A can reach over B's kernel.
The first argument names the reference (a `bench --retime` file, a strategy and a budget); every further file
adds re-timed kernels of other runs of the same device and workloads. Printed per workload: the reference's
GFLOPS, the fastest re-timed kernel of all files (which run found it), and their ratio: the largest speed-up
over the reference that any of these runs shows is possible; with `--peak`, also the machine's fp32 peak over the
reference (a bound no kernel passes). The geometric means say how large a suite-wide ratio could be at most if a
tuner found, on every workload, that fastest kernel.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from metatune.bench.report import geomean, retimed_medians


@dataclass(frozen=True)
class Kernel:
    """One run's best kernel at one budget, re-timed."""

    gflops: float
    source: str  # file, strategy, repeat and budget


@dataclass(frozen=True)
class Reference:
    """A strategy's best at a budget in one re-timed file: FILE:STRATEGY@BUDGET."""

    path: Path
    strategy: str
    budget: int

    @classmethod
    def parse(cls, text: str) -> "Reference":
        path, sep, rest = text.rpartition(":")
        strategy, at, budget = rest.partition("@")
        if not sep or not at or not strategy or not budget.isdigit():
            raise argparse.ArgumentTypeError(f"expected FILE:STRATEGY@BUDGET, not {text!r}")
        return cls(Path(path), strategy, int(budget))


def load_kernels(path: Path) -> dict[str, list[Kernel]]:
    """Every re-timed kernel of a `bench --retime` file, by workload name."""
    data = json.loads(path.read_text())
    if "workloads" not in data:
        raise SystemExit(f"{path} is not a `bench --retime` file (no workloads in it)")
    out: dict[str, list[Kernel]] = {}
    for name, entry in data["workloads"].items():
        out[name] = [Kernel(r["gflops"], f"{path.parent.name}/{path.name} {r['strategy']} r{r.get('repeat', 0)} "
                                         f"@{r['budget']}")
                     for r in entry["runs"] if r.get("gflops")]
    return out


def reference_gflops(reference: Reference) -> dict[str, float]:
    """The reference strategy's re-timed best at its budget, by workload (median over its repeats)."""
    medians = retimed_medians(json.loads(reference.path.read_text()))
    out = {name: value for (name, strategy, budget), value in medians.items()
           if strategy == reference.strategy and budget == reference.budget}
    if not out:
        raise SystemExit(f"no re-timed {reference.strategy} runs at {reference.budget} trials in {reference.path}")
    return out


def check_one_device(paths: list[Path]) -> None:
    """Re-timings of one device only: another machine's kernels would set its speed as this one's headroom."""
    devices = {path: json.loads(path.read_text()).get("device_id") for path in paths}
    if len(set(devices.values())) > 1:
        raise SystemExit("re-timed on different devices: " + ", ".join(f"{p} on {d}" for p, d in devices.items()))


def headroom(reference: Reference, others: list[Path], peak: float | None = None) -> str:
    check_one_device([reference.path, *others])
    ref = reference_gflops(reference)
    fastest: dict[str, Kernel] = {}
    for path in [reference.path, *others]:
        for name, kernels in load_kernels(path).items():
            for kernel in kernels:
                if name in ref and (name not in fastest or kernel.gflops > fastest[name].gflops):
                    fastest[name] = kernel
    header = f"| workload | {reference.strategy}@{reference.budget} | fastest found | fastest / reference |"
    lines = [header + (" peak / reference |" if peak else ""), "|---|---|---|---|" + ("---|" if peak else "")]
    ratios, peak_ratios = [], []
    for name, value in ref.items():
        best = fastest[name]
        ratios.append(best.gflops / value)
        row = f"| {name} | {value:.0f} | {best.gflops:.0f} ({best.source}) | {best.gflops / value:.2f}× |"
        if peak:
            peak_ratios.append(max(peak, best.gflops) / value)
            row += f" {max(peak, best.gflops) / value:.2f}× |"
        lines.append(row)
    summary = f"| **geomean** | | | **{geomean(ratios):.2f}×** |"
    if peak:
        summary += f" **{geomean(peak_ratios):.2f}×** |"
    lines.append(summary)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Reference.parse, help="FILE:STRATEGY@BUDGET, e.g. retimed.json:xgb@256")
    parser.add_argument("others", type=Path, nargs="*", help="more `bench --retime` files of the same device")
    parser.add_argument("--peak", type=float, help="the machine's fp32 peak in GFLOPS (references.json)")
    args = parser.parse_args(argv)
    print(headroom(args.reference, args.others, args.peak))


if __name__ == "__main__":
    main()
