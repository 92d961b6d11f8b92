"""`metatune tune --model`: tune every task of a whole network, then compile, verify and time it.

The network (a registry name, an ONNX file, FILE.py:CALLABLE or torchvision:NAME; see
workload/model_source.py) is imported through Relax (workload/relax_tasks.py) and its tasks
are tuned together by MetaSchedule's gradient task scheduler, which spends each batch on the task whose improvement
would shorten the weighted model latency most. Builder, runner, JSON database and the
per-strategy cost model and search are those of `tune_workload`. Under `metatune`, tasks
that metatune's cost model cannot encode get TVM's default instead (fallback.py).
The database makes the run resumable: trials already recorded for the model's tasks count
towards `--trials` (the scheduler checks the budget before each batch, so the last batch can
take the total a little past it; the result reports the true count). The compiled model is
checked against the source network (PyTorch, or onnxruntime for ONNX) before it is timed
against that library (reference_timing: a fresh process, passes alternating with TVM's; no
speed-up when the timing is unstable), and can be exported as a shared library. Where it
disagrees with the source, the task kernels that are wrong are found (task_check.py), set aside as
failed trials, and the network compiled again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from metatune import MetatuneError
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.device import fingerprint_for_target
from metatune.env.tvm_setup import detach_unnamed_meta_schedule_log_handlers
from metatune.measure.check import WrongResultError
from metatune.measure.database import best_so_far, mark_failed, trial_lines
from metatune.measure.reference_timing import MAX_PASSES, Comparison, ReferenceSpec, check_max_passes, compare
from metatune.tune import model_runtime
from metatune.tune.fallback import RoutedCostModel, uncovered_reason
from metatune.tune.logs import set_meta_schedule_console
from metatune.tune.scheduling import gradient_scheduler
from metatune.tune.strategies import check_model_strategy
from metatune.tune.task_check import wrong_tasks
from metatune.tune.tuner import (
    exclusive_database,
    measure_seconds,
    measured_latencies,
    prepare,
    resumed_seed,
    search_seconds,
    search_threads,
    set_aside_broken_timings,
    strategy_parts,
    tuning_run,
    warms_cost_model,
)
from metatune.workload.model_source import ModelSource, Shape
from metatune.workload.relax_tasks import ImportedModel, compile_model, extract_tasks, import_model, task_context

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import ExtractedTask, TuneContext

logger = logging.getLogger(__name__)


@dataclass
class TaskResult:
    name: str
    weight: int  # how many times the model calls this function
    # cost model + search that tuned it: metatune, xgb, random, xgb-fallback (XGBModel + EvolutionarySearch
    # for a task metatune's model cannot encode), or metatune-xgb-prior (BatchBO, whose cost model failed on
    # the task mid-run and was replaced by XGBModel, which learns from the task's measurements from then on)
    tuner: str
    uncovered: str | None = None  # why metatune's cost model cannot encode it (None: it can)
    trials: int = 0  # in the database, this run's and earlier ones
    best_latency_us: float | None = None


@dataclass
class ModelTuneResult:
    model: str  # the --model SPEC
    inputs: list[dict[str, Any]]  # name, shape, dtype of each input
    strategy: str
    trials: int
    tasks: list[TaskResult]
    model_ms: float  # median of TVM's timing passes
    reference: str  # the source library: PyTorch eager (BatchNorm folded, as TVM compiles it) or onnxruntime
    reference_ms: float  # median of its passes on the same inputs
    comparison: Comparison  # every pass of both sides, their ratios, `unstable`, `speedup`
    untuned: list[str]  # tasks without a successful trial: compiled unscheduled
    threads: int
    wall_s: float
    tune_s: float
    search_s: float
    measure_s: float
    compile_s: float
    verified: bool = False
    max_rel_error: float | None = None
    checkpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    fallback_tasks: list[str] = field(default_factory=list)  # tasks metatune's cost model cannot encode
    disturbed: list[list[float]] = field(default_factory=list)  # as TuneResult's: trials timed beside busy processes

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "comparison": self.comparison.to_json()}


def check_model_target(target: str | None, runner: str = "local") -> None:
    """A tuned model is compiled, checked and timed on this machine's CPU (`model_runtime`): any other
    target (a GPU) or a remote runner (kernels tuned for another machine) is refused at once, not
    after its tuning."""
    if runner != "local":
        raise MetatuneError(f"--model runs the tuned network on this machine; it takes no --runner (got {runner}): "
                            "tune a remote device's operators one by one with --workload")
    if target is not None and fingerprint_for_target(target).tvm_target().kind.name != "llvm":
        raise MetatuneError(f"--model tunes a network run on this machine's CPU; --target {target} is not a CPU: "
                            "tune its operators one by one with --workload")


def _deployed_us(lines: list[tuple[Any, Any]]) -> float | None:
    """The latency of the kernel the model's build takes for a task (TVM's rule: lowest mean time)."""
    deployed = best_so_far(lines, [len(lines)])
    return round(deployed[0].latency_s * 1e6, 3) if deployed else None


def task_coverage(tasks: list["ExtractedTask"], target: Any) -> dict[str, str | None]:
    """Task name -> why metatune's cost model cannot encode it (None when it can)."""

    encoder = GraphEncoder(Template.for_target(target))
    out = {}
    for task in tasks:
        out[task.task_name] = uncovered_reason(task_context(task, target), encoder)
        logger.info("task %s (weight %d): %s", task.task_name, task.weight,
                    "metatune's cost model encodes it" if out[task.task_name] is None else out[task.task_name])
    return out


