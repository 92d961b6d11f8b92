"""End to end: tune every task of a whole model per strategy, compile it, time it against PyTorch.

Layout: `model/<model>/<strategy>-r<repeat>/` (the run's database) and `.json` (its
`ModelTuneResult`), `model_table.md`. Strategies alternate per repeat, as in the suite bench.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable

from metatune.bench.harness import BenchProgress, read_result, write_json
from metatune.tune.model_tuner import check_request, tune_model


def run_model_bench(model: str, trials_total: int, strategies: list[str], repeats: int, out: Path,
                    checkpoint: str = "auto", runner: str = "local", trials_per_iter: int = 16,
                    progress: BenchProgress | None = None, target: str | None = None) -> None:
    """Each (strategy, repeat) tunes the model to `trials_total` trials; finished runs are skipped."""

    for strategy in strategies:
        name = check_request(model, [], strategy).name  # one-line errors before anything is measured
    runs = [(s, r) for r in range(repeats) for s in (strategies if r % 2 == 0 else strategies[::-1])]
    progress = progress or BenchProgress(total=len(runs) * trials_total)
    offset = 0
    for strategy, repeat in runs:
        path = out / "model" / name / f"{strategy}-r{repeat}.json"
        previous = read_result(path)
        if previous and previous["trials"] >= trials_total:
            offset += trials_total
            progress.set(offset, f"{model} [{strategy}] done")
            continue

        def report(n: int, total: int, status: str, base: int = offset, strategy: str = strategy) -> None:
            progress.set(base + min(n, total), f"{model} [{strategy}] {status}")

        result = tune_model(model, trials_total, strategy, path.with_suffix(""), checkpoint=checkpoint,
                            runner=runner, trials_per_iter=trials_per_iter, seed=repeat, report=report,
                            target=target).to_json()
        result["repeat"] = repeat
        write_json(path, result)
        offset += trials_total
        progress.set(offset, f"{model} [{strategy}] {result['model_ms']} ms")


def model_table(out: Path) -> str:
    """Model latency per strategy (median of repeats) against PyTorch eager, from the run JSONs;
    no ratio (`unstable`) when any repeat's timing was unstable."""
    runs = [json.loads(p.read_text()) for p in sorted((out / "model").glob("*/*.json"))]
    if not runs:
        return ""
    lines = ["| model | strategy | trials | repeats | TVM latency ms | PyTorch eager ms | PyTorch / TVM | "
             "tasks (untuned) | tuning wall s | verified |", "|" + "---|" * 10]
    for (model, strategy), group in _groups(runs, lambda r: (r["model"], r["strategy"])).items():
        tvm_ms = statistics.median(r["model_ms"] for r in group)
        torch_ms = statistics.median(r["reference_ms"] for r in group)
        lines.append(
            f"| {model} | {strategy} | {statistics.median(r['trials'] for r in group):.0f} | {len(group)} | "
            f"{tvm_ms:.2f} | {torch_ms:.2f} | {_ratio(torch_ms, tvm_ms, group)} | {len(group[0]['tasks'])} "
            f"({max(len(r['untuned']) for r in group)}) | {statistics.median(r['tune_s'] for r in group):.0f} | "
            f"{all(r['verified'] for r in group)} |")
    return "\n".join(lines) + "\n"


def _ratio(torch_ms: float, tvm_ms: float, group: list[dict[str, Any]]) -> str:
    """PyTorch / TVM, or `unstable` (runs measured before passes were kept count as stable)."""
    if any(r.get("comparison", {}).get("unstable") for r in group):
        return "unstable"
    return f"{torch_ms / tvm_ms:.2f}×"


def _groups(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict[str, Any]]]:
    groups: dict[Any, list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups
