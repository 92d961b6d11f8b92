"""`metatune tune`: one operator or a whole model, live progress, a JSON result."""

from __future__ import annotations

import hashlib
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import typer

from metatune import MAX_SEED, MAX_TRIALS, MetatuneError
from metatune.cli.common import (
    REFERENCE_PASSES,
    REFERENCE_PASSES_HELP,
    RUNNER_HELP,
    TARGET_HELP,
    check_json_out,
    check_output_dir,
    stop_cleanly,
    write_json,
)
from metatune.tune.strategies import ABLATIONS, MODEL_STRATEGIES, check_model_strategy, check_strategy

if TYPE_CHECKING:
    from metatune.workload.model_source import ModelSource, Shape

STRATEGY_HELP = ("metatune (the zoo model + batch BO over a pool widened by cost-model-guided mutation chains, its GP "
                 "also weighing a prior learnt from the task's own measurements), gradient (the zoo model + gradient "
                 "descent over relaxed tile sizes), xgb (TVM's default), xgb-transfer (XGBModel pretrained on this "
                 "device's dataset: datasets/DEVICE or $METATUNE_DATASET) or random; or metatune-NAME, an ablation "
                 "of metatune's search measured in docs/BENCHMARKS.md and not adopted, NAME one of "
                 f"{', '.join(name.removeprefix('metatune-') for name in ABLATIONS)}. --model takes "
                 f"{', '.join(MODEL_STRATEGIES)}.")

app = typer.Typer()


@app.command()
def tune(
    workload: Optional[str] = typer.Option(None, help="Operator to tune: workload text or a ResNet-18 layer C1..C12."),
    model: Optional[str] = typer.Option(None, help="A whole network to tune, all its tasks: resnet18, tinycnn, "
                                         "PATH.onnx, FILE.py:CALLABLE (returns an nn.Module; the file is run) or "
                                         "torchvision:NAME (random weights). Tasks metatune's cost model cannot "
                                         "encode get TVM's default (XGB + evolutionary)."),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help="A --model input's shape, e.g. "
                                                    "1,3,224,224; repeat it for each input, in order. Needed where "
                                                    "the model does not fix it (FILE.py:CALLABLE, dynamic ONNX "
                                                    "dimensions); torchvision models default to 1,3,224,224."),
    export: Optional[Path] = typer.Option(None, help="Write the tuned --model as a shared library (PATH.so, its "
                                          "inputs in PATH.json), to run with `metatune run PATH.so` or TVM alone."),
    trials: int = typer.Option(64, min=1, help="Total measured trials (over all tasks of a --model), including "
                                             "those already in --db: a re-run with the same --trials only "
                                             "reports the best found."),
    strategy: str = typer.Option("metatune", help=STRATEGY_HELP),
    checkpoint: str = typer.Option("auto", help="'auto' resolves the zoo for the device measured on (this machine, "
                                    "--target's or the RPC server's); else a checkpoint path "
                                    "(weights file, run or zoo version directory) or a zoo id DEVICE_ID/vN."),
    db: Optional[Path] = typer.Option(None, help="MetaSchedule JSON database directory; re-running resumes. "
                                      "Default: a folder under runs/tune/ named by strategy, operator family (or model) and "
                                      "device ('rpc' over RPC), keyed by the whole workload, target, runner, seed and "
                                      "checkpoint. It holds one device's records: "
                                      "a run measuring on another device is refused."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    trials_per_iter: int = typer.Option(16, min=1, help="Candidates measured per batch."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Random seed."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result (best latency, curve, timings; "
                                            "for --model: per-task results, model and PyTorch latency) to this "
                                            "file."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print MetaSchedule's logs (its task table after "
                                 "every batch) and Python warnings on the console; by default they go only to "
                                 "DB/logs."),
    reference_passes: Optional[int] = typer.Option(None, help="With --model. " + REFERENCE_PASSES_HELP),
) -> None:
    """Tune one operator (checked against NumPy) or a whole model (checked and timed against its
    source: PyTorch eager, or onnxruntime for an ONNX file)."""
    with stop_cleanly():
        run_tune(workload, model, trials, strategy, checkpoint, db, runner, trials_per_iter, seed, json_out,
                 target=target, verbose=verbose, input_shape=input_shape or [], export=export,
                 reference_passes=reference_passes)