def _contexts(tasks: list["ExtractedTask"], target: Any, searches: list[Any], db_dir: Path,
              seed: int, verbose: bool) -> list["TuneContext"]:
    """One TuneContext per task, each with its own clone of its search strategy (as
    `extracted_tasks_to_tune_contexts` does, but with a strategy per task). Their logs go to
    `<db_dir>/logs`, and to the console too when `verbose`."""
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
    from tvm.s_tir.meta_schedule.utils import fork_seed

    set_meta_schedule_console(verbose)
    detach_unnamed_meta_schedule_log_handlers()
    loggers = get_loggers_from_work_dir(str(db_dir), [t.task_name for t in tasks])
    return [
        task_context(task, target, search_strategy=search, logger=log, rand_state=rand,
                     num_threads=search_threads()).clone()
        for task, search, log, rand in zip(tasks, searches, loggers, fork_seed(seed, n=len(tasks)))
    ]


def _status(tasks: list["ExtractedTask"]) -> Callable[[dict[int, float]], str]:
    def status(best: dict[int, float]) -> str:
        if not best:
            return f"0/{len(tasks)} tasks measured"
        est = sum(tasks[i].weight * secs for i, secs in best.items()) * 1e3
        return f"{len(best)}/{len(tasks)} tasks measured, their weighted best {est:.2f} ms"

    return status


def _plan(strategy: str, setup: Any, tasks: list["ExtractedTask"], uncovered: dict[str, str | None],
          db_dir: Path) -> tuple[Any, list[Any], dict[str, str], list[str]]:
    """Cost model, each task's search strategy, each task's tuner name, and a note: the
    strategy's parts, except that under `metatune` the tasks its cost model cannot encode get
    XGBModel (through RoutedCostModel, which reads a demoted task's records from `db_dir`) and
    EvolutionarySearch."""
    from tvm.s_tir import meta_schedule as ms

    # no seed of its own: each task's clone draws from its TuneContext's rand_state (the run's seed
    # forked per task), so that no two tasks search with the same random stream
    cost_model, search = strategy_parts(strategy, setup, None)
    tuners = {t.task_name: strategy for t in tasks}
    searches = [search] * len(tasks)
    if strategy != "metatune":
        return cost_model, searches, tuners, []
    encodable = {name for name, why in uncovered.items() if why is None}
    for i, task in enumerate(tasks):
        if task.task_name not in encodable:
            tuners[task.task_name], searches[i] = "xgb-fallback", "evolutionary"
    # Routed even when every task is encodable: a later candidate that fails to encode moves its
    # task to XGBModel instead of ending the run.
    fallback = ms.cost_model.CostModel.create("xgb", num_tuning_cores=search_threads(), tree_method="auto")
    notes = [] if len(encodable) == len(tasks) else [
        f"metatune's cost model encodes {len(encodable)} of {len(tasks)} tasks; the other "
        f"{len(tasks) - len(encodable)} are tuned with XGBModel + EvolutionarySearch (TVM's default; "
        "fallback_tasks lists them, tasks[].uncovered says why)"]
    return RoutedCostModel(cost_model, fallback, encodable, db_dir), searches, tuners, notes


