"""Tables and curves from a bench directory's run results (re-derivable at any time).

Numbers over repeats are medians. "vs xgb" ratios are best-latency speed-ups over TVM's default
tuner at the same budget, combined over workloads by geometric mean. A reference whose
timing was unstable (references.py) is shown, but no ratio is taken against it: `unstable`.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metatune.bench.failures import failed_note
from metatune.bench.harness import REFERENCES_FILE, split_strategy
from metatune.bench.references import peak_unstable
from metatune.bench.retime import RETIMED_FILE
from metatune.measure.reference_timing import CONFIDENCE, UNCERTAINTY_LIMIT
from metatune.tune.strategies import CHECKPOINT_STRATEGIES
from metatune.workload.operators import Workload

BASELINE = "xgb"
RESULTS_FILE = "results.csv"
TABLE_FILE = "table.md"
CURVES_FILE = "curves.png"
CSV_FIELDS = ("workload", "workload_text", "strategy", "repeat", "budget", "best_gflops", "best_latency_us",
              "trials", "wall_s", "search_s", "measure_s", "encode_s", "update_s", "failures", "verified",
              "max_rel_error", "resumed", "timed_trials")


@dataclass
class Run:
    """One tuning run's result JSON."""

    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def strategy(self) -> str:
        return self.data["strategy"]

    @property
    def timed_trials(self) -> int:
        """Trials the run's times cover (results written before this field: all of them)."""
        return int(self.data.get("timed_trials", self.data["trials"]))

    def best_at(self, budget: int) -> float | None:
        """Best GFLOPS within the first `budget` trials: 0.0 where every one of them failed (the strategy
        found no working kernel: a result, not a gap); None if the run is shorter, unless its search space
        ran out first: then its best, which no more trials could have improved."""
        curve = self.data["curve"]
        if len(curve) < budget:
            return curve[-1] if curve and self.data.get("exhausted") else None
        return curve[budget - 1]

    def error_at(self, budget: int) -> float | None:
        """Max relative error against NumPy of the best kernel after `budget` trials; None where it was
        not checked (results written before budgets were checked one by one verified the final kernel only)."""
        if not self.data.get("verified"):
            return None
        checked = self.data.get("checked_at")
        if checked is None:
            return self.data.get("max_rel_error") if budget >= self.data["trials"] else None
        if budget > self.data["trials"] and self.data.get("exhausted"):  # its last kernel stays the deployed one
            return checked.get(str(self.data["trials"]), self.data.get("max_rel_error"))
        return checked.get(str(budget))

    def trials_to_reach(self, gflops: float) -> int | None:
        return next((i + 1 for i, g in enumerate(self.data["curve"]) if g >= gflops), None)


def load_runs(out: Path) -> list[Run]:
    return [Run(json.loads(p.read_text())) for p in sorted((out / "runs").glob("*/*.json"))]


def budgets_reached(out: Path, budgets: list[int]) -> list[int]:
    """Those of `budgets` the longest run in `out` reached (all of them when it holds no run)."""
    longest = max((run.data["trials"] for run in load_runs(out)), default=None) if (out / "runs").is_dir() else None
    if not longest:
        return budgets
    return [b for b in budgets if b <= longest] or [longest]


def workload_order(runs: list[Run]) -> list[str]:
    order: list[str] = []
    for r in sorted(runs, key=lambda r: r.data.get("started", "")):
        if r.name not in order:
            order.append(r.name)
    return order


def strategy_order(runs: list[Run]) -> list[str]:
    preferred = [*CHECKPOINT_STRATEGIES, "xgb-transfer", "xgb", "random"]
    present = {r.strategy for r in runs}
    return [s for s in preferred if s in present] + sorted(present - set(preferred))


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def trials_to_reach(runs: list[Run], name: str, strategy: str, gflops: float) -> float | None:
    """The median over repeats of the trials each needed to reach `gflops`; a repeat that never did
    counts as slower than any that did, so the median is None (never) once half the repeats missed."""
    counts = sorted((r.trials_to_reach(gflops) or math.inf) for r in runs if r.name == name and r.strategy == strategy)
    if not counts:
        return None
    median = statistics.median(counts)
    return None if math.isinf(median) else median


