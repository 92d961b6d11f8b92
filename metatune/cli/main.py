"""The `metatune` command line: one sub-command per pipeline stage.

Heavy imports (TVM, torch) happen inside the commands so that `--help` is instant. Errors
caused by the user's input are printed as one line and exit with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from metatune import MetatuneError, __version__

app = typer.Typer(
    help="metatune: a meta-learned cost model and batch-BO tuner for tensor programs on Apache TVM.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workloads_app = typer.Typer(help="Operator families and named workload suites.", no_args_is_help=True)
app.add_typer(workloads_app, name="workloads")
dataset_app = typer.Typer(help="Build, inspect and export datasets of measured programs.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")


RUNNER_HELP = (
    "Where to time candidates: 'local', or 'rpc://HOST:PORT/KEY' for the servers registered under KEY at a "
    "TVM RPC tracker (building stays on this machine; the target is the remote device's)."
)


TARGET_HELP = (
    "TVM target to compile for: JSON ('{\"kind\": \"llvm\", \"mcpu\": \"znver3\"}'), a tag ('nvidia/nvidia-h100') or "
    "the string form ('llvm -mcpu=znver3 -num-cores=2'). Default: this machine's (`metatune device`)."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metatune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Build datasets, train, publish and tune with meta-learned cost models."""


def _write_json(data: object, path: Optional[Path]) -> None:
    text = json.dumps(data, indent=2)
    if path is None or str(path) == "-":
        typer.echo(text)
    else:
        path.write_text(text + "\n")