def default_db_dir(strategy: str, what: str, target: Optional[str], runner: str, seed: int, checkpoint: str) -> Path:
    """A run folder named by strategy, workload (or model) and the device measured on (this machine's,
    or --target's, id; `rpc` for RPC servers), keyed by everything else that makes a run another run
    (target, runner, seed, checkpoint): the same in every process, so that re-running a command without
    --db resumes it, and on another machine, or with one of these changed, starts afresh."""
    from metatune.env.device import fingerprint_for_target

    device = fingerprint_for_target(target).device_id if runner == "local" else "rpc"
    key = hashlib.sha256(f"{what}|{target or 'host'}|{runner}|{seed}|{checkpoint}".encode()).hexdigest()[:10]
    return Path("runs") / "tune" / f"{strategy}-{what.split(':', 1)[0]}-{device}-{key}"


@contextmanager
def quiet_console(db_dir: Path, verbose: bool) -> Iterator[None]:
    """Unless verbose, say once where MetaSchedule's logs go and keep Python's warnings and TVM's C++
    warnings there too, so that the console shows only the progress line and the result."""
    from metatune.tune.logs import NATIVE_LOG_FILE, WARNINGS_FILE, log_dir, native_output_to, warnings_to_file

    if verbose:
        yield
        return
    logs = log_dir(db_dir)
    typer.echo(f"logs: {logs} (MetaSchedule's task tables, Python and TVM warnings; -v prints them here)", err=True)
    with warnings_to_file(logs / WARNINGS_FILE), native_output_to(logs / NATIVE_LOG_FILE):
        yield


@contextmanager
def tuning_console(db_dir: Path, verbose: bool, title: str, trials: int) -> Iterator[Callable[..., None]]:
    """The database locked before anything is printed (a second run on it prints only its error),
    TVM's console output quietened, and a progress bar: yields `show(done, status=None)`."""
    from metatune.progress import progress_bar
    from metatune.tune.tuner import hold_database

    check_output_dir(db_dir, "--db")  # also the default run folder, made in the current directory
    with hold_database(db_dir), quiet_console(db_dir, verbose), progress_bar() as bar:
        task = bar.add_task(title, total=trials, status="")

        def show(done: int, status: str | None = None) -> None:
            # a database may hold more trials than this run asks for (a re-run with a smaller --trials)
            bar.update(task, completed=done, total=max(trials, done), **({} if status is None else {"status": status}))

        yield show


def check_options(trials: int, db: Optional[Path], checkpoint: str, runner: str = "local",
                  target: Optional[str] = None) -> None:
    """Reject bad --trials, --db, --checkpoint, --runner (or a tracker that does not answer) and a local
    --target this machine cannot run in seconds, before TVM's setup (which takes far longer)."""
    from metatune.measure.runners import parse_rpc_url, probe_tracker

    rpc = None if runner == "local" else parse_rpc_url(runner)
    if rpc is None:
        from metatune.env.device import fingerprint_for_target, require_runnable

        require_runnable(fingerprint_for_target(target))
    if trials > MAX_TRIALS:
        raise MetatuneError(f"--trials {trials} is more than {MAX_TRIALS}")
    if db is not None:
        check_output_dir(db, "--db")
    if checkpoint != "auto":
        from metatune.learn.named_checkpoint import open_checkpoint

        open_checkpoint(checkpoint)
    if rpc is not None:  # last: every other mistake is told without waiting on the network
        probe_tracker(rpc.tracker)


