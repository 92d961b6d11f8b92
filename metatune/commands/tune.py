"""`metatune tune`: one operator or a whole model, live progress, a JSON result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .. import MetatuneError
from ..progress import progress_bar
from ..workloads import resolve_workload


def run_tune(workload_text: Optional[str], model: Optional[str], trials: int, strategy: str, checkpoint: str,
             db: Optional[Path], runner: str, trials_per_iter: int, seed: int, json_out: Optional[Path]) -> None:
    if (workload_text is None) == (model is None):
        raise MetatuneError("give exactly one of --workload TEXT or --model NAME")
    if model is not None:
        run_tune_model(model, trials, strategy, checkpoint, db, runner, trials_per_iter, seed, json_out)
        return
    workload = resolve_workload(workload_text)
    from ..tune.tuner import tune_workload

    db_dir = db or Path("runs") / "tune" / f"{strategy}-{workload.family}-{abs(hash(str(workload))) % 10**8}"
    with progress_bar() as bar:
        task = bar.add_task(f"tune {workload.family} [{strategy}]", total=trials, status="")

        def report(done: int, total: int, best_gflops: float) -> None:
            bar.update(task, completed=done, status=f"best {best_gflops:.1f} GFLOPS")

        result = tune_workload(workload, trials, strategy, db_dir, checkpoint=checkpoint, runner=runner,
                               trials_per_iter=trials_per_iter, seed=seed, report=report)
        bar.update(task, completed=result.trials)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(
        f"{result.workload} [{result.strategy}]: {result.trials} trials, best {result.best_latency_us} us = "
        f"{result.best_gflops} GFLOPS (verified against NumPy: {result.verified}); wall {result.wall_s} s, "
        f"search {result.search_s} s, measure {result.measure_s} s; database {db_dir}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n")


def run_tune_model(model: str, trials: int, strategy: str, checkpoint: str, db: Optional[Path], runner: str,
                   trials_per_iter: int, seed: int, json_out: Optional[Path]) -> None:
    """`--model NAME`: every task of the network shares the `--trials` budget."""
    from ..tune.model_tuner import check_request, tune_model

    check_request(model, strategy)
    db_dir = db or Path("runs") / "tune" / f"{strategy}-model-{model}"
    with progress_bar() as bar:
        task = bar.add_task(f"tune {model} [{strategy}]", total=trials, status="")

        def report(done: int, total: int, status: str) -> None:
            bar.update(task, completed=done, status=status)

        result = tune_model(model, trials, strategy, db_dir, checkpoint=checkpoint, runner=runner,
                            trials_per_iter=trials_per_iter, seed=seed, report=report)
        bar.update(task, completed=result.trials)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    width = max(len(t.name) for t in result.tasks)
    typer.echo(f"{'task':<{width}}  weight  tuner         trials  best (us)")
    for t in result.tasks:
        typer.echo(f"{t.name:<{width}}  {t.weight:>6}  {t.tuner:<12}  {t.trials:>6}  {t.best_latency_us}")
    typer.echo(
        f"{result.model} [{result.strategy}]: {result.trials} trials over {len(result.tasks)} tasks; "
        f"TVM {result.model_latency_ms} ms vs PyTorch eager {result.torch_latency_ms} ms ({result.threads} threads; "
        f"verified against PyTorch: max relative error {result.max_rel_error:.1e}); wall {result.wall_s} s, "
        f"tuning {result.tune_s} s, compile {result.compile_s} s; database {db_dir}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n")