def _compile_and_compare(imported: ImportedModel, target: Any, db_dir: Path, threads: int,
                         export: Path | None, max_passes: int) -> tuple[float, float, Comparison]:
    """(compile seconds, max relative error against the source network, the timing of TVM against
    the source library); the compiled model is written to `export` when given."""
    from tvm.s_tir import meta_schedule as ms

    t0 = time.perf_counter()
    database = ms.database.JSONDatabase(work_dir=str(db_dir))
    executable = compile_model(imported.mod, target, database)
    compile_s = time.perf_counter() - t0
    compiled = model_runtime.CompiledModel(executable)
    inputs = imported.model.example_inputs()
    error, run_s = model_runtime.verify(compiled, imported.model, inputs)  # raises WrongResultError
    if export is not None:
        about = {"model": imported.model.source.spec, "target": str(target), "database": str(db_dir)}
        model_runtime.export_library(executable, imported.model.inputs, export, about)
    spec = ReferenceSpec.model(imported.model.source, threads)
    repeat = model_runtime.repeats_for(run_s, spec.pass_s)
    return compile_s, error, compare(spec, lambda: compiled.latency_ms(inputs, repeat), max_passes=max_passes)


def _set_aside_wrong_kernels(tasks: list["ExtractedTask"], db_dir: Path, target: Any, wrong: WrongResultError,
                             set_aside: set[str]) -> list[str]:
    """After the compiled network disagreed with its source (`wrong`): record the trials of the tasks whose
    deployed kernel is wrong as failed, so that the next best is compiled in; their notes. Re-raises
    `wrong`, saying why, when every task's kernel agrees with its function, or when a task in `set_aside`
    (those set aside in an earlier round, added to) disagrees again: then its function, not one kernel,
    is what differs here, and its other trials are left alone."""
    culprits = wrong_tasks(tasks, db_dir, target)
    if not culprits:
        raise WrongResultError(f"{wrong}; yet each task's deployed kernel agrees with its function run unscheduled "
                               "here, so the difference is not in a tuned kernel (the import, or a tolerance)")
    again = [t.name for t in culprits if t.name in set_aside]
    if again:
        raise WrongResultError(f"{wrong}; task(s) {', '.join(again)} disagree with their function run unscheduled "
                               "here after their best kernel was set aside: the difference is not in one kernel")
    set_aside.update(t.name for t in culprits)
    for task in culprits:
        mark_failed(db_dir, task.mod, task.trial)
    return [f"task {t.name}: trial {t.trial + 1}'s kernel computes wrong results (max relative error {t.error:.2e} "
            "against the task's function): recorded as failed, the next best deployed" for t in culprits]


