"""`metatune tune`: tune one operator with MetaSchedule and metatune's plug-ins or TVM's default.

Every strategy (`metatune.tune.strategies`) shares TVM's builder, runner and JSON database, so results compare
fairly. The database directory makes a run resumable: trials already recorded for the workload
count towards `--trials`. The best schedule is checked against NumPy before it is reported.
One run at a time writes a database (`exclusive_database`); Ctrl-C or SIGTERM ends the tuning
loop at the next batch boundary without writing the batch in flight (`tuning_run`), so that a
re-run of the same command resumes.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ParamSpec, Protocol, TypeVar

from metatune import MetatuneError
from metatune.cost_model.xgb_transfer import TransferredXGB, default_dataset_dir
from metatune.encode.supergraph import GraphEncoder, Template, device_kind
from metatune.env.device import usable_cores
from metatune.env.target import parse_target, target_json
from metatune.env.interrupt import raise_if_stopped, uninterrupted
from metatune.env.plugin import MEASURE_CALLBACK, plugin_class
from metatune.env.tvm_setup import detach_unnamed_meta_schedule_log_handlers, import_tensor_intrinsics
from metatune.fileio import INDEX_FILE, RECORD_FILE, WORKLOAD_FILE, cut_torn_line, hold_directory, write_atomic
from metatune.learn.named_checkpoint import load_from_zoo, open_checkpoint
from metatune.measure.check import WrongResultError, check_schedule
from metatune.measure.database import (
    best_so_far,
    earlier_results,
    mark_failed,
    record_of,
    records_in_trial_order,
    trial_lines,
)
from metatune.measure.measurer import (
    BROKEN_TIMING,
    Measurer,
    MeasureSettings,
    broken_timing,
    median_latency,
    successful_run_seconds,
)
from metatune.measure.runners import make_runner, parse_rpc_url, remote_check
from metatune.search.batch_bo import BatchBO
from metatune.search.gradient.search import GradientSearch
from metatune.search.online_model import MetaTuneCostModel
from metatune.space.knob_space import DesignSpaces
from metatune.tune.fallback import spaces_uncovered_reason
from metatune.tune.load_watch import LoadWatch, watch_load
from metatune.tune.logs import set_meta_schedule_console
from metatune.tune.strategies import BATCH_BO_SETTINGS, CHECKPOINT_STRATEGIES, check_strategy
from metatune.workload.operators import Workload
from metatune.zoo import ZooWarning, default_zoo_dir, resolve


@dataclass
class TuneResult:
    workload: str
    strategy: str
    trials: int
    # the kernel TVM deploys (lowest mean time; its median here), the one checked against NumPy
    best_latency_us: float | None
    best_gflops: float | None
    # GFLOPS of the fastest median after each trial: what the search found; at about one budget in
    # eight a near-tie makes it another kernel than the deployed one (docs/BENCHMARKS.md)
    curve: list[float]
    wall_s: float
    search_s: float
    measure_s: float
    encode_s: float = 0.0
    update_s: float = 0.0
    failures: int = 0
    verified: bool = False
    max_rel_error: float | None = None
    checkpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    # The trials the times above cover: those this invocation measured. A resumed run's earlier
    # trials are in `trials` and `curve`, but their times were spent (and reported) before; what
    # re-reading them cost this invocation (encoding them for the cost model) is in its times.
    timed_trials: int = 0
    # metatune's own search strategies: their counters for this invocation (batches, pool sizes,
    # seconds per phase, the GP's last weights for its priors); None for TVM's strategies.
    search_stats: dict[str, Any] | None = None
    # [first trial, last trial, cores] of each batch this invocation measured while other processes
    # kept cores busy (`load_watch`): those latencies may be too slow.
    disturbed: list[list[float]] = field(default_factory=list)
    # trial count (as text, a JSON key) -> max relative error against NumPy of the best kernel after
    # that many trials, for the counts asked for (`check_at`)
    checked_at: dict[str, float] = field(default_factory=dict)
    # the search ran out of unmeasured configurations before `trials` (a small space): asking for
    # more trials again would measure nothing new
    exhausted: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measured_latencies(db_dir: Path, mod: Any) -> list[float | None]:
    """Median latency of every trial of `mod` in the database, in measurement order
    (None for a failed trial)."""
    return latencies_of(trial_lines(db_dir, mod))


def latencies_of(lines: list[tuple[Any, Any]]) -> list[float | None]:
    """`measured_latencies` of trial lines already read."""
    out: list[float | None] = []
    for _, record in lines:
        secs = successful_run_seconds(record[1])
        out.append(median_latency(secs, high=True) if secs else None)
    return out


def resolve_checkpoint(checkpoint: str, fingerprint: Any) -> tuple[Any, str, list[str]]:
    """The trained model to tune with: `auto` resolves the zoo for this device; else a path or a
    zoo id (`open_checkpoint`), with a note when it was trained on another device."""

    notes: list[str] = []
    if checkpoint != "auto":
        named = open_checkpoint(checkpoint)
        target = fingerprint.tvm_target()
        trained_on, needed = named.trained.builder.template.version, Template.for_target(target).version
        if trained_on != needed:
            # Every prediction would fail and each task fall back to TVM's model, after its coverage check passed.
            raise MetatuneError(f"checkpoint {checkpoint} encodes programs with super-graph template {trained_on}, "
                                f"and {fingerprint.device_id}'s programs need {device_kind(target).name}'s ({needed}): "
                                "pass a checkpoint trained on that kind of device")
        if named.device_id and named.device_id != fingerprint.device_id:
            note = (f"checkpoint {checkpoint} was trained on {named.device_id}, this device is {fingerprint.device_id}: "
                    "its predictions start less accurate and online adaptation has more to correct")
            warnings.warn(note, stacklevel=2)
            notes.append(note)
        return named.trained, named.id, notes  # a bare DEVICE_ID as the version it resolved to

    zoo_dir = default_zoo_dir()
    if not (zoo_dir / INDEX_FILE).exists():
        raise MetatuneError(f"no model zoo at {zoo_dir}: run `make train-zoo` to train one, "
                            "or pass --checkpoint PATH")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        resolution = resolve(fingerprint, zoo_dir)
    for w in caught:
        notes.append(str(w.message))
        warnings.warn(str(w.message), stacklevel=2)
    return load_from_zoo(resolution.entry), resolution.entry.id, notes


class _ProgressCallbackLogic:
    """Reports, after every batch, the trials done and the best median latency (s) of each task
    measured so far (by task index), starting from the bests a resumed database already holds."""

    def __init__(self, total: int, done: int, report: Callable[[int, int, dict[int, float]], None],
                 best: dict[int, float]) -> None:
        self.total, self.done, self.report = total, done, report
        self.best = dict(best)

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
              runner_results: Any) -> None:
        for r in runner_results:
            if r.error_msg is None and (secs := successful_run_seconds(r.run_secs)) is not None:
                self.best[task_id] = min(self.best.get(task_id, float("inf")), median_latency(secs, high=True))
        self.done += len(runner_results)
        self.report(self.done, self.total, self.best)


def progress_callback(total: int, report: Callable[[int, int, dict[int, float]], None],
                      measured: list[list[float | None]]) -> Any:
    """A MeasureCallback calling `report(done, total, best latency per task)` once now, with the state
    the run starts from (so that a progress bar's ETA counts from here, not from the first batch's end),
    then after every batch; `measured` holds each task's latencies already in the database
    (`measured_latencies`)."""
    done = sum(len(latencies) for latencies in measured)
    best = {i: min(ok) for i, latencies in enumerate(measured) if (ok := [x for x in latencies if x is not None])}
    report(done, total, best)
    return plugin_class(MEASURE_CALLBACK, _ProgressCallbackLogic, "ProgressCallback")(total, done, report, best)


class _StopAtBatchEndLogic:
    """Runs first after every batch, before MetaSchedule's AddToDatabase: once Ctrl-C or SIGTERM asked
    to stop, the batch just measured is not written (a signal sent to the whole process group may
    have killed a worker, so its failures may be the signal's) and `Interrupted` ends the tuning loop."""

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
              runner_results: Any) -> None:
        raise_if_stopped()


