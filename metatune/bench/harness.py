"""Run every strategy on every workload of a suite, side by side, resumably.

Layout of the output directory (everything is re-derivable from `runs/`):
  runs/<workload>/<strategy>-r<repeat>/      the MetaSchedule JSON database of one tuning run
  runs/<workload>/<strategy>-r<repeat>.json  its `TuneResult` (+ bench fields)
  references.json                            PyTorch eager per workload, fp32 peak, every pass of each
  failures.json                              runs that raised, until they succeed (`failures`)
  bench.json                                 the budgets asked for (tables rebuilt later use them)
  results.csv, table.md, curves.png          written by `report` after every run

Order: repeat → workload → strategies, the strategy order rotated per workload, so that drift
in the machine's speed hits every strategy alike. A run that already reached the largest budget
is skipped; a shorter one continues from its database (and is marked `resumed`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from metatune import MAX_TRIALS, MetatuneError
from metatune.bench.failures import FAILURES_FILE, RunFailure, clear_failure, record_failure
from metatune.bench.references import changes, fp32_peak, torch_reference, warning
from metatune.bench.suites import BenchWorkload, load_suite
from metatune.cost_model.xgb_transfer import TransferredXGB, default_dataset_dir, training_stores
from metatune.env.device import fingerprint_for_target, require_runnable, usable_cores
from metatune.env.tvm_setup import import_tensor_intrinsics, use_threads
from metatune.fileio import write_atomic
from metatune.learn.named_checkpoint import open_checkpoint
from metatune.measure.check import device_type
from metatune.measure.reference_timing import MAX_PASSES, check_max_passes
from metatune.measure.runners import RPC_URL_FORM, RunnerSpecError, parse_rpc_url, probe_tracker
from metatune.tune.strategies import CHECKPOINT_STRATEGIES, STRATEGIES
from metatune.tune.tuner import check_database_device, measured_latencies, resolve_checkpoint, tune_workload

REFERENCES_FILE = "references.json"
SETTINGS_FILE = "bench.json"  # the budgets the last tuning bench in the folder asked for
SUITE_STRATEGIES = ("metatune", "xgb", "xgb-transfer", "random")  # `bench`'s default, less what cannot run here
TIMED_FIELDS = ("wall_s", "search_s", "measure_s", "encode_s", "update_s")


@dataclass
class BenchConfig:
    suite: str
    budgets: list[int]
    strategies: list[str]
    repeats: int = 1
    out: Path = Path("runs/bench")
    checkpoint: str = "auto"
    runner: str = "local"
    trials_per_iter: int = 16
    references: bool = True
    target: str | None = None  # a --target text; None: this machine
    reference_passes: int = MAX_PASSES  # the most passes each reference is timed in

    def __post_init__(self) -> None:
        if not self.budgets or any(b < 1 for b in self.budgets):
            raise MetatuneError(f"--budgets must be positive trial counts, got {self.budgets}")
        if max(self.budgets) > MAX_TRIALS:
            raise MetatuneError(f"--budgets {max(self.budgets)} is more than {MAX_TRIALS}")
        self.budgets = sorted(set(self.budgets))
        check_strategies(self.strategies)
        if self.repeats < 1:
            raise MetatuneError("--repeats must be >= 1")
        check_max_passes(self.reference_passes)

    @property
    def max_trials(self) -> int:
        return self.budgets[-1]


def split_strategy(spec: str) -> tuple[str, str | None]:
    """`metatune@x86_64-sapphirerapids-2c/v5` is the metatune strategy with that checkpoint (a zoo id
    or a path), so that one bench sets checkpoints side by side; a bare name uses --checkpoint."""
    name, sep, checkpoint = spec.partition("@")
    return name, (checkpoint if sep else None)


def file_name(strategy: str) -> str:
    """A strategy spec as one path component (a checkpoint's zoo id or path holds slashes)."""
    return strategy.replace("/", "_")


def check_strategies(strategies: list[str]) -> None:
    """Known strategy names, a checkpoint only where a strategy takes one, none twice."""
    unknown = [s for s in strategies if split_strategy(s)[0] not in STRATEGIES]
    if unknown or not strategies:
        raise MetatuneError(f"unknown strategy {', '.join(unknown) or '(none)'}; choose from {', '.join(STRATEGIES)}")
    for spec in strategies:
        name, checkpoint = split_strategy(spec)
        if checkpoint is not None and (name not in CHECKPOINT_STRATEGIES or not checkpoint):
            raise MetatuneError(f"strategy {spec}: only {', '.join(CHECKPOINT_STRATEGIES)} take a checkpoint "
                                "(STRATEGY@ZOO_ID or STRATEGY@PATH)")
    if len(set(strategies)) < len(strategies):
        raise MetatuneError(f"--strategies names a strategy twice: {', '.join(strategies)}")


def transfer_dataset(target: str | None) -> Path:
    """The dataset xgb-transfer pretrains on: that of the device tuned for (`--target`, this machine by
    default), as `metatune tune` finds it."""
    return default_dataset_dir(fingerprint_for_target(target).device_id)


def check_transfer_dataset(target: str | None) -> None:
    """A one-line error where xgb-transfer has no dataset to pretrain on."""
    training_stores(transfer_dataset(target))


def default_strategies(target: str | None, echo: Callable[[str], None]) -> list[str]:
    """SUITE_STRATEGIES, with xgb-transfer left out (and said so) where the device has no dataset to
    pretrain it on: a bench on a new machine runs rather than stopping at its first xgb-transfer run."""
    dataset = transfer_dataset(target)  # a bad --target fails here, as itself
    try:
        training_stores(dataset)
    except MetatuneError as missing:
        echo(f"note: xgb-transfer left out of the default strategies: {missing}")
        return [s for s in SUITE_STRATEGIES if s != "xgb-transfer"]
    return list(SUITE_STRATEGIES)


@dataclass(frozen=True)
class RunKey:
    workload: str
    strategy: str
    repeat: int

    def db_dir(self, out: Path) -> Path:
        return out / "runs" / self.workload / f"{file_name(self.strategy)}-r{self.repeat}"

    def result_path(self, out: Path) -> Path:
        return out / "runs" / self.workload / f"{file_name(self.strategy)}-r{self.repeat}.json"


def plan(suite: list[BenchWorkload], strategies: list[str], repeats: int) -> list[tuple[BenchWorkload, RunKey]]:
    """Every (workload, strategy, repeat), interleaved: the strategy order rotates per workload."""
    order = []
    for repeat in range(repeats):
        for i, bench_workload in enumerate(suite):
            shift = (i + repeat) % len(strategies)
            for strategy in strategies[shift:] + strategies[:shift]:
                order.append((bench_workload, RunKey(bench_workload.name, strategy, repeat)))
    return order


def recorded_budgets(out: Path) -> list[int] | None:
    """The budgets the last bench that tuned into `out` asked for (None: none recorded)."""
    settings = read_result(out / SETTINGS_FILE)
    return None if settings is None else [int(b) for b in settings["budgets"]]


def read_result(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def write_json(path: Path, data: Any) -> None:
    """Replace a result file atomically: an interrupted bench must not leave a torn one to resume from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


@dataclass
class BenchProgress:
    """Trials done over the whole bench, for one progress bar."""

    total: int
    done: int = 0
    status: str = ""
    listeners: list[Callable[["BenchProgress"], None]] = field(default_factory=list)

    def set(self, done: int, status: str) -> None:
        self.done, self.status = done, status
        for listener in self.listeners:
            listener(self)


def run_bench(config: BenchConfig, progress: BenchProgress | None = None,
              echo: Callable[[str], None] = print, after_run: Callable[[], None] | None = None) -> list[RunFailure]:
    """Execute the plan; results land in `config.out` as they are produced. A run that raises is
    recorded in `failures.json` and the plan goes on; returns the runs that failed this time."""

    suite = load_suite(config.suite)
    runs = plan(suite, config.strategies, config.repeats)
    check_request(config)
    threads = _tvm_threads()
    device = reference_device(config.target)
    references = _load_references(config.out)
    if config.references:
        check_reference_device(references, device, config.out)
    write_json(config.out / SETTINGS_FILE, {"budgets": config.budgets})  # once nothing more refuses the bench
    if config.references and "fp32_peak_gflops" not in references:
        _measure_peak(threads, references, echo, device, config.reference_passes)
        write_json(config.out / REFERENCES_FILE, references)
    transfer = None
    earlier_results = {key: read_result(key.result_path(config.out)) for _, key in runs}
    # an exhausted run (its search space ran out) counts as done: there is nothing new to measure
    done_trials = {key: 0 if r is None else config.max_trials if r.get("exhausted") else int(r["trials"])
                   for key, r in earlier_results.items()}
    progress = progress or BenchProgress(total=len(runs) * config.max_trials)
    offset = sum(min(t, config.max_trials) for t in done_trials.values())
    progress.set(offset, "")
    failed: list[RunFailure] = []
    for bench_workload, key in runs:
        if done_trials[key] >= config.max_trials:
            continue
        if key.strategy == "xgb-transfer" and transfer is None:
            transfer = _transfer_model(echo, config.target)
        previous = done_trials[key]

        def report(n: int, total: int, best: float, key: RunKey = key, base: int = offset - previous) -> None:
            found = f" best {best:.1f} GFLOPS" if best else ""  # none yet: the run's start
            progress.set(base + n, f"{key.workload} [{key.strategy}]{found}")

        started = time.time()
        strategy, checkpoint = split_strategy(key.strategy)
        try:
            result = tune_workload(bench_workload.workload, config.max_trials, strategy, key.db_dir(config.out),
                                   checkpoint=checkpoint or config.checkpoint, runner=config.runner,
                                   trials_per_iter=config.trials_per_iter, seed=key.repeat, report=report,
                                   transfer=transfer, target=config.target, check_at=config.budgets).to_json()
        except Exception as error:  # one run's failure must not end the others (Ctrl-C is no Exception)
            failure = RunFailure.of(error, key.workload, key.strategy, key.repeat,
                                    _trials_in(key.db_dir(config.out), bench_workload), config.max_trials)
            record_failure(config.out, failure)
            echo(f"warning: {failure.label} failed {failure.progress}: {failure.error} "
                 f"(traceback in {config.out / FAILURES_FILE}); the bench goes on")
            failed.append(failure)
            offset += config.max_trials - previous
            progress.set(offset, f"{key.workload} [{key.strategy}] failed")
            if after_run is not None:
                after_run()
            continue
        clear_failure(config.out, key.workload, key.strategy, key.repeat)
        # a segment killed before writing its result leaves records but no result file: the database tells
        resumed = previous > 0 or result["timed_trials"] < result["trials"]
        result.update(name=key.workload, strategy=key.strategy, repeat=key.repeat, resumed=resumed,
                      trials_per_iter=config.trials_per_iter,
                      started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)))
        result = merge_segments(earlier_results[key], result)
        write_json(key.result_path(config.out), result)
        offset += config.max_trials - previous
        progress.set(offset, f"{key.workload} [{key.strategy}] {result['best_gflops']} GFLOPS")
        if config.references and bench_workload.name not in references.get("torch", {}):
            _measure_reference(bench_workload, threads, references, echo, device, config.reference_passes)
            write_json(config.out / REFERENCES_FILE, references)
        if after_run is not None:
            after_run()
    if config.references:  # workloads whose runs were all done before (a bench first run --no-references)
        for bench_workload in suite:
            if bench_workload.name not in references.get("torch", {}):
                _measure_reference(bench_workload, threads, references, echo, device, config.reference_passes)
                write_json(config.out / REFERENCES_FILE, references)
    return failed


def check_same_workloads(config: BenchConfig) -> None:
    """Refuse an --out whose runs or references of a workload name are of another workload (another suite
    with the same name for a different shape): resuming would take them for this suite's."""
    suite = load_suite(config.suite)
    references = _load_references(config.out).get("torch", {})
    for bench_workload, key in plan(suite, config.strategies, config.repeats):
        earlier = read_result(key.result_path(config.out))
        for what, text in (("a run", (earlier or {}).get("workload")),
                           ("a PyTorch reference", references.get(key.workload, {}).get("workload"))):
            if text is not None and text != str(bench_workload.workload):
                raise MetatuneError(f"{config.out} holds {what} named {key.workload} of {text}, but this suite's "
                                    f"{key.workload} is {bench_workload.workload}: use another --out")


def check_request(config: BenchConfig) -> None:
    """Fail at once, as one line, on what would fail every run alike (a target this machine cannot
    tune for, a checkpoint that does not load, a malformed runner, xgb-transfer without a dataset,
    databases in --out measured on another device),
    before anything is measured:
    from then on an error is one run's failure, recorded while the others go on."""
    local = config.runner == "local"
    check_same_workloads(config)
    fingerprint = fingerprint_for_target(config.target) if local else None
    if fingerprint is not None:
        require_runnable(fingerprint)
        for _, key in plan(load_suite(config.suite), config.strategies, config.repeats):
            if (db := key.db_dir(config.out)).exists():  # an --out tuned elsewhere: one line, not a failure per run
                check_database_device(db, fingerprint)
    elif not config.runner.startswith("rpc:"):
        raise RunnerSpecError(f"unknown runner {config.runner!r}: expected 'local' or {RPC_URL_FORM}")
    else:
        parse_rpc_url(config.runner)  # the servers' device is known once they answer, run by run
        if config.references:
            raise MetatuneError("the references (PyTorch eager, the fp32 peak) would be timed on this machine and "
                                "the kernels on the RPC servers: pass --no-references with an RPC runner")
    if any(split_strategy(s)[0] == "xgb-transfer" for s in config.strategies):
        if not local and config.target is None:
            raise MetatuneError("xgb-transfer pretrains on the dataset of the device the bench tunes for, which with "
                                "an RPC runner is the servers': pass their --target (`metatune rpc status` shows it)")
        check_transfer_dataset(config.target)
    checkpoints = {checkpoint or config.checkpoint for name, checkpoint in map(split_strategy, config.strategies)
                   if name in CHECKPOINT_STRATEGIES}
    resolved: dict[str, str] = {}  # what each checkpoint spec names now (a zoo id with its version)
    for checkpoint in sorted(checkpoints):
        if fingerprint is not None:  # also whether it encodes this device's programs (its template)
            resolved[checkpoint] = resolve_checkpoint(checkpoint, fingerprint)[1]
        elif checkpoint != "auto":
            resolved[checkpoint] = open_checkpoint(checkpoint).id
    check_resumed_settings(config, resolved)
    if not local:  # last: every other mistake is told without waiting on the network
        probe_tracker(parse_rpc_url(config.runner).tracker)


def check_resumed_settings(config: BenchConfig, resolved: dict[str, str]) -> None:
    """Refuse to continue a run with other settings than its earlier segments': its curve would be
    half one search and half another. `resolved` maps checkpoint specs to the checkpoint they name now
    (`auto` over RPC is known only once the servers answer, and is not checked)."""
    for _, key in plan(load_suite(config.suite), config.strategies, config.repeats):
        earlier = read_result(key.result_path(config.out))
        if earlier is None or earlier.get("exhausted") or int(earlier["trials"]) >= config.max_trials:
            continue  # nothing more will be measured for it
        name, checkpoint = split_strategy(key.strategy)
        spec = checkpoint or config.checkpoint
        check_continuation(f"{key.workload} [{key.strategy}] r{key.repeat} in {config.out}", earlier,
                           config.trials_per_iter, spec, resolved.get(spec) if name in CHECKPOINT_STRATEGIES else None,
                           from_strategy=checkpoint is not None)


def check_continuation(run: str, earlier: dict[str, Any], trials_per_iter: int, spec: str, now: str | None,
                       from_strategy: bool) -> None:
    """One run's next segment must search as its earlier ones did: the same --trials-per-iter and the same
    checkpoint (`now`: what the checkpoint `spec` resolves to today, None where not checked). Results
    written before checkpoints were recorded as resolved hold the spec itself, which is accepted."""
    before = earlier.get("trials_per_iter")
    if before is not None and before != trials_per_iter:
        raise MetatuneError(f"{run} was tuned with --trials-per-iter {before}, not {trials_per_iter}: pass "
                            f"{before} to continue it, or use another --out")
    recorded = earlier.get("checkpoint")
    if now is None or recorded in (None, now, spec):
        return
    how = (f"its strategy names checkpoint {spec}, which now is {now}: a run continues with the model it started "
           "with, so use another --out" if from_strategy else f"pass --checkpoint {recorded} to continue it, or "
           "use another --out")
    raise MetatuneError(f"{run} was tuned with checkpoint {recorded}, and would continue with {now}; {how}")


def _trials_in(db_dir: Path, bench_workload: BenchWorkload) -> int | None:
    """Trials of the workload in a run's database (its records survive the run's failure); None
    where the database itself is what failed to read."""
    try:
        return len(measured_latencies(db_dir, bench_workload.workload.irmodule()))
    except MetatuneError:
        return None


def remeasure_references(config: BenchConfig, echo: Callable[[str], None] = print) -> str:
    """Measure every reference of the suite again (the fp32 peak, then PyTorch eager per workload),
    replacing those in references.json and leaving the tuning runs alone; returns the markdown
    table of what changed."""
    suite = load_suite(config.suite)
    check_same_workloads(config)
    old = _load_references(config.out)
    device = reference_device(config.target)
    check_reference_device(old, device, config.out)
    threads = _tvm_threads()
    references: dict[str, Any] = {"torch": {}}
    _measure_peak(threads, references, echo, device, config.reference_passes)
    for bench_workload in suite:
        write_json(config.out / REFERENCES_FILE, _measured_so_far(old, references))  # a stop keeps what was measured
        echo(f"measuring PyTorch eager on {bench_workload.name}")
        _measure_reference(bench_workload, threads, references, echo, device, config.reference_passes)
    write_json(config.out / REFERENCES_FILE, _measured_so_far(old, references))  # other workloads' stay
    return changes(old, references)


def _measured_so_far(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The old references with those measured again so far replaced."""
    return {**old, **new, "torch": {**old.get("torch", {}), **new["torch"]}}


@dataclass(frozen=True)
class ReferenceDevice:
    """Where PyTorch's references run: `kind` cuda (cuDNN/cuBLAS) for a CUDA target, else cpu; and which
    device that is (`device_id`: the CPU's class and cores, or the GPU)."""

    kind: str
    device_id: str


def check_reference_device(references: dict[str, Any], device: ReferenceDevice, out: Path) -> None:
    """One device's references per bench folder: cuDNN and CPU PyTorch numbers side by side, or another
    machine's, would be compared with kernels of only one of them. (References written before they named
    their device_id are checked by kind only.)"""
    if not references:
        return
    if (measured_on := references.get("device", "cpu")) != device.kind:
        raise MetatuneError(f"the references in {out} were measured on {measured_on}, these would be measured "
                            f"on {device.kind}: pass the --target the bench was tuned for")
    if references.get("device_id", device.device_id) != device.device_id:
        raise MetatuneError(f"the references in {out} were measured on {references['device_id']}, this is "
                            f"{device.device_id}: the kernels tuned here would be compared with another machine's "
                            "PyTorch; use another --out")


def reference_device(target: str | None) -> ReferenceDevice:
    fingerprint = fingerprint_for_target(target)
    return ReferenceDevice(device_type(fingerprint.tvm_target()), fingerprint.device_id)


def _measure_peak(threads: int, references: dict[str, Any], echo: Callable[[str], None], device: ReferenceDevice,
                  max_passes: int) -> None:
    echo(f"measuring the fp32 peak ({device.kind}, {threads} threads, matmul)")
    references.update(fp32_peak(threads, device=device.kind, max_passes=max_passes), threads=threads,
                      device_id=device.device_id)
    if device.kind != "cpu":
        references["device"] = device.kind
    if line := warning("the fp32 peak", references["fp32_peak"]):
        echo(line)


def _measure_reference(bench_workload: BenchWorkload, threads: int, references: dict[str, Any],
                       echo: Callable[[str], None], device: ReferenceDevice, max_passes: int) -> None:
    entry = torch_reference(bench_workload.workload, threads, device=device.kind, max_passes=max_passes)
    if line := warning(f"PyTorch eager on {bench_workload.name}", entry):
        echo(line)
    references.setdefault("torch", {})[bench_workload.name] = entry


def merge_segments(earlier: dict[str, Any] | None, latest: dict[str, Any]) -> dict[str, Any]:
    """The result of a run resumed from `earlier`: `latest` with the earlier segments' times added,
    so that times per trial stay right, and the earlier segments' disturbed batches kept. A segment
    killed before it wrote its result lost its times: its trials count in `trials` and the curve, but
    not in `timed_trials`. The run keeps its first segment's start time."""
    if earlier is None:
        return latest
    merged = dict(latest)
    if "started" in earlier:
        merged["started"] = earlier["started"]
    for name in TIMED_FIELDS:
        merged[name] = round(float(earlier.get(name, 0.0)) + float(latest[name]), 2)
    merged["timed_trials"] = int(earlier.get("timed_trials", earlier["trials"])) + int(latest["timed_trials"])
    merged["disturbed"] = [*earlier.get("disturbed", []), *latest.get("disturbed", [])]
    return merged


def _load_references(out: Path) -> dict[str, Any]:
    return read_result(out / REFERENCES_FILE) or {}


def _tvm_threads() -> int:
    """The thread count TVM's kernels run with, so PyTorch gets the same."""

    return use_threads(usable_cores())


def _transfer_model(echo: Callable[[str], None], target: str | None) -> Any:
    """xgb-transfer's pretrained XGBModel, trained once per bench on the dataset of the device the
    bench tunes for (`--target`; this machine by default), as `metatune tune` would train it."""

    tvm_target = fingerprint_for_target(target).tvm_target()
    import_tensor_intrinsics(tvm_target)
    return TransferredXGB.from_dataset(transfer_dataset(target), tvm_target, echo=echo)
