"""`metatune bench`: the head-to-head suite, with a progress bar and the table at the end."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import typer

from metatune import MetatuneError
from metatune.cli.common import (
    REFERENCE_PASSES,
    REFERENCE_PASSES_HELP,
    RUNNER_HELP,
    TARGET_HELP,
    check_output_dir,
    parse_ints,
    parse_list,
    stop_cleanly,
)
from metatune.tune.strategies import MODEL_STRATEGIES

app = typer.Typer()
RETIMED_KEPT = "retimed.json of the last finished re-timing"
REFERENCES_KEPT = "the references measured again so far"
DEFAULT_ROUNDS, DEFAULT_TRIALS_TOTAL, DEFAULT_TRIALS_PER_ITER = 3, "1000", 16


@contextmanager
def bench_console(out: Path, title: str, total: int) -> Iterator[Any]:
    """A progress bar, with TVM's C++ warnings (written to file descriptor 2) kept in `out/logs`
    instead of burying it; yields the bar's `BenchProgress`."""
    from metatune.bench.harness import BenchProgress
    from metatune.progress import progress_bar
    from metatune.tune.logs import NATIVE_LOG_FILE, native_output_to

    log = out / "logs" / NATIVE_LOG_FILE
    typer.echo(f"logs: {log} (TVM's C++ warnings)", err=True)
    with native_output_to(log), progress_bar() as bar:
        task = bar.add_task(title, total=total, status="")
        progress = BenchProgress(total=total)
        progress.listeners.append(lambda p: bar.update(task, completed=p.done, status=p.status))
        yield progress