def measure_callbacks() -> list[Any]:
    """MetaSchedule's default measure callbacks (database, artifacts, cost model), after the one that
    stops the loop at a batch boundary when asked to; callbacks of one's own go after these."""
    from tvm.s_tir import meta_schedule as ms

    stop = plugin_class(MEASURE_CALLBACK, _StopAtBatchEndLogic, "StopAtBatchEnd")()
    return [stop, *ms.measure_callback.MeasureCallback.create("default")]


@dataclass
class TuningRun:
    """What TVM's loop of one tuning run is given (its JSON database, the cost model, the measure
    callbacks), the load watch beside it, and the MetaSchedule profile of the loop once it ended."""

    database: Any
    cost_model: Any
    callbacks: list[Any]
    watch: LoadWatch | None
    profile: dict[str, float] = field(default_factory=dict)


@contextmanager
def tuning_run(setup: TuningSetup, db_dir: Path, cost_model: Any, cold_tasks: list[tuple[Any, str]], done: int,
               trials: int, runner: str, measured: list[list[float | None]],
               report: Callable[[int, int, dict[int, float]], None] | None) -> Iterator[TuningRun]:
    """Set up and enclose TVM's loop (`ms.tune_tir` / `ms.tune_tasks`, run inside with the yielded
    parts) so that a run resumed after `done` of its `trials` goes on from what was measured (not as a
    replay of the uninterrupted run: `resumed_seed` re-seeds it): the cost model first learns the
    database's records of `cold_tasks` (`(IRModule, task name)`: those
    whose search strategy does not hand them over itself, `warms_cost_model`); `report` (see
    `progress_callback`, `measured` per task) starts from the bests already found; the loop is
    profiled and `uninterrupted` as a whole, so that a stop request ends it at the next batch boundary
    (`measure_callbacks`), not in the middle of TVM's C++. The caller ends the measurer's workers."""
    from tvm.s_tir import meta_schedule as ms

    claim_database(db_dir, setup.fingerprint)
    database = ms.database.JSONDatabase(work_dir=str(db_dir))
    if done > 0 and cold_tasks:
        cost_model = warm_start(cost_model, database, setup.target, cold_tasks)
    callbacks = measure_callbacks()
    if report is not None:
        callbacks.append(progress_callback(trials, report, measured))
    watch = watch_load(runner, done)
    if watch is not None:
        callbacks.append(watch.callback())
    run = TuningRun(database, cost_model, callbacks, watch)
    with uninterrupted(), ms.Profiler() as profiler:
        yield run
    run.profile = {k: float(v) for k, v in profiler.get().items()}