def run_tune(workload_text: Optional[str], model: Optional[str], trials: int, strategy: str, checkpoint: str,
             db: Optional[Path], runner: str, trials_per_iter: int, seed: int, json_out: Optional[Path],
             target: Optional[str] = None, verbose: bool = False, input_shape: list[str] | None = None,
             export: Optional[Path] = None, reference_passes: Optional[int] = None) -> None:
    """`--workload TEXT`: one operator, checked against NumPy; `--model SPEC` goes to `run_tune_model`."""
    if (workload_text is None) == (model is None):
        raise MetatuneError("give exactly one of --workload TEXT or --model SPEC")
    if model is None and (input_shape or export is not None or reference_passes is not None):
        raise MetatuneError("--input-shape, --export and --reference-passes go with --model")
    if model is not None:
        check_model_strategy(strategy)
        from metatune.workload.model_source import ModelSource, parse_shape

        shapes = [parse_shape(text) for text in input_shape or []]
        source = ModelSource.parse(model, shapes)  # an unknown model or a missing file: refused before TVM is imported
        from metatune.tune.model_tuner import check_model_target

        check_model_target(target, runner)
        check_options(trials, db, checkpoint, runner, target)
        check_json_out(json_out)
        run_tune_model(source, shapes, trials, strategy, checkpoint, db, runner, trials_per_iter, seed, json_out,
                       target, verbose, export, reference_passes)
        return
    from metatune.workload.operators import resolve_workload

    workload = resolve_workload(workload_text)  # a mistyped name or strategy: refused before TVM is imported
    check_strategy(strategy)
    check_options(trials, db, checkpoint, runner, target)
    check_json_out(json_out)
    from metatune.tune.tuner import tune_workload

    db_dir = db or default_db_dir(strategy, str(workload), target, runner, seed, checkpoint)
    with tuning_console(db_dir, verbose, f"tune {workload.family} [{strategy}]", trials) as show:
        def report(done: int, total: int, best: float) -> None:
            show(done, f"best {best:.1f} GFLOPS" if best else "")  # none yet: the run's start

        result = tune_workload(workload, trials, strategy, db_dir, checkpoint=checkpoint, runner=runner,
                               trials_per_iter=trials_per_iter, seed=seed, target=target, verbose=verbose,
                               report=report)
        show(result.trials)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(
        f"{result.workload} [{result.strategy}]: {result.trials} trials, best {result.best_latency_us} us = "
        f"{result.best_gflops} GFLOPS (verified against NumPy: {result.verified}); wall {result.wall_s} s, "
        f"search {result.search_s} s, measure {result.measure_s} s; database {db_dir}"
    )
    if json_out is not None:
        write_json(result.to_json(), json_out)
    if result.best_latency_us is None:
        typer.echo(f"error: none of the {result.trials} trials left a kernel to deploy (failed runs: their errors in "
                   f"{db_dir / 'logs'}; kernels with wrong results: the notes above); nothing was tuned", err=True)
        raise typer.Exit(1)


def run_tune_model(source: ModelSource, shapes: list[Shape], trials: int, strategy: str, checkpoint: str,
                   db: Optional[Path], runner: str, trials_per_iter: int, seed: int, json_out: Optional[Path],
                   target: Optional[str] = None, verbose: bool = False, export: Optional[Path] = None,
                   reference_passes: Optional[int] = None) -> None:
    """`--model SPEC` (parsed into `source`, with its `--input-shape`s): every task of the network shares
    the `--trials` budget."""
    from metatune.measure.reference_timing import check_max_passes
    from metatune.tune.model_tuner import tune_model
    from metatune.workload.relax_tasks import import_model

    passes = REFERENCE_PASSES if reference_passes is None else reference_passes
    check_max_passes(passes)
    if export is not None and not export.parent.is_dir():
        raise MetatuneError(f"--export {export}: no such folder {export.parent}")
    if export is not None and export.suffix != ".so":
        raise MetatuneError(f"--export {export}: the library's name must end in .so")
    # A model that cannot be loaded or imported stops here, in one line; the frontends' warnings
    # are replayed inside the console below, which sends them to the run's log unless -v.
    with warnings.catch_warnings(record=True) as import_warnings:
        warnings.simplefilter("default")
        imported = import_model(source)
    what = f"model-{source.name}" if source.kind == "registry" else f"model-{source.name}:{source.spec}|{shapes}"
    db_dir = db or default_db_dir(strategy, what, target, runner, seed, checkpoint)
    with tuning_console(db_dir, verbose, f"tune {source.name} [{strategy}]", trials) as show:
        for caught in import_warnings:
            warnings.showwarning(caught.message, caught.category, caught.filename, caught.lineno)
        result = tune_model(imported, trials, strategy, db_dir, checkpoint=checkpoint, runner=runner,
                            trials_per_iter=trials_per_iter, seed=seed, target=target, verbose=verbose,
                            report=lambda done, total, status: show(done, status), export=export,
                            reference_passes=passes)
        show(result.trials)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    width = max(len(t.name) for t in result.tasks)
    typer.echo(f"{'task':<{width}}  weight  tuner         trials  best (us)")
    for t in result.tasks:
        typer.echo(f"{t.name:<{width}}  {t.weight:>6}  {t.tuner:<12}  {t.trials:>6}  {t.best_latency_us}")
    typer.echo(
        f"{result.model} [{result.strategy}]: {result.trials} trials over {len(result.tasks)} tasks; "
        f"{result.comparison.summary()} ({result.threads} threads; "
        f"verified against {result.reference}: max relative error {result.max_rel_error:.1e}); wall {result.wall_s} s, "
        f"tuning {result.tune_s} s, compile {result.compile_s} s; database {db_dir}"
    )
    if export is not None:
        typer.echo(f"exported: {export} (inputs in {export.with_suffix('.json')}); run it with: metatune run {export}")
    if json_out is not None:
        write_json(result.to_json(), json_out)