@app.command()
def bench(
    suite: str = typer.Option("quick", help="Workload suite: resnet18 (C1..C12 + dense 1024), quick, a shipped "
                                            "suite file's name (other-networks: VGG-16, Inception-v3, "
                                            "MobileNet-v2 and GPT-2 layers; search-validation: where search designs are "
                                            "chosen), or a YAML/JSON file listing "
                                            "workload texts or {name, workload} items."),
    model: Optional[str] = typer.Option(None, help="Instead of a suite: tune every task of this model (a tune --model "
                                                   "SPEC: resnet18, PATH.onnx, FILE.py:CALLABLE, torchvision:NAME) per "
                                                   "strategy and time it against PyTorch eager and onnxruntime."),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help="With --model: an input's shape "
                                                    "(repeat per input), as for tune --model."),
    trials_total: str = typer.Option(DEFAULT_TRIALS_TOTAL, help="With --model: trials per strategy over all of the model's tasks; "
                                                  "several (200,1000) are reached in turn by one resumed run."),
    replay_at: Optional[str] = typer.Option(None, help="With --model: also time each run's model as its first N "
                                                       "trials left it (its database cut to N records; comma-"
                                                       "separated, up to the largest --trials-total): how soon a "
                                                       "strategy reaches a latency, all timed side by side."),
    budgets: Optional[str] = typer.Option(None, help="Trial budgets to report; each run goes to the largest. Default: "
                                                     "16,32,64,128,256; with --report-only, --retime or "
                                                     "--references-only, those the last bench into --out asked for."),
    strategies: Optional[str] = typer.Option(None, help="Comma-separated strategies, named as for tune --strategy; "
                                             "a checkpoint strategy may name its own, STRATEGY@CHECKPOINT (a zoo id "
                                             "or path). Default: metatune,xgb,xgb-transfer,random, xgb-transfer left "
                                             "out where the device has no dataset to pretrain it on "
                                             "(datasets/DEVICE or $METATUNE_DATASET); with --model: metatune,xgb,"
                                             "random, the strategies whole-model tuning offers."),
    repeats: int = typer.Option(1, min=1, help="Independent runs (seeds) per workload and strategy; medians reported."),
    out: Path = typer.Option(Path("runs/bench"), help="Output directory; re-running with it resumes."),
    checkpoint: str = typer.Option("auto", help="Checkpoint for the strategies that take one (metatune and its "
                                                "variants, gradient) unless named as STRATEGY@CHECKPOINT; 'auto' "
                                                "resolves the zoo for the device tuned for."),
    runner: str = typer.Option("local", help=RUNNER_HELP + " With an RPC runner pass --no-references (they are "
                                                          "timed on this machine)."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    trials_per_iter: int = typer.Option(DEFAULT_TRIALS_PER_ITER, min=1, help="Candidates measured per batch."),
    references: bool = typer.Option(True, help="Measure PyTorch eager per workload and the machine's fp32 peak."),
    report_only: bool = typer.Option(False, help="Only rebuild results.csv, table.md and curves.png from every run "
                                                 "in --out (options that choose runs or how to tune or time them "
                                                 "are refused: it takes them all, and measures nothing)."),
    references_only: bool = typer.Option(False, help="Only re-measure the PyTorch and fp32-peak references of the "
                                                     "suite into --out, print old vs new, and rebuild the table."),
    retime: bool = typer.Option(False, help="Only time again, side by side, the kernel each run in --out of "
                                            "--strategies (default: metatune,xgb,xgb-transfer,random) and --repeats "
                                            "would deploy after each budget (its best so far), interleaved over "
                                            "--rounds shuffled rounds, into retimed.json, and rebuild the table with "
                                            "them: strategies tuned minutes apart compared free of the host's drift."),
    rounds: int = typer.Option(DEFAULT_ROUNDS, min=1, help="With --retime: rounds of timing per kernel (median taken)."),
    reference_passes: int = typer.Option(REFERENCE_PASSES, help=REFERENCE_PASSES_HELP + " Also the most passes of each "
                                                  "PyTorch-eager and fp32-peak reference of a suite."),
) -> None:
    """Tune every workload of a suite (or every task of a model) with every strategy, side by side."""
    check_modes(model, report_only=report_only, references_only=references_only, retime=retime,
                references=references, rounds=rounds, input_shape=input_shape, trials_total=trials_total,
                replay_at=replay_at, reference_passes=reference_passes, budgets=budgets,
                tuning_options={"--strategies": strategies is not None, "--repeats": repeats != 1,
                                "--checkpoint": checkpoint != "auto",
                                "--trials-per-iter": trials_per_iter != DEFAULT_TRIALS_PER_ITER},
                measuring_options={"--runner": runner != "local",
                                   "--target": target is not None})
    check_output_dir(out, "--out")
    if model is None and not report_only:
        from metatune.bench.suites import load_suite

        load_suite(suite)  # a mistyped suite: refused before TVM is imported
    if runner != "local" and (retime or references_only):
        raise MetatuneError(f"--{'retime' if retime else 'references-only'} times on this machine; it takes no "
                            f"--runner (got {runner})")
    strategies = strategies or default_strategies(model, target, runner,
                                                  tuning=not (retime or references_only or report_only))
    with stop_cleanly(resumes=not (retime or references_only),
                      kept=RETIMED_KEPT if retime else REFERENCES_KEPT if references_only else ""):
        if model is not None:
            run_model_bench_command(model, parse_ints(trials_total, "--trials-total", "200,1000"), strategies,
                                    repeats, out, checkpoint, runner, trials_per_iter, report_only, target,
                                    input_shape or [], parse_ints(replay_at, "--replay-at", "300") if replay_at else [],
                                    reference_passes)
        elif references_only:
            run_references_command(suite, budgets, strategies, out, target, reference_passes)
        elif retime:
            run_retime_command(suite, budgets, strategies, repeats, out, rounds, target)
        else:
            run_bench_command(suite, budgets, strategies, repeats, out, checkpoint, runner, trials_per_iter,
                              references, report_only, target, reference_passes)


