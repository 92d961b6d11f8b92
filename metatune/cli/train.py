"""`metatune train | evaluate | learning-curve`: the cost model's training and its held-out evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from metatune.cli.common import parse_floats, parse_ints, parse_list

app = typer.Typer()


@app.command()
def train(
    data: Path = typer.Option(..., help="Dataset directory (records + card.json)."),
    config: Path = typer.Option(..., help="Training config, e.g. train/configs/x86_64-sapphirerapids-2c.yaml."),
    out: Path = typer.Option(..., help="Run directory to write (weights, card, evaluation, curves)."),
) -> None:
    """Pretrain the GCN cost model, meta-train it with MAML, and evaluate it on held-out workloads."""
    from metatune.learn.train import run_train

    run_train(data, config, out, echo=typer.echo)


@app.command()
def evaluate(
    data: Path = typer.Option(..., help="Dataset directory."),
    run: Path = typer.Option(..., help="A finished `metatune train` run directory."),
    config: Optional[Path] = typer.Option(None, help="Override the run's evaluation settings with this config."),
    ks: Optional[str] = typer.Option(None, help="Comma-separated support-set sizes, e.g. 16,150 (a side study: "
                                                "printed only, the run's card keeps its table)."),
    methods: Optional[str] = typer.Option(None, help="Comma-separated methods out of metatune, finetune, scratch, "
                                                     "metatune-plain, xgb, xgb-transfer (a side study, like --ks)."),
) -> None:
    """Re-run the held-out evaluation table (metatune vs fine-tuning, scratch, XGBoost, ablation)."""
    from metatune.learn.train import run_evaluate

    run_evaluate(data, run, config, echo=typer.echo, ks=tuple(parse_ints(ks, "--ks", "16,150")) if ks else None,
                 methods=tuple(parse_list(methods, "--methods")) if methods else None)


@app.command("learning-curve")
def learning_curve(
    data: Path = typer.Option(..., help="Dataset directory."),
    config: Path = typer.Option(..., help="Training config whose model and pretraining settings are used."),
    fractions: str = typer.Option("0.25,0.5,1", help="Comma-separated fractions of the training workloads "
                                                    "(each with all its records)."),
    records: str = typer.Option("50,100", help="Comma-separated records per workload (with all training workloads)."),
    seeds: str = typer.Option("0", help="Comma-separated seeds; subsets and initialisation differ per seed."),
    out: Optional[Path] = typer.Option(None, help="JSON file for the points, rewritten after each one."),
) -> None:
    """Pretrain on growing subsets of the data and rank validation/held-out workloads zero-shot (k = 0)."""
    from metatune.learn.learning_curve import run_learning_curve

    run_learning_curve(data, config, parse_floats(fractions, "--fractions", "0.25,0.5,1"),
                       parse_ints(records, "--records", "50,100"),
                       parse_ints(seeds, "--seeds", "0,1"), out, echo=typer.echo)
