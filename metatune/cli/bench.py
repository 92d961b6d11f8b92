"""`metatune bench`: the head-to-head suite, with a progress bar and the table at the end."""

from __future__ import annotations

from pathlib import Path

import typer

from metatune import MetatuneError
from metatune.cli.common import parse_ints, parse_list


def run_model_bench_command(model: str, trials_total: int, strategies: str, repeats: int, out: Path,
                            checkpoint: str, runner: str, trials_per_iter: int, report_only: bool,
                            target: str | None = None) -> None:
    from metatune.bench.harness import BenchProgress
    from metatune.bench.model_bench import model_table, run_model_bench
    from metatune.progress import progress_bar

    names = parse_list(strategies, "--strategies")
    if not report_only:
        total = len(names) * repeats * trials_total
        with progress_bar() as bar:
            task = bar.add_task(f"bench {model}", total=total, status="")
            progress = BenchProgress(total=total)
            progress.listeners.append(lambda p: bar.update(task, completed=p.done, status=p.status))
            run_model_bench(model, trials_total, names, repeats, out, checkpoint, runner, trials_per_iter, progress,
                            target)
    table = model_table(out)
    if not table:
        raise MetatuneError(f"{out} holds no model bench results yet")
    (out / "model_table.md").write_text(table)
    typer.echo(table)


def run_bench_command(suite: str, budgets: str, strategies: str, repeats: int, out: Path, checkpoint: str,
                      runner: str, trials_per_iter: int, references: bool, report_only: bool,
                      target: str | None = None) -> None:
    from metatune.bench.harness import BenchConfig, BenchProgress, run_bench
    from metatune.bench.report import CURVES_FILE, RESULTS_FILE, TABLE_FILE, write_report
    from metatune.progress import progress_bar

    config = BenchConfig(suite=suite, budgets=parse_ints(budgets, "--budgets", "16,32,64"),
                         strategies=parse_list(strategies, "--strategies"),
                         repeats=repeats, out=out, checkpoint=checkpoint, runner=runner,
                         trials_per_iter=trials_per_iter, references=references, target=target)
    if not report_only:
        from metatune.bench.suites import load_suite

        total = len(load_suite(suite)) * len(config.strategies) * repeats * config.max_trials
        with progress_bar() as bar:
            task = bar.add_task(f"bench {suite}", total=total, status="")
            progress = BenchProgress(total=total)
            progress.listeners.append(lambda p: bar.update(task, completed=p.done, status=p.status))
            run_bench(config, progress, echo=lambda m: typer.echo(m, err=True),
                      after_run=lambda: write_report(out, config.budgets))
    table = write_report(out, config.budgets)
    if not table:
        raise MetatuneError(f"{out} holds no bench results yet")
    typer.echo(table)
    typer.echo(f"results: {out / RESULTS_FILE}, {out / TABLE_FILE}, {out / CURVES_FILE}")