def check_modes(model: Optional[str], *, report_only: bool, references_only: bool, retime: bool, references: bool,
                rounds: int, input_shape: Optional[list[str]], trials_total: str, replay_at: Optional[str],
                reference_passes: int, budgets: Optional[str], tuning_options: dict[str, bool],
                measuring_options: dict[str, bool]) -> None:
    """One line, before anything runs, for options that contradict each other or that the chosen mode
    would ignore (a user who passes one expects it to change something). `tuning_options`: whether each
    option that only tuning (and, for --strategies and --repeats, --retime) reads was given;
    `measuring_options`: the same for those that every mode but --report-only reads."""
    modes = [name for name, on in (("--report-only", report_only), ("--references-only", references_only),
                                   ("--retime", retime)) if on]
    if len(modes) > 1:
        raise MetatuneError(f"{' and '.join(modes)} are different modes of bench: give one")
    read_by_retime = ("--strategies", "--repeats")
    for mode in modes:
        ignored = [name for name, on in tuning_options.items() if on and not (mode == "--retime" and name in
                                                                                read_by_retime)]
        if ignored:
            raise MetatuneError(f"{', '.join(ignored)} do{'es' if len(ignored) == 1 else ''} not apply to {mode} "
                                "(it tunes nothing" + ("; it takes every run in --out" if mode == "--report-only"
                                                       else "") + ")")
    if model is not None:
        suite_only = {"--retime": retime, "--references-only": references_only, "--no-references": not references,
                      "--budgets": budgets is not None}
        if given := [name for name, on in suite_only.items() if on]:
            raise MetatuneError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to suite benches only "
                                "(a --model bench compiles and times whole models at --trials-total and --replay-at)")
    else:
        model_only = {"--replay-at": replay_at is not None, "--input-shape": bool(input_shape),
                      "--trials-total": trials_total != DEFAULT_TRIALS_TOTAL}
        if given := [name for name, on in model_only.items() if on]:
            raise MetatuneError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --model benches only")
    if report_only:
        given = [name for name, on in measuring_options.items() if on]
        given += ["--reference-passes"] if reference_passes != REFERENCE_PASSES else []
        if given:
            raise MetatuneError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --report-only "
                                "(it measures nothing; it takes every run in --out)")
    if references_only and not references:
        raise MetatuneError("--references-only measures the references that --no-references turns off: give one")
    if rounds != DEFAULT_ROUNDS and not retime:
        raise MetatuneError("--rounds applies to --retime only (the rounds each kernel is timed in again)")
    if retime and reference_passes != REFERENCE_PASSES:
        raise MetatuneError("--reference-passes does not apply to --retime (it times kernels in --rounds)")


def default_strategies(model: Optional[str], target: Optional[str], runner: str, tuning: bool) -> str:
    """`--strategies` left out: what whole-model tuning offers for --model, else the suite's default,
    less what this device cannot run where the bench tunes (re-timing takes the suite's default in full,
    whichever machine tuned it; a report takes every run in --out). Over RPC with no --target, the
    servers' device is not known yet: xgb-transfer, which pretrains on its dataset, is left out."""
    if model is not None:
        return ",".join(MODEL_STRATEGIES)
    from metatune.bench.harness import SUITE_STRATEGIES
    from metatune.bench.harness import default_strategies as suite_strategies

    if not tuning:
        return ",".join(SUITE_STRATEGIES)
    if runner != "local" and target is None:
        typer.echo("note: xgb-transfer left out of the default strategies: it pretrains on the dataset of the "
                   "servers' device, which --target names", err=True)
        return ",".join(s for s in SUITE_STRATEGIES if s != "xgb-transfer")
    return ",".join(suite_strategies(target, echo=lambda m: typer.echo(m, err=True)))


DEFAULT_BUDGETS = (16, 32, 64, 128, 256)


def tuning_budgets(budgets: str | None) -> list[int]:
    return parse_ints(budgets, "--budgets", "16,32,64") if budgets is not None else list(DEFAULT_BUDGETS)


def report_budgets(budgets: str | None, out: Path) -> list[int]:
    """--budgets, else those the last bench that tuned into `out` asked for, else (a folder from before
    they were recorded) those of the defaults its runs reached: a table rebuilt from a 64-trial bench
    gets no empty 128- and 256-trial columns."""
    from metatune.bench.harness import recorded_budgets
    from metatune.bench.report import budgets_reached

    if budgets is not None:
        return tuning_budgets(budgets)
    return recorded_budgets(out) or budgets_reached(out, list(DEFAULT_BUDGETS))


def run_references_command(suite: str, budgets: str | None, strategies: str, out: Path, target: str | None = None,
                           reference_passes: int = REFERENCE_PASSES) -> None:
    """`--references-only`: the suite's references measured again with the fresh-process routine, the change
    tabulated, and the bench table (if any runs exist) rebuilt against them."""
    from metatune.bench.harness import BenchConfig, remeasure_references
    from metatune.bench.report import write_report

    config = BenchConfig(suite=suite, budgets=report_budgets(budgets, out),
                         strategies=parse_list(strategies, "--strategies"), out=out, target=target,
                         reference_passes=reference_passes)
    typer.echo(remeasure_references(config, echo=lambda m: typer.echo(m, err=True)))
    if (out / "runs").exists():
        typer.echo(write_report(out, config.budgets))


