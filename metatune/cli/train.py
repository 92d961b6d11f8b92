"""`metatune train | evaluate | learning-curve`: the cost model's training and its held-out evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from metatune.cli.common import check_json_out, check_output_dir, parse_floats, parse_ints, parse_list, stop_cleanly

app = typer.Typer()
ENCODED_KEPT = "the programs encoded so far"  # cached per workload: a restart reads them back


def check_inputs(data: Path, config: Optional[Path]) -> None:
    """A missing dataset or a missing or mistyped config: refused in a second, before PyTorch and the
    trainer are imported."""
    from metatune.dataset.card import dataset_card
    from metatune.learn.config import load_config

    dataset_card(data)
    if config is not None:
        load_config(config)


@app.command()
def train(
    data: Path = typer.Option(..., help="Dataset directory (records + card.json)."),
    config: Path = typer.Option(..., help="Training config, e.g. train/configs/x86_64-sapphirerapids-2c.yaml."),
    out: Path = typer.Option(..., help="Run directory to write (weights, card, evaluation, curves)."),
    workers: Optional[int] = typer.Option(None, min=1, help="Processes that encode the records and train and "
                                                            "evaluate the models side by side (default: one per "
                                                            "core); the results do not depend on it."),
) -> None:
    """Pretrain the GCN cost model, meta-train it with MAML, and evaluate it on held-out workloads."""
    check_output_dir(out, "--out")
    check_inputs(data, config)
    from metatune.learn.train import run_train

    with stop_cleanly(resumes=False, kept=ENCODED_KEPT):
        run_train(data, config, out, echo=typer.echo, workers=workers)


@app.command()
def evaluate(
    data: Path = typer.Option(..., help="Dataset directory (with --transfer: device B's dataset)."),
    run: Optional[Path] = typer.Option(None, help="A finished `metatune train` run directory: re-run its table."),
    transfer: Optional[str] = typer.Option(None, help="Instead of --run: the cross-device study. Device A's "
                                                      "checkpoint (zoo id, checkpoint file or run directory), "
                                                      "evaluated on --data's held-out workloads."),
    native: Optional[str] = typer.Option(None, help="With --transfer: B's own checkpoint (default: the newest "
                                                    "zoo checkpoint trained on B's device, if any)."),
    adapted: Optional[str] = typer.Option(None, help="With --transfer: the checkpoint `zoo adapt` made for B "
                                                     "(default: the newest adapted zoo checkpoint of B's device)."),
    source_data: Optional[Path] = typer.Option(None, help="With --transfer: A's dataset, xgb-transfer's training "
                                                          "data (default: the dataset A's card names)."),
    out: Optional[Path] = typer.Option(None, help="With --transfer: directory for transfer.json and transfer.md "
                                                  "(default runs/transfer-A-to-B)."),
    repeats: Optional[int] = typer.Option(None, min=1, help="With --transfer: support/query draws per workload "
                                                             "and k (default 3)."),
    config: Optional[Path] = typer.Option(None, help="Override the run's evaluation settings with this config."),
    ks: Optional[str] = typer.Option(None, help="Comma-separated support-set sizes, e.g. 16,150 (with --run a side "
                                                "study: printed only, the run's card keeps its table; with "
                                                "--transfer default 0,8,16,32,64)."),
    methods: Optional[str] = typer.Option(None, help="Comma-separated methods: with --run out of metatune, finetune, "
                                                     "scratch, metatune-plain, xgb, xgb-transfer (a side study, "
                                                     "like --ks); with --transfer out of source, source-finetune, "
                                                     "adapted, native, scratch, xgb, xgb-transfer."),
    zoo: Optional[Path] = typer.Option(None, "--zoo", help="Zoo directory for zoo ids (default: $METATUNE_ZOO, "
                                                           "else the shipped zoo/)."),
) -> None:
    """Re-run a training run's held-out table, or (--transfer) measure how device A's checkpoint
    ranks device B's held-out programs after k of B's measurements, against B's own and adapted
    checkpoints, fine-tuning, scratch and XGBoost."""
    from metatune import MetatuneError

    if (run is None) == (transfer is None):
        raise MetatuneError("give either --run (a training run's table) or --transfer (the cross-device study)")
    if transfer is not None and config is not None:
        raise MetatuneError("--config applies to --run only")
    check_inputs(data, config)
    support_sizes = tuple(parse_ints(ks, "--ks", "16,150")) if ks else None
    method_names = tuple(parse_list(methods, "--methods")) if methods else None
    if transfer is not None:
        if out is not None:
            check_output_dir(out, "--out")
        from metatune.learn.transfer_study import METHODS, STUDY_KS, run_study, study_config

        with stop_cleanly(resumes=False, kept=ENCODED_KEPT):
            run_study(transfer, data, study_config(support_sizes or STUDY_KS, repeats or 3, method_names or METHODS),
                      native=native, adapted=adapted, source_data=source_data, out=out, zoo_root=zoo,
                      echo=typer.echo)
        return
    if any(v is not None for v in (native, adapted, source_data, out, repeats, zoo)):
        raise MetatuneError("--native, --adapted, --source-data, --out, --repeats and --zoo apply to --transfer only")
    from metatune.learn.train import run_evaluate

    with stop_cleanly(resumes=False, kept=ENCODED_KEPT):
        run_evaluate(data, run, config, echo=typer.echo, ks=support_sizes, methods=method_names)


@app.command("learning-curve")
def learning_curve(
    data: Path = typer.Option(..., help="Dataset directory."),
    config: Path = typer.Option(..., help="Training config: its split, and (without --from) its model and "
                                          "pretraining settings."),
    fractions: str = typer.Option("0.25,0.5,1", help="Comma-separated fractions of the training workloads "
                                                    "(each with all its records)."),
    records: str = typer.Option("50,100", help="Comma-separated records per workload (with all training workloads; "
                                               "with --cross, with each fraction)."),
    seeds: str = typer.Option("0", help="Comma-separated seeds; subsets and initialisation differ per seed."),
    out: Optional[Path] = typer.Option(None, help="JSON file for the points, rewritten after each one."),
    source: Optional[str] = typer.Option(None, "--from", help="Another device's checkpoint (zoo id, checkpoint file "
                                                              "or run directory): each subset fine-tunes it as "
                                                              "`zoo adapt` does, instead of training from scratch."),
    native: Optional[str] = typer.Option(None, help="With --from: the checkpoint trained on all of --data (zoo id, "
                                                    "file or run directory), ranked alongside as the goal."),
    cross: bool = typer.Option(False, "--cross", help="Every fraction with every record count (default: the "
                                                      "fractions with all records, the record counts with all "
                                                      "workloads)."),
    zoo: Optional[Path] = typer.Option(None, "--zoo", help="Zoo directory for zoo ids (default: $METATUNE_ZOO, "
                                                           "else the shipped zoo/)."),
) -> None:
    """Pretrain on growing subsets of the data (or, with --from, fine-tune another device's checkpoint on them)
    and rank validation/held-out workloads zero-shot (k = 0)."""
    check_inputs(data, config)
    check_json_out(out, option="--out")
    from metatune.learn.learning_curve import run_learning_curve
    from metatune.learn.named_checkpoint import open_checkpoint

    points = (parse_floats(fractions, "--fractions", "0.25,0.5,1"), parse_ints(records, "--records", "50,100"),
              parse_ints(seeds, "--seeds", "0,1"))
    with stop_cleanly(resumes=False, kept=ENCODED_KEPT):
        run_learning_curve(data, config, *points, out, echo=typer.echo,
                           source=open_checkpoint(source, zoo) if source else None,
                           native=open_checkpoint(native, zoo) if native else None, cross=cross)