def best(runs: list[Run], name: str, strategy: str, budget: int) -> float | None:
    """The median over repeats of the best GFLOPS within `budget` trials, of the repeats that found a working
    kernel (a failed repeat's 0.0 in a median of two would make up a speed no kernel had; `no_kernel_note`
    names such repeats); 0.0 where every repeat failed, None where none reached the budget."""
    values = _values_at(runs, name, strategy, budget)
    working = [v for v in values if v > 0]
    return _median(working) if working else (0.0 if values else None)


def _values_at(runs: list[Run], name: str, strategy: str, budget: int) -> list[float]:
    return [v for r in runs if r.name == name and r.strategy == strategy and (v := r.best_at(budget)) is not None]


def write_csv(runs: list[Run], budgets: list[int], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in runs:
            for budget in budgets:
                gflops = r.best_at(budget)
                if gflops is None:
                    continue
                writer.writerow({
                    "workload": r.name, "workload_text": r.data["workload"], "strategy": r.strategy,
                    "repeat": r.data["repeat"], "budget": budget, "best_gflops": gflops,
                    "best_latency_us": round(_flops(r) / gflops / 1e3, 3) if gflops else None,
                    **{k: r.data.get(k) for k in CSV_FIELDS[7:] if k != "timed_trials"}, "timed_trials": r.timed_trials,
                    "verified": r.error_at(budget) is not None, "max_rel_error": r.error_at(budget),
                })


def _flops(run: Run) -> float:
    return float(Workload.parse(run.data["workload"]).flops)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def _fmt_best(value: float | None) -> str:
    """A table cell of best GFLOPS: `failed` where every trial so far failed."""
    return "failed" if value == 0.0 else _fmt(value)


def _percent_of(value: float | None, reference: float | None, unstable: bool) -> str:
    """`value` as a share of a reference, or `unstable` when the reference's timing was unstable."""
    if value and reference and unstable:
        return "unstable"
    return _fmt(100 * value / reference if value and reference else None, 0, "%")


def markdown(runs: list[Run], budgets: list[int], references: dict[str, Any]) -> str:
    names, strategies = workload_order(runs), strategy_order(runs)
    torch_refs = references.get("torch", {})
    peak = references.get("fp32_peak_gflops")
    how = (f", each the median of its passes in a fresh process (`unstable`: the median's {CONFIDENCE:.0%} interval "
           f"reaches more than {UNCERTAINTY_LIMIT:.0%} from it, or other processes used the cores)"
           if "fp32_peak" in references else "")  # older references: two in-process passes
    library = references.get("fp32_peak", {}).get("library")
    peak_by = f", {library}'s matmul" if library else ""
    lines = [f"Best GFLOPS after each budget of trials (median of repeats); PyTorch eager and the fp32 peak "
             f"({_fmt(peak)} GFLOPS{peak_by}) measured in the same run{how}.", ""]
    xgb_max = {n: best(runs, n, BASELINE, budgets[-1]) for n in names}
    header = ["workload", "strategy", *[str(b) for b in budgets], f"trials to 95% of xgb@{budgets[-1]}",
              "PyTorch GFLOPS", f"% of PyTorch @{budgets[-1]}", f"% of peak @{budgets[-1]}"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for n in names:
        torch_gflops = torch_refs.get(n, {}).get("gflops")
        torch_unstable = bool(torch_refs.get(n, {}).get("unstable"))
        for s in strategies:
            values = [best(runs, n, s, b) for b in budgets]
            reached = None
            if xgb_max[n]:
                reached = trials_to_reach(runs, n, s, 0.95 * xgb_max[n])
            final = values[-1]  # the percentages at the largest budget, in every row alike
            lines.append("| " + " | ".join([
                n, s, *[_fmt_best(v) for v in values], _fmt(reached, 0) if xgb_max[n] else "—", _fmt(torch_gflops),
                _percent_of(final, torch_gflops, torch_unstable),
                _percent_of(final, peak, peak_unstable(references)),
            ]) + " |")
    lines += ["", summary(runs, budgets, names, strategies)]
    if note := disturbed_note(runs):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def disturbed_note(runs: list[Run]) -> str:
    """Which runs had batches measured while other processes kept cores busy ("" when none did):
    their curves may be wrong, so a comparison that rests on them should be re-run."""
    items = []
    for r in runs:
        batches = r.data.get("disturbed") or []
        if batches:
            trials = sum(int(last) - int(first) + 1 for first, last, _ in batches)
            worst = max(float(cores) for _, _, cores in batches)
            items.append(f"{r.name} {r.strategy} r{r.data.get('repeat', 0)} ({trials} trials, up to {worst:.1f} cores)")
    if not items:
        return ""
    return ("**Disturbed**: other processes kept cores busy while these runs measured (their latencies, and what "
            "the search learned from them, may be off; re-run them on an idle machine): " + "; ".join(items) + ".")


def summary(runs: list[Run], budgets: list[int], names: list[str], strategies: list[str]) -> str:
    """Geomean speed-up over xgb per budget, and where each strategy's wall time went."""
    header = ["strategy", *[f"vs xgb @{b}" for b in budgets], "s/trial search", "measure", "encode", "model update"]
    lines = ["Geometric-mean speed-up over xgb at the same budget (workloads where both reached it), "
             "and wall time per trial (median over runs):", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in strategies:
        ratios = []
        for b in budgets:
            pairs = [(best(runs, n, s, b), best(runs, n, BASELINE, b)) for n in names]
            ratios.append(geomean([a / x for a, x in pairs if a and x]))
        own = [r for r in runs if r.strategy == s and r.timed_trials]
        per_trial = [_median([r.data[k] / r.timed_trials for r in own]) for k in ("search_s", "measure_s", "encode_s",
                                                                                   "update_s")]
        lines.append("| " + " | ".join([s, *[_fmt(v, 2, "×") for v in ratios], *[_fmt(v, 3) for v in per_trial]]) + " |")
    last = budgets[-1]
    lines += ["", f"Geometric-mean speed-up over xgb after its largest budget ({last} trials), by own budget "
              "(workloads where xgb reached it): how few trials match TVM's default tuner.", "",
              "| strategy | " + " | ".join(f"@{b} vs xgb @{last}" for b in budgets) + " |",
              "|" + "---|" * (len(budgets) + 1)]
    for s in strategies:
        ratios = [geomean([a / x for a, x in ((best(runs, n, s, b), best(runs, n, BASELINE, last)) for n in names)
                           if a and x]) for b in budgets]
        lines.append("| " + " | ".join([s, *[_fmt(v, 2, "×") for v in ratios]]) + " |")
    if failed := no_kernel_note(runs, budgets, names, strategies):
        lines += ["", failed]
    gp = gp_summary(runs, strategies)
    return "\n".join(lines + (["", gp] if gp else []))


def no_kernel_note(runs: list[Run], budgets: list[int], names: list[str], strategies: list[str]) -> str:
    """Where a strategy found no working kernel within a budget in every repeat (the geometric means above
    leave those workloads out) or in some of them (the medians are of the others): named ("" when none)."""
    every, some = [], []
    for s in strategies:
        for n in names:
            for b in budgets:
                values = _values_at(runs, n, s, b)
                failed = sum(v == 0 for v in values)
                if failed and failed == len(values):
                    every.append(f"{s} on {n} @{b}")
                elif failed:
                    some.append(f"{s} on {n} @{b} ({failed} of {len(values)} repeats)")
    notes = []
    if every:
        notes.append("**No working kernel** (every trial within the budget failed: `failed` above; these workloads "
                     "are left out of the geometric means): " + "; ".join(every) + ".")
    if some:
        notes.append("**Repeats without a working kernel** (their medians above are of the other repeats): "
                     + "; ".join(some) + ".")
    return "\n\n".join(notes)


def gp_summary(runs: list[Run], strategies: list[str]) -> str:
    """How BatchBO's GP weighed its priors when each run ended, and what its pool held (medians over
    runs that recorded `search_stats`; "" when none did)."""
    fields = ("prior_weight", "task_weight")
    rows = []
    for s in strategies:
        stats = [r.data["search_stats"] for r in runs if r.strategy == s and r.data.get("search_stats")
                 and "prior_weight" in r.data["search_stats"]]
        if not stats:
            continue
        weights = [_median([st[f] for st in stats if st.get(f) is not None]) for f in fields]
        per_batch = [_median([st[k] / st["batches"] for st in stats if st.get("batches")]) for k in ("pool_added",
                                                                                                   "mutants")]
        rows.append("| " + " | ".join([s, *[_fmt(w, 3) for w in weights], *[_fmt(v, 0) for v in per_batch]]) + " |")
    if not rows:
        return ""
    return "\n".join(["BatchBO when each run ended (median over runs): the GP mean's weight on the meta-learned "
                      "model's score and on the task model's (`—`: none), and configurations added to the pool "
                      "per batch, of them mutants.", "",
                      "| strategy | meta-model weight | task-model weight | pool added / batch | mutants / batch |",
                      "|---|---|---|---|---|", *rows])


def retimed_by_repeat(data: dict[str, Any]) -> dict[tuple[str, str, int, int], float]:
    """A `bench --retime` file's GFLOPS per (workload, strategy, repeat, budget)."""
    return {(name, run["strategy"], int(run.get("repeat", 0)), run["budget"]): run["gflops"]
            for name, workload in data["workloads"].items() for run in workload["runs"] if run["gflops"] is not None}


def retimed_medians(data: dict[str, Any]) -> dict[tuple[str, str, int], float]:
    """A `bench --retime` file's GFLOPS per (workload, strategy, budget), the median over repeats."""
    groups: dict[tuple[str, str, int], list[float]] = {}
    for (name, strategy, _, budget), gflops in retimed_by_repeat(data).items():
        groups.setdefault((name, strategy, budget), []).append(gflops)
    return {k: statistics.median(v) for k, v in groups.items()}


def _ratio_row(label: list[str], ratios: list[float | None]) -> str:
    return "| " + " | ".join([*label, *(_fmt(r, 2, "×") for r in ratios)]) + " |"


def retimed_markdown(data: dict[str, Any], strategies: list[str], baselines: tuple[str, ...] = ("xgb",)) -> str:
    """The re-timed best GFLOPS per workload, strategy and budget (median over repeats), the
    geometric-mean speed-up of each strategy over each baseline at the same budget, and, against
    the first baseline present: the same per repeat (how much one seed moves it) and each budget
    against the baseline's largest (how few trials match it)."""
    budgets = data["budgets"]
    best = retimed_medians(data)
    names = list(data["workloads"])
    strategies = [s for s in strategies if any(k[1] == s for k in best)]
    lines = [f"Re-timed side by side ({data['rounds']} interleaved rounds on {data['device_id']}): best GFLOPS of "
             "the kernel each run would deploy after each budget (median of repeats).", "",
             "| workload | strategy | " + " | ".join(str(b) for b in budgets) + " |", "|" + "---|" * (len(budgets) + 2)]
    for n in names:
        for s in strategies:
            lines.append(f"| {n} | {s} | " + " | ".join(_fmt(best.get((n, s, b))) for b in budgets) + " |")
    present = [b for b in baselines if any(k[1] == b for k in best)]
    for baseline in present:
        lines += ["", f"Re-timed: geometric-mean speed-up over {baseline} at the same budget (workloads where both "
                  "reached it).", "", "| strategy | " + " | ".join(f"vs {baseline} @{b}" for b in budgets) + " |",
                  "|" + "---|" * (len(budgets) + 1)]
        for s in strategies:
            lines.append(_ratio_row([s], [geomean([best[(n, s, b)] / best[(n, baseline, b)] for n in names
                                                   if (n, s, b) in best and (n, baseline, b) in best])
                                          for b in budgets]))
    if present:
        lines += _per_repeat_lines(data, strategies, present[0]) + _against_largest_lines(data, best, strategies,
                                                                                         present[0])
    return "\n".join(lines) + "\n"


def _per_repeat_lines(data: dict[str, Any], strategies: list[str], baseline: str) -> list[str]:
    """Each repeat's own ratio over the baseline's run of the same repeat (nothing with one repeat)."""
    budgets, names = data["budgets"], list(data["workloads"])
    gflops = retimed_by_repeat(data)
    repeats = sorted({k[2] for k in gflops})
    if len(repeats) < 2:
        return []
    lines = ["", f"Re-timed, repeat by repeat: geometric-mean speed-up over {baseline}'s run of the same repeat at "
             "the same budget (workloads where both reached it).", "",
             "| strategy | repeat | " + " | ".join(f"vs {baseline} @{b}" for b in budgets) + " |",
             "|" + "---|" * (len(budgets) + 2)]
    for s in strategies:
        if s == baseline:
            continue
        for rep in repeats:
            ratios = [geomean([gflops[(n, s, rep, b)] / gflops[(n, baseline, rep, b)] for n in names
                               if (n, s, rep, b) in gflops and (n, baseline, rep, b) in gflops]) for b in budgets]
            if any(r is not None for r in ratios):
                lines.append(_ratio_row([s, str(rep)], ratios))
    return lines


def _against_largest_lines(data: dict[str, Any], best: dict[tuple[str, str, int], float], strategies: list[str],
                           baseline: str) -> list[str]:
    """Each budget of each strategy against the baseline after its largest budget (`best`: the medians of repeats)."""
    budgets, names = data["budgets"], list(data["workloads"])
    last = max((b for b in budgets if any((n, baseline, b) in best for n in names)), default=None)
    if last is None or len(budgets) < 2:
        return []
    lines = ["", f"Re-timed: geometric-mean speed-up over {baseline} after its largest budget ({last} trials), by own "
             f"budget (median of repeats; workloads where {baseline} reached it): how few trials match it.", "",
             "| strategy | " + " | ".join(f"@{b} vs {baseline} @{last}" for b in budgets) + " |",
             "|" + "---|" * (len(budgets) + 1)]
    for s in strategies:
        if s == baseline:
            continue
        lines.append(_ratio_row([s], [geomean([best[(n, s, b)] / best[(n, baseline, last)] for n in names
                                               if (n, s, b) in best and (n, baseline, last) in best])
                                      for b in budgets]))
    return lines


def plot_curves(runs: list[Run], references: dict[str, Any], path: Path) -> None:
    """Best-so-far GFLOPS vs trials: one panel per workload, one line per strategy (median)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, strategies = workload_order(runs), strategy_order(runs)
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, n in zip(axes.flat, names):
        for s in strategies:
            curves = [r.data["curve"] for r in runs if r.name == n and r.strategy == s]
            if not curves:
                continue
            length = min(len(c) for c in curves)
            median = [statistics.median(c[i] for c in curves) for i in range(length)]
            ax.plot(range(1, length + 1), median, label=s)
        torch_gflops = references.get("torch", {}).get(n, {}).get("gflops")
        if torch_gflops:
            ax.axhline(torch_gflops, color="grey", linestyle="--", linewidth=1, label="PyTorch eager")
        ax.set_title(n, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOPS")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def retimed_baselines(strategies: list[str]) -> tuple[str, ...]:
    """What the re-timed kernels are compared with: TVM's default, metatune, and every strategy set to a
    checkpoint (`metatune@ZOO_ID`), so that a bench of checkpoints side by side reports their ratios itself."""
    return (BASELINE, "metatune", *[s for s in strategies if split_strategy(s)[1] is not None])


def write_report(out: Path, budgets: list[int]) -> str:
    """results.csv, table.md and curves.png from everything measured so far (table.md ends with the
    re-timed comparison when `bench --retime` made one); returns the table."""
    runs = load_runs(out)
    if not runs:
        return ""
    references = json.loads((out / REFERENCES_FILE).read_text()) if (out / REFERENCES_FILE).exists() else {}
    write_csv(runs, budgets, out / RESULTS_FILE)
    table = markdown(runs, budgets, references)
    if note := failed_note(out):
        table += "\n" + note + "\n"
    if (out / RETIMED_FILE).exists():
        retimed = json.loads((out / RETIMED_FILE).read_text())
        strategies = strategy_order(runs)
        table += "\n" + retimed_markdown(retimed, strategies, retimed_baselines(strategies))
    (out / TABLE_FILE).write_text(table)
    plot_curves(runs, references, out / CURVES_FILE)
    return table