def run_retime_command(suite: str, budgets: str | None, strategies: str, repeats: int, out: Path, rounds: int,
                       target: str | None = None) -> None:
    """`--retime`: the deployed kernels of every run in `out` timed again side by side; the table rebuilt."""
    from metatune.bench.harness import BenchConfig
    from metatune.bench.report import write_report
    from metatune.bench.retime import retime_bench

    config = BenchConfig(suite=suite, budgets=report_budgets(budgets, out),
                         strategies=parse_list(strategies, "--strategies"), repeats=repeats, out=out, target=target)
    retime_bench(config, rounds, echo=lambda m: typer.echo(m, err=True))
    typer.echo(write_report(out, config.budgets))


def run_model_bench_command(model: str, trials_totals: list[int], strategies: str, repeats: int, out: Path,
                            checkpoint: str, runner: str, trials_per_iter: int, report_only: bool,
                            target: str | None = None, input_shape: list[str] | None = None,
                            replay_at: list[int] | None = None, reference_passes: int = REFERENCE_PASSES) -> None:
    """`--model SPEC`: each strategy tunes all the model's tasks; the table compares them with
    PyTorch eager and onnxruntime."""
    from metatune.bench.model_bench import check_request, model_table, run_model_bench
    from metatune.tune.model_tuner import check_model_target
    from metatune.workload.model_source import parse_shape

    names = parse_list(strategies, "--strategies")
    shapes = [parse_shape(text) for text in input_shape or []]
    if not report_only:
        # checked before the console writes its log into out
        check_request(model, trials_totals, names, shapes, replay_at, reference_passes)
        check_model_target(target, runner)
        with bench_console(out, f"bench {model}", len(names) * repeats * max(trials_totals)) as progress:
            run_model_bench(model, trials_totals, names, repeats, out, checkpoint, runner, trials_per_iter, progress,
                            target, shapes, replay_at, reference_passes)
    table = model_table(out)
    if not table:
        raise MetatuneError(f"{out} holds no model bench results yet")
    (out / "model_table.md").write_text(table)
    typer.echo(table)


def run_bench_command(suite: str, budgets: str | None, strategies: str, repeats: int, out: Path, checkpoint: str,
                      runner: str, trials_per_iter: int, references: bool, report_only: bool,
                      target: str | None = None, reference_passes: int = REFERENCE_PASSES) -> None:
    """Every workload of `suite` with every strategy; the report is rewritten after each run, so partial
    results are readable and a re-run resumes."""
    from metatune.bench.failures import FAILURES_FILE, RunFailure
    from metatune.bench.harness import BenchConfig, check_request, run_bench
    from metatune.bench.report import CURVES_FILE, RESULTS_FILE, TABLE_FILE, write_report

    config = BenchConfig(suite=suite, budgets=report_budgets(budgets, out) if report_only else tuning_budgets(budgets),
                         strategies=parse_list(strategies, "--strategies"),
                         repeats=repeats, out=out, checkpoint=checkpoint, runner=runner,
                         trials_per_iter=trials_per_iter, references=references, target=target,
                         reference_passes=reference_passes)
    failed: list[RunFailure] = []
    if not report_only:
        from metatune.bench.suites import load_suite

        check_request(config)  # before the console writes its log into out (run_bench's own check is then cached)
        total = len(load_suite(suite)) * len(config.strategies) * repeats * config.max_trials
        with bench_console(out, f"bench {suite}", total) as progress:
            failed = run_bench(config, progress, echo=lambda m: typer.echo(m, err=True),
                               after_run=lambda: write_report(out, config.budgets))
    table = write_report(out, config.budgets)
    if not table and not failed:
        raise MetatuneError(f"{out} holds no bench results yet")
    if table:
        typer.echo(table)
        typer.echo(f"results: {out / RESULTS_FILE}, {out / TABLE_FILE}, {out / CURVES_FILE}")
    if failed:
        typer.echo(f"error: {len(failed)} run(s) failed: {'; '.join(f.label for f in failed)} (tracebacks in "
                   f"{out / FAILURES_FILE}); the same command retries them", err=True)
        raise typer.Exit(1)