@workloads_app.command("list")
def workloads_list(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the operator families (parameter names, one example) and the suites."""
    from metatune.workload.operators import FAMILIES, RESNET18_NAMES, SUITES, get_suite

    data = {
        "families": {
            name: {"params": list(f.params), "description": f.description, "example": f.example}
            for name, f in FAMILIES.items()
        },
        "suites": {name: [str(w) for w in get_suite(name)] for name in SUITES},
    }
    if as_json:
        _write_json(data, None)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Operator families")
    for col in ("family", "parameters", "example"):
        table.add_column(col)
    for name, f in FAMILIES.items():
        table.add_row(name, ",".join(f.params), f.example)
    console.print(table)
    for name in SUITES:
        suite = Table(title=f"Suite {name}")
        suite.add_column("name")
        suite.add_column("workload")
        for i, w in enumerate(get_suite(name)):
            suite.add_row(RESNET18_NAMES[i] if name == "resnet18" else str(i), str(w))
        console.print(suite)


@app.command()
def device(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
) -> None:
    """Show the device fingerprint (CPU class, ISA flags, TVM target, device id) of this machine or a target."""
    from metatune.env.device import fingerprint_for_target

    fp = fingerprint_for_target(target)
    if as_json:
        _write_json(fp.to_json(), None)
        return
    for key, value in fp.to_json().items():
        typer.echo(f"{key:>14}: {value}")


@app.command()
def measure(
    workload: str = typer.Argument(..., help="Workload text (e.g. 'dense:m=64,n=64,k=64') or a ResNet-18 layer C1..C12."),
    random: int = typer.Option(32, "--random", min=1, help="How many distinct random configurations to measure."),
    seed: int = typer.Option(0, help="Seed for sampling configurations."),
    batch: int = typer.Option(32, min=1, help="Candidates per builder call (each call pays a worker start-up)."),
    verify: bool = typer.Option(True, help="Check each build against the NumPy reference before timing it."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-candidate results to this file."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
) -> None:
    """Measure random schedules of one workload and report throughput and failures."""
    from metatune.cli.measure import run_measure

    run_measure(workload, random, seed, batch, verify, json_out, runner, target)


@dataset_app.command("build")
def dataset_build(
    spec: Path = typer.Option(..., help="Dataset spec (YAML), e.g. datasets/specs/default-cpu.yaml."),
    out: Path = typer.Option(..., help="Dataset directory; re-running with the same directory resumes."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    workers: Optional[int] = typer.Option(None, min=1, help="Parallel build workers (default: all cores)."),
    batch: int = typer.Option(32, min=1, help="Candidates per builder call."),
    verify: bool = typer.Option(True, help="Check each build against NumPy before timing it."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
) -> None:
    """Sample workloads from a spec and measure random configurations into a TVM JSON database.

    Resumable: a re-run continues where it stopped and never re-measures a recorded
    configuration; killing it at any moment loses at most the batch in flight.
    """
    from metatune.cli.dataset import run_build

    run_build(spec, out, runner, workers, batch, verify, target)


@dataset_app.command("info")
def dataset_info(
    directory: Path = typer.Argument(..., help="Dataset directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the dataset card as JSON."),
) -> None:
    """Summarise a dataset: counts per family and split, failures by kind, provenance."""
    from metatune.cli.dataset import run_info

    run_info(directory, as_json)


@dataset_app.command("encode")
def dataset_encode(directory: Path = typer.Argument(..., help="Dataset directory.")) -> None:
    """Encode every complete workload as super-graph programs into DIR/cache/<template version>/.

    Training reads this cache; an entry whose record count or template version no longer matches
    is re-encoded, so re-running after the dataset grew or the template changed is always safe."""
    from metatune.cli.dataset import run_encode

    run_encode(directory)


@dataset_app.command("export")
def dataset_export(
    directory: Path = typer.Argument(..., help="Dataset directory."),
    out: Path = typer.Option(..., help="Directory for database_workload.json + database_tuning_record.json."),
) -> None:
    """Write all measured records as one MetaSchedule JSONDatabase (usable by TVM directly)."""
    from metatune.cli.dataset import run_export

    run_export(directory, out)


rpc_app = typer.Typer(help="TVM RPC trackers and servers: measure on other machines.", no_args_is_help=True)
app.add_typer(rpc_app, name="rpc")


@rpc_app.command("status")
def rpc_status(
    tracker: str = typer.Option(..., help="Tracker address HOST:PORT, e.g. 127.0.0.1:9190."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    probe: bool = typer.Option(
        False, help="Also ask each free server for its device fingerprint (holds each server for a moment)."
    ),
) -> None:
    """List the servers (devices) registered at a TVM RPC tracker, per key, and the --runner URL of each key."""
    from metatune.cli.rpc import run_status

    run_status(tracker, as_json, probe)


@app.command()
def encode(
    workload: str = typer.Argument(..., help="Workload text (e.g. 'dense:m=64,n=64,k=64') or a ResNet-18 layer C1..C12."),
    random: int = typer.Option(8, "--random", min=1, help="How many distinct random configurations to encode."),
    seed: int = typer.Option(0, help="Seed for sampling configurations."),
    show: bool = typer.Option(False, "--show", help="Print each graph: slots with roles and loop features."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-graph statistics to this file."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP + " Any target works: nothing is run."),
) -> None:
    """Encode random schedules of one workload as super-graph program graphs."""
    from metatune.cli.encode import run_encode

    run_encode(workload, random, seed, show, json_out, target)


@app.command()
def tune(
    workload: Optional[str] = typer.Option(None, help="Operator to tune: workload text or a ResNet-18 layer C1..C12."),
    model: Optional[str] = typer.Option(None, help="A whole network to tune, all its tasks: resnet18 or tinycnn. Tasks "
                                         "metatune's cost model cannot encode get TVM's default (XGB + evolutionary)."),
    trials: int = typer.Option(64, min=1, help="Total measured trials, over all tasks of a --model "
                                             "(including those already in --db)."),
    strategy: str = typer.Option("metatune", help="metatune (zoo model + batch BO), gradient (zoo model + gradient descent over relaxed tile sizes), xgb (TVM default), xgb-transfer (XGBModel pretrained on the shipped dataset) or random."),
    checkpoint: str = typer.Option("auto", help="'auto' resolves the zoo for this device, or a checkpoint path."),
    db: Optional[Path] = typer.Option(None, help="MetaSchedule JSON database directory; re-running resumes."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    trials_per_iter: int = typer.Option(16, min=1, help="Candidates measured per batch."),
    seed: int = typer.Option(0, help="Random seed."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result (best latency, curve, timings; "
                                            "for --model: per-task results, model and PyTorch latency)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print MetaSchedule's logs (its task table after "
                                 "every batch) and Python warnings on the console; by default they go only to "
                                 "DB/logs."),
) -> None:
    """Tune one operator (checked against NumPy) or a whole model (checked and timed against PyTorch eager)."""
    from metatune.cli.tune import run_tune

    run_tune(workload, model, trials, strategy, checkpoint, db, runner, trials_per_iter, seed, json_out,
             target=target, verbose=verbose)


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
    from metatune.cli.common import parse_ints, parse_list
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
    from metatune.cli.common import parse_floats, parse_ints
    from metatune.learn.learning_curve import run_learning_curve

    run_learning_curve(data, config, parse_floats(fractions, "--fractions", "0.25,0.5,1"),
                       parse_ints(records, "--records", "50,100"),
                       parse_ints(seeds, "--seeds", "0,1"), out, echo=typer.echo)


@app.command()
def bench(
    suite: str = typer.Option("quick", help="Workload suite: resnet18 (C1..C12 + dense 1024), quick, or a YAML/JSON "
                                            "file listing workload texts or {name, workload} items."),
    model: Optional[str] = typer.Option(None, help="Instead of a suite: tune every task of this model (e.g. resnet18) "
                                                   "per strategy and time it against PyTorch eager."),
    trials_total: int = typer.Option(1000, min=1, help="With --model: trials per strategy over all of the model's tasks."),
    budgets: str = typer.Option("16,32,64,128,256", help="Trial budgets to report; each run goes to the largest."),
    strategies: str = typer.Option("metatune,xgb,xgb-transfer,random", help="Comma-separated tuning strategies."),
    repeats: int = typer.Option(1, min=1, help="Independent runs (seeds) per workload and strategy; medians reported."),
    out: Path = typer.Option(Path("runs/bench"), help="Output directory; re-running with it resumes."),
    checkpoint: str = typer.Option("auto", help="Checkpoint for the metatune strategy ('auto' = zoo)."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    trials_per_iter: int = typer.Option(16, min=1, help="Candidates measured per batch."),
    references: bool = typer.Option(True, help="Measure PyTorch eager per workload and the machine's fp32 peak."),
    report_only: bool = typer.Option(False, help="Only rebuild results.csv, table.md and curves.png from --out."),
) -> None:
    """Tune every workload of a suite (or every task of a model) with every strategy, side by side."""
    from metatune.cli.bench import run_bench_command, run_model_bench_command

    if model is not None:
        run_model_bench_command(model, trials_total, strategies, repeats, out, checkpoint, runner, trials_per_iter,
                                report_only, target)
        return
    run_bench_command(suite, budgets, strategies, repeats, out, checkpoint, runner, trials_per_iter, references,
                      report_only, target)


zoo_app = typer.Typer(help="Device-specific cost-model checkpoints: list, show, verify, publish, resolve.",
                      no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")

ZOO_OPTION = typer.Option(None, "--zoo", help="Zoo directory (default: $METATUNE_ZOO, else the shipped zoo/).")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON.")


@zoo_app.command("list")
def zoo_list(zoo: Optional[Path] = ZOO_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List the published checkpoints (device, version, template version, headline metrics)."""
    from metatune.cli.zoo import run_list

    run_list(zoo, as_json)


@zoo_app.command("show")
def zoo_show(
    checkpoint: str = typer.Argument(..., help="DEVICE_ID/VERSION, or DEVICE_ID for its newest version."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show one checkpoint's card: device, dataset, metrics, checksum, versions."""
    from metatune.cli.zoo import run_show

    run_show(zoo, checkpoint, as_json)


@zoo_app.command("verify")
def zoo_verify(
    checkpoint: Optional[str] = typer.Argument(None, help="Only this checkpoint (default: all)."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check files, sha256, card fields, template version and loading; exit 2 listing every problem."""
    from metatune.cli.zoo import run_verify

    run_verify(zoo, checkpoint, as_json)


@zoo_app.command("publish")
def zoo_publish(
    run_dir: Path = typer.Argument(..., help="Training run directory (model.safetensors + card.json)."),
    zoo: Optional[Path] = ZOO_OPTION,
    hf_repo: Optional[str] = typer.Option(None, "--hf-repo", help="Also upload to this Hugging Face repo OWNER/NAME."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a run and add it under a new version (v1, v2, ...); never overwrites."""
    from metatune.cli.zoo import run_publish

    run_publish(zoo, run_dir, as_json, hf_repo)


@zoo_app.command("pull")
def zoo_pull(
    hf_repo: str = typer.Option(..., "--hf-repo", help="Hugging Face repo (OWNER/NAME) to import checkpoints from."),
    revision: Optional[str] = typer.Option(None, help="Branch, tag or commit of the repo."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Import a Hub repo's checkpoints that are not in the zoo yet (needs huggingface_hub)."""
    from metatune.cli.zoo import run_pull

    run_pull(zoo, hf_repo, revision, as_json)


@zoo_app.command("resolve")
def zoo_resolve(
    device_id: Optional[str] = typer.Option(None, "--device-id", help="Device id (default: this machine)."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the checkpoint a device would use: exact match, else the nearest device (with a warning)."""
    from metatune.cli.zoo import run_resolve

    run_resolve(zoo, device_id, as_json)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    try:
        app()
    except MetatuneError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)