def hold_database(db_dir: Path) -> AbstractContextManager[None]:
    """Be the only process writing the database `db_dir` while inside (`hold_directory`)."""
    return hold_directory(db_dir, "a tuning run")


DEVICE_FILE = "device.json"  # in a tuning database: the device its records were measured on


def check_database_device(db_dir: Path, fingerprint: Any) -> None:
    """A database holds one device's measurements, as a dataset does: a run measuring on another
    device (another --runner or --target) is refused before it measures, where it would mix its
    latencies with theirs and resume from them. The device is the one DEVICE_FILE names; a database
    without one (older, or TVM's own) must have its records compiled for this run's target."""
    path = db_dir / DEVICE_FILE
    if path.exists():
        try:
            claimed = json.loads(path.read_text())["device_id"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise MetatuneError(f"{path} does not say which device {db_dir} was measured on ({err}); "
                                "delete it only if every record there was measured on this device") from err
        if claimed != fingerprint.device_id:
            raise MetatuneError(f"{db_dir} holds measurements of {claimed}, and this run measures on "
                                f"{fingerprint.device_id}: give it another --db (records of two devices do not mix)")
        return
    ours = _device_attributes(target_json(fingerprint.tvm_target()))
    for raw in _record_targets(db_dir):
        theirs = _device_attributes(target_json(parse_target(json.loads(raw))))
        if any(ours.get(key) != value for key, value in theirs.items()):
            raise MetatuneError(f"{db_dir} holds records compiled for {theirs}, and this run compiles for {ours} "
                                f"({fingerprint.device_id}): give it another --db (records of two devices do not mix)")


def _device_attributes(target: dict[str, Any]) -> dict[str, Any]:
    """What of a target names its device: kind, CPU (`mcpu`) or GPU (`arch`) and cores, where given (a
    record of plain `llvm`, as TVM's own tuners write, names only its kind: this machine's CPU)."""
    return {key: target[key] for key in ("kind", "mcpu", "arch", "num-cores") if key in target}


def _record_targets(db_dir: Path) -> set[str]:
    """The distinct targets (as JSON text) of the database's records."""
    path = db_dir / RECORD_FILE
    if not path.exists():
        return set()
    lines = (line for line in path.read_text().splitlines() if line.strip())
    return {json.dumps(json.loads(line)[1][2], sort_keys=True) for line in lines}


def claim_database(db_dir: Path, fingerprint: Any) -> None:
    """Name the device in DEVICE_FILE once a run on it is about to measure (not before: a setup that
    fails must not claim an empty database for a device that never measured there)."""
    path = db_dir / DEVICE_FILE
    if not path.exists():
        db_dir.mkdir(parents=True, exist_ok=True)
        claim = {"device_id": fingerprint.device_id, "target": str(fingerprint.tvm_target())}
        write_atomic(path, (json.dumps(claim, indent=1) + "\n").encode())


def repair_database(db_dir: Path) -> list[str]:
    """Cut a torn last line (what a kill during TVM's append leaves, and TVM cannot read past) off the
    database's two files; returns a note saying so, if it did."""
    cut = {name: n for name in (WORKLOAD_FILE, RECORD_FILE)
           if (db_dir / name).exists() and (n := cut_torn_line(db_dir / name))}
    if not cut:
        return []
    files = ", ".join(f"{name} ({n} bytes)" for name, n in cut.items())
    return [f"repaired {db_dir}: cut the torn last line an interrupted write left in {files}"]


class _Noted(Protocol):
    notes: list[str]


P = ParamSpec("P")
R = TypeVar("R", bound=_Noted)


def exclusive_database(tune: Callable[P, R]) -> Callable[P, R]:
    """For a tuning entry point with a `db_dir` argument: hold the database for the whole call (two
    runs on one database would measure every configuration twice; the second gets a one-line error
    naming the first's PID), and repair a torn last line before TVM reads it, noted in the result."""
    signature = inspect.signature(tune)

    @functools.wraps(tune)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        db_dir = Path(signature.bind(*args, **kwargs).arguments["db_dir"])
        with hold_database(db_dir):
            notes = repair_database(db_dir)
            result = tune(*args, **kwargs)
        result.notes[:0] = notes
        return result

    return run


@dataclass
class TuningSetup:
    """What every tuning run needs: the target, how candidates are measured (`runner`: None for the local
    one), and for the `metatune` strategy the resolved checkpoint."""

    target: Any
    fingerprint: Any
    settings: MeasureSettings
    runner: Any
    trained: Any = None
    checkpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    transfer: Any = None  # xgb-transfer's pretrained XGBModel (a TransferredXGB)

    def measurer(self) -> Measurer:
        """TVM's builder and runner, their worker processes started (seconds: each imports TVM), so only
        for a run with trials left to measure; use it as a `with` block, which ends them."""
        return Measurer(self.target, self.settings, runner=self.runner)


def prepare(strategy: str, trials: int, checkpoint: str, runner: str, transfer: Any = None,
            target: str | None = None, db_dir: Path | None = None) -> TuningSetup:
    """Validate the request (`db_dir`: the database must be this device's, `check_database_device`), then
    set up measurement and the strategy's checkpoint or pretrained model. xgb-transfer trains its
    model from this device's dataset unless `transfer` is given (slow: pass one when tuning many
    workloads)."""
    check_strategy(strategy)
    if trials < 1:
        raise MetatuneError("--trials must be >= 1")

    settings = MeasureSettings(verify=False).with_threads_in_force()
    runner_obj, fingerprint = make_runner(runner, settings, target)
    if db_dir is not None:
        check_database_device(db_dir, fingerprint)
    tvm_target = fingerprint.tvm_target()
    import_tensor_intrinsics(tvm_target)
    setup = TuningSetup(tvm_target, fingerprint, settings, runner_obj)
    if strategy in CHECKPOINT_STRATEGIES:
        setup.trained, setup.checkpoint, setup.notes = resolve_checkpoint(checkpoint, fingerprint)
    elif strategy == "xgb-transfer":
        setup.transfer = transfer or TransferredXGB.from_dataset(default_dataset_dir(fingerprint.device_id), tvm_target)
    return setup


def search_threads() -> int:
    """Threads for TVM's side of tuning: EvolutionarySearch's sampling, mutation and
    postprocessors, and XGBModel's training. Every usable core, as metatune's own pool building
    has (`metatune.space.parallel`), so that TVM's tuners and metatune search on the same
    machine: on CUDA, where VerifyGPUCode lowers every candidate, one thread made a batch of 16
    take minutes. TVM hands work to its threads as they come free, so on several threads a seed
    no longer fixes EvolutionarySearch's candidates."""
    return usable_cores()


def resumed_seed(seed: int, done: int) -> int:
    """The seed of a run that continues from `done` trials already in its database: `seed` for a
    fresh run, another one per resume point. Samplers seeded from it draw anew instead of repeating
    the first run's draws: TVM's ReplayTrace (`random`) does not look at the database, so with the
    same seed a resumed run would measure the same configurations again."""
    return seed if done == 0 else (seed * 1_000_003 + done) % (2**31 - 1)


def strategy_parts(strategy: str, setup: TuningSetup, seed: int | None) -> tuple[Any, Any]:
    """Cost model and search strategy of a strategy (TVM's names for its built-in ones); a seed of
    None lets metatune's strategies draw from their TuneContext's `rand_state`."""
    if strategy == "xgb":
        return "xgb", "evolutionary"
    if strategy == "xgb-transfer":
        return setup.transfer.fresh(), "evolutionary"
    if strategy == "random":
        return "random", "replay-trace"

    if strategy == "gradient":
        cost_model = MetaTuneCostModel(setup.trained)
        return cost_model, GradientSearch(cost_model, seed=seed)

    return MetaTuneCostModel(setup.trained), BatchBO(seed=seed, **BATCH_BO_SETTINGS[strategy])


def check_covered(workload: Workload, tvm_target: Any, setup: TuningSetup, strategy: str) -> None:
    """One line, before measuring, where the checkpoint's cost model cannot encode the workload's programs
    (loops its super-graph template has no slot for, e.g. the extent-1 loops of a 1x1x1 dense): every
    prediction would fail inside TVM's search. `tune --model` gives such tasks TVM's default itself."""
    encoder = GraphEncoder(setup.trained.builder.template)
    reason = spaces_uncovered_reason(lambda: DesignSpaces(workload, tvm_target), encoder)
    if reason is not None:
        raise MetatuneError(f"{workload}: the {strategy} strategy's cost model cannot encode its programs ({reason}); "
                            "tune it with --strategy xgb (TVM's default)")


@exclusive_database
def tune_workload(workload: Workload, trials: int, strategy: str, db_dir: Path, checkpoint: str = "auto",
                  runner: str = "local", trials_per_iter: int = 16, seed: int = 0,
                  report: Callable[[int, int, float], None] | None = None,
                  transfer: Any = None, target: str | None = None, verbose: bool = False,
                  check_at: list[int] | None = None) -> TuneResult:
    """Tune `workload` until the database holds `trials` trials of it; verify and report the best.
    `transfer` and `target` (a `--target` text; None: this machine): see `prepare`. MetaSchedule's
    logs go to `<db_dir>/logs`, and to the console too when `verbose`. `check_at`: trial counts
    whose deployed kernel is reported too (a benchmark's budgets), each checked against NumPy."""
    from tvm.s_tir import meta_schedule as ms

    setup = prepare(strategy, trials, checkpoint, runner, transfer, target, db_dir)
    tvm_target = setup.target
    DesignSpaces(workload, tvm_target)  # raises a clear error when no design space covers it
    mod = workload.irmodule()
    measured = measured_latencies(db_dir, mod)
    done = len(measured)
    remaining = trials - done
    if setup.trained is not None and remaining > 0:  # a finished run is only checked and reported
        check_covered(workload, tvm_target, setup, strategy)
    start = time.perf_counter()
    seed = resumed_seed(seed, done)
    cost_model, search = strategy_parts(strategy, setup, seed)
    profile: dict[str, float] = {}
    watch = None
    if remaining > 0:
        cold = [] if warms_cost_model(search) else [(mod, "main")]
        report_best = None if report is None else \
            (lambda n, total, best: report(n, total, workload.flops / best[0] / 1e9 if best else 0.0))
        detach_unnamed_meta_schedule_log_handlers()
        set_meta_schedule_console(verbose)
        with setup.measurer() as measurer, \
                tuning_run(setup, db_dir, cost_model, cold, done, trials, runner, [measured], report_best) as run:
            ms.tune_tir(mod, tvm_target, work_dir=str(db_dir), max_trials_global=remaining,
                        num_trials_per_iter=min(trials_per_iter, remaining), builder=measurer.builder,
                        runner=measurer.runner, database=run.database, cost_model=run.cost_model, strategy=search,
                        measure_callbacks=run.callbacks, seed=seed, num_tuning_cores=search_threads())
        profile, watch, cost_model = run.profile, run.watch, run.cost_model
    wall = time.perf_counter() - start
    # A kernel is checked where it can run: here, or on the RPC device whose instructions this machine lacks.
    check = check_schedule if getattr(setup.runner, "verify_locally", True) else remote_check(parse_rpc_url(runner))
    lines, checked, set_aside = check_deployed(workload, db_dir, mod, tvm_target, check_at or [], check)
    latencies = latencies_of(lines)
    curve, best = [], float("inf")
    for lat in latencies:
        if lat is not None:
            best = min(best, lat)
        curve.append(round(workload.flops / best / 1e9, 3) if best < float("inf") else 0.0)
    deployed = best_so_far(lines, [len(lines)])  # the kernel checked above, by TVM's rule
    deployed_s = deployed[0].latency_s if deployed else None
    result = TuneResult(
        workload=str(workload), strategy=strategy, trials=len(latencies),
        best_latency_us=round(deployed_s * 1e6, 3) if deployed_s else None,
        best_gflops=round(workload.flops / deployed_s / 1e9, 3) if deployed_s else None, curve=curve,
        wall_s=round(wall, 2),
        search_s=round(search_seconds(profile), 2), measure_s=round(measure_seconds(profile), 2),
        failures=sum(lat is None for lat in latencies), checkpoint=setup.checkpoint, notes=setup.notes,
        timed_trials=len(latencies) - done,
    )
    result.notes += set_aside
    result.update_s = round(profile.get("MeasureCallback/UpdateCostModel", 0.0), 2)
    result.exhausted = remaining > 0 and len(latencies) < trials
    if watch is not None and (note := watch.note()):
        result.disturbed = [b.to_json() for b in watch.disturbed]
        result.notes.append(note)
    if remaining > 0 and not isinstance(search, str):
        result.search_stats = search.total_stats().to_json()
        if failed := result.search_stats.get("prior_failures"):
            result.notes.append(f"the cost model failed to score candidates {failed} times (each logged as a "
                                "warning): BatchBO ranked them last (all of a call's, a flat prior, where it "
                                "failed on every one tried)")
        if fell_back := result.search_stats.get("fallbacks"):
            result.notes.append(f"BatchBO's GP step failed {fell_back} times (each logged as a warning): those "
                                "batches were the cost model's top picks")
    if not isinstance(cost_model, str):  # TVM's XGBModel has no encoding step of its own
        result.encode_s = round(getattr(cost_model, "encode_seconds", 0.0), 2)
    if result.best_latency_us is not None:  # the deployed kernel (TVM's `compile_tir` takes it) was checked above
        result.max_rel_error = checked[str(len(lines))]
        result.verified = True
        result.checked_at = {budget: error for budget, error in checked.items() if int(budget) in (check_at or [])}
    return result


class WrongKernelError(WrongResultError):
    """The kernel of one trial (`trial`: an index into `trial_lines`) disagrees with NumPy."""

    def __init__(self, trial: int, error: WrongResultError) -> None:
        super().__init__(str(error))
        self.trial = trial


def set_aside_broken_timings(db_dir: Path, mod: Any, task: str = "") -> list[str]:
    """Record the task's trials timed at zero, a negative time or NaN as failed: TVM would deploy such a
    trial first (the lowest mean). Returns the note that names them, if any."""
    broken = [i for i, (_, record) in enumerate(trial_lines(db_dir, mod)) if broken_timing(record[1])]
    for trial in broken:
        mark_failed(db_dir, mod, trial)
    where = f"task {task}: " if task else ""
    if not broken:
        return []
    return [f"{where}trial(s) {', '.join(str(i + 1) for i in broken)}: {BROKEN_TIMING}; recorded as failed"]


Check = Callable[[Workload, Any, Any], float]  # compiles, runs and compares one schedule: check_schedule's form


def check_deployed(workload: Workload, db_dir: Path, mod: Any, target: Any, budgets: list[int],
                   check: Check = check_schedule) -> tuple[list[tuple[Any, Any]], dict[str, float], list[str]]:
    """`check_best_so_far` after each of `budgets` and after the last trial. Tuning does not check
    each candidate, so a deployed kernel may compute wrong results (some winograd schedules do): it
    is recorded as a failed trial (`mark_failed`), the next best takes its place here and wherever
    the database is used, and a note names it. Returns the trial lines as they are then, the errors
    by budget and the notes."""
    notes = set_aside_broken_timings(db_dir, mod)
    errors: dict[int, float] = {}  # by trial, kept across the rounds: setting one aside leaves the rest checked
    while True:
        lines = trial_lines(db_dir, mod)
        try:
            checked = check_best_so_far(workload, lines, sorted({*budgets, len(lines)}), target, errors, check)
            return lines, checked, notes
        except WrongKernelError as wrong:
            mark_failed(db_dir, mod, wrong.trial)
            notes.append(f"trial {wrong.trial + 1}'s kernel computes wrong results ({wrong}): recorded as failed, "
                         "the next best deployed")


def check_best_so_far(workload: Workload, lines: list[tuple[Any, Any]], budgets: list[int], target: Any,
                      errors: dict[int, float] | None = None,
                      check: Check = check_schedule) -> dict[str, float]:
    """Max relative error against NumPy of the kernel a run would deploy after each budget (raises
    WrongKernelError); a kernel best at several budgets is compiled and checked once (`errors`:
    those checked already, by trial, filled in). `check` compiles, runs and compares one schedule."""
    from tvm.s_tir import Schedule

    errors = {} if errors is None else errors
    out: dict[str, float] = {}  # by budget
    for best in best_so_far(lines, budgets):
        if best.trial not in errors:
            record = record_of(lines[best.trial])
            sch = Schedule(record.workload.mod)
            record.trace.apply_to_schedule(sch, remove_postproc=False)
            try:
                errors[best.trial] = check(workload, sch, target)
            except WrongResultError as err:
                raise WrongKernelError(best.trial, err) from err
        out[str(best.budget)] = errors[best.trial]
    return out


def warms_cost_model(search: Any) -> bool:
    """Whether the search strategy itself hands a resumed run's records to the cost model (BatchBO,
    which scores them first); otherwise `warm_start` must, before tuning."""
    return bool(getattr(search, "warms_cost_model", False))


def warm_start(cost_model: Any, database: Any, target: Any, tasks: list[tuple[Any, str]]) -> Any:
    """A resumed run's cost model, updated with the database's measurements of each task
    (`(IRModule, task name)`; the name routes the update as in tuning).

    MetaSchedule's search strategies read the database when a run resumes, its cost models do
    not: without this, a resumed run would search with a model that has forgotten every trial
    before the restart, unlike the same run uninterrupted. Returns the cost model to tune with
    (TVM's "xgb" becomes the XGBModel that `tune_tir` would have created).
    """
    from tvm.s_tir import meta_schedule as ms

    if cost_model == "random":
        return cost_model
    import_tensor_intrinsics(target)  # a TuneContext imports them, 20-100 s the slow way
    if isinstance(cost_model, str):
        cost_model = ms.cost_model.CostModel.create(cost_model, num_tuning_cores=search_threads(),
                                                    tree_method="auto")
    for mod, task_name in tasks:
        records = records_in_trial_order(database, mod)  # the model keeps the most recent when it must choose
        if records:
            context = ms.TuneContext(mod=mod, target=target, task_name=task_name, num_threads=search_threads())
            cost_model.update(context, [rec.as_measure_candidate() for rec in records], earlier_results(records))
    return cost_model


MEASURE_SCOPES = ("SendToBuilder", "SendToRunner", "JoinRunnerFutures")


def measure_seconds(profile: dict[str, float]) -> float:
    """Building and running candidates (MetaSchedule's task-scheduler scopes)."""
    return sum(profile.get(k, 0.0) for k in MEASURE_SCOPES)


def search_seconds(profile: dict[str, float]) -> float:
    """Everything that is not measuring or a measure callback: the search strategy's own time,
    computed the same way for every strategy so the numbers compare."""
    callbacks = sum(v for k, v in profile.items() if k.startswith("MeasureCallback/"))
    return max(0.0, profile.get("Total", 0.0) - measure_seconds(profile) - callbacks)