@exclusive_database
def tune_model(model: str | ImportedModel, trials: int, strategy: str, db_dir: Path, checkpoint: str = "auto",
               runner: str = "local", trials_per_iter: int = 16, seed: int = 0,
               report: Callable[[int, int, str], None] | None = None, target: str | None = None,
               verbose: bool = False, input_shapes: list[Shape] | None = None,
               export: Path | None = None, reference_passes: int = MAX_PASSES) -> ModelTuneResult:
    """Tune all tasks of the network `model` (a --model SPEC with its `input_shapes`, or the network
    already imported) until the database holds `trials` trials of them in total, then compile it
    with the best schedules, check it against the source network, write it to `export` (a shared
    library) when given, and time it against the source library (in at most `reference_passes`
    pass pairs). MetaSchedule's logs go to `<db_dir>/logs`, and to the console too when `verbose`."""
    from tvm.s_tir import meta_schedule as ms

    start = time.perf_counter()
    check_model_strategy(strategy)
    check_max_passes(reference_passes)
    check_model_target(target, runner)
    imported = model if isinstance(model, ImportedModel) else import_model(ModelSource.parse(model, input_shapes or []))
    source = imported.model.source
    setup = prepare(strategy, trials, checkpoint, runner, target=target, db_dir=db_dir)
    tvm_target = setup.target
    tasks = extract_tasks(imported.mod, tvm_target)
    uncovered = task_coverage(tasks, tvm_target)
    db_dir.mkdir(parents=True, exist_ok=True)
    measured = [measured_latencies(db_dir, t.dispatched[0]) for t in tasks]
    done = sum(len(m) for m in measured)
    remaining = trials - done
    seed = resumed_seed(seed, done)
    cost_model, searches, tuners, notes = _plan(strategy, setup, tasks, uncovered, db_dir)
    notes = setup.notes + imported.model.notes + notes
    profile: dict[str, float] = {}
    watch = None
    tune_start = time.perf_counter()
    if remaining > 0:
        cold = [(t.dispatched[0], t.task_name) for t, search in zip(tasks, searches) if not warms_cost_model(search)]
        # The gradient scheduler first gives each task one batch in turn: small enough batches
        # let every task get a schedule within the budget.
        per_iter = max(1, min(trials_per_iter, remaining // len(tasks)))
        if per_iter < trials_per_iter:
            notes.append(f"batches of {per_iter} (not {trials_per_iter}) so that all {len(tasks)} tasks "
                         f"get measured within {remaining} trials")
        status = _status(tasks)
        report_status = None if report is None else (lambda n, total, best: report(n, total, status(best)))
        with setup.measurer() as measurer, \
                tuning_run(setup, db_dir, cost_model, cold, done, trials, runner, measured, report_status) as run:
            scheduler, builder = gradient_scheduler(measurer.builder, len(tasks), seed)
            ms.tune_tasks(tasks=_contexts(tasks, tvm_target, searches, db_dir, seed, verbose),
                          task_weights=[float(t.weight) for t in tasks], work_dir=str(db_dir),
                          max_trials_global=remaining, num_trials_per_iter=per_iter,
                          builder=builder, runner=measurer.runner,
                          database=run.database, cost_model=run.cost_model,
                          measure_callbacks=run.callbacks, task_scheduler=scheduler)
        profile, watch = run.profile, run.watch
        for task, why in (run.cost_model.demoted if strategy == "metatune" else {}).items():
            tuners[task], uncovered[task] = "metatune-xgb-prior", why
            notes.append(f"task {task}: metatune's cost model failed on it during tuning ({why}); BatchBO went on "
                         "with XGBModel as its prior, trained on all the task's measurements")
    if watch is not None and (note := watch.note()):
        notes.append(note)
    tune_s = time.perf_counter() - tune_start
    for task in tasks:
        notes += set_aside_broken_timings(db_dir, task.dispatched[0], task.task_name)
    threads = setup.settings.num_threads
    set_aside: set[str] = set()
    while True:
        try:
            compile_s, error, comparison = _compile_and_compare(imported, tvm_target, db_dir, threads, export,
                                                                reference_passes)
            break
        except WrongResultError as wrong:
            notes += _set_aside_wrong_kernels(tasks, db_dir, tvm_target, wrong, set_aside)
    results = []
    for task in tasks:
        lines = trial_lines(db_dir, task.dispatched[0])
        results.append(TaskResult(task.task_name, int(task.weight), tuners[task.task_name],
                                  uncovered[task.task_name], len(lines), _deployed_us(lines)))
    untuned = [r.name for r in results if r.best_latency_us is None]
    if untuned:
        notes.append(f"{len(untuned)} tasks have no successful trial and run unscheduled: {', '.join(untuned)}")
    if comparison.unstable:
        notes.append(comparison.summary())
    assert comparison.tvm is not None
    return ModelTuneResult(
        model=source.spec, inputs=[asdict(i) for i in imported.model.inputs], strategy=strategy,
        trials=sum(r.trials for r in results), tasks=results, model_ms=round(comparison.tvm.median_ms, 3),
        reference=source.library, reference_ms=round(comparison.reference.median_ms, 3),
        comparison=comparison, untuned=untuned, threads=threads,
        wall_s=round(time.perf_counter() - start, 2), tune_s=round(tune_s, 2),
        search_s=round(search_seconds(profile), 2), measure_s=round(measure_seconds(profile), 2),
        compile_s=round(compile_s, 2), verified=True, max_rel_error=error, checkpoint=setup.checkpoint, notes=notes,
        fallback_tasks=[r.name for r in results if r.uncovered is not None],
        disturbed=[b.to_json() for b in watch.disturbed] if watch is not None else [],
    )
