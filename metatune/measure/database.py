"""A MetaSchedule JSON database read in measurement order.

`JSONDatabase` appends one line per trial, so its files keep the order in which trials were
measured, but its getters (`get_all_tuning_records`, `get_top_k`) return records sorted by
latency. Whatever depends on that order (learning from the most recent trials, a run's curve,
re-timing trial N) reads the files here instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metatune import MetatuneError
from metatune.fileio import RECORD_FILE, WORKLOAD_FILE, write_atomic
from metatune.measure.measurer import median_latency, successful_run_seconds

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.database import Database, TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerResult


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number from 0, parsed line) of a JSON-lines database file; a line that is not JSON is an
    error naming the file and line (a database edited or damaged by hand), not a bare JSONDecodeError."""
    for number, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise MetatuneError(f"{path}:{number + 1} is not a JSON line of a MetaSchedule database "
                                    f"({error.msg}); move the damaged database away to start that run afresh") from None


def _lines_of(workload_path: Path, record_path: Path, mod: Any) -> list[tuple[Any, Any]]:
    from tvm.s_tir.meta_schedule.database import Workload as TVMWorkload

    if not workload_path.exists() or not record_path.exists():
        return []
    target_hash = str(TVMWorkload(mod).as_json()[0])
    workloads = dict(json_lines(workload_path))
    out = []
    for _, (index, record) in json_lines(record_path):
        if index in workloads and workloads[index][0] == target_hash:
            out.append((workloads[index], record))
    return out


FAILED_RUN_SECS = [1e10]  # how MetaSchedule's AddToDatabase records a run that failed


def mark_failed(db_dir: Path, mod: Any, trial: int) -> None:
    """Record trial `trial` of `mod` (an index into `trial_lines`) as failed, as MetaSchedule records
    a failed run: for a kernel that ran but computes wrong results, which no budget may deploy."""
    from tvm.s_tir.meta_schedule.database import Workload as TVMWorkload

    path = db_dir / RECORD_FILE
    target_hash = str(TVMWorkload(mod).as_json()[0])
    ours = {index for index, workload in json_lines(db_dir / WORKLOAD_FILE) if workload[0] == target_hash}
    lines = path.read_text().splitlines(keepends=True)
    numbers = [n for n, (index, _) in json_lines(path) if index in ours]
    if not 0 <= trial < len(numbers):
        raise MetatuneError(f"{path} holds {len(numbers)} trials of this workload, not a trial {trial + 1}")
    index, record = json.loads(lines[numbers[trial]])
    record[1] = FAILED_RUN_SECS
    lines[numbers[trial]] = json.dumps([index, record]) + "\n"
    write_atomic(path, "".join(lines).encode())


def trial_lines(db_dir: Path, mod: Any) -> list[tuple[Any, Any]]:
    """(workload JSON, tuning-record JSON) of every trial of `mod` in the database directory, in
    measurement order."""
    return _lines_of(db_dir / WORKLOAD_FILE, db_dir / RECORD_FILE, mod)


def record_of(line: tuple[Any, Any]) -> "TuningRecord":
    """One of `trial_lines`' (workload JSON, tuning-record JSON) pairs as a TVM TuningRecord."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    workload_json, record_json = line
    return TuningRecord.from_json(record_json, Workload.from_json(workload_json))


def records_in_trial_order(database: "Database", mod: Any) -> list["TuningRecord"]:
    """`mod`'s tuning records in `database`, in measurement order for a JSONDatabase (read from its
    files); any other database has no such order and gives its getter's."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    if not database.has_workload(mod):
        return []
    workload = database.commit_workload(mod)  # existing: returns the stored workload
    if not hasattr(database, "path_tuning_record"):
        return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]
    lines = _lines_of(Path(database.path_workload), Path(database.path_tuning_record), mod)
    return [TuningRecord.from_json(record, workload) for _, record in lines]


def earlier_results(records: list["TuningRecord"]) -> list["RunnerResult"]:
    """The runner's results of earlier trials, for a model that learns from a resumed run's records:
    a failed trial (no times, or MetaSchedule's failure marker) as an error, like a live failure."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    out = []
    for rec in records:
        secs = successful_run_seconds(rec.run_secs)
        out.append(RunnerResult(run_secs=secs, error_msg=None) if secs is not None
                   else RunnerResult(run_secs=None, error_msg="failed in an earlier run"))
    return out


@dataclass(frozen=True)
class BestSoFar:
    """The kernel a run stopped after `budget` trials would deploy: the trial TVM's database returns
    first (lowest mean of its timed repeats, the earliest of equals), which `compile_tir` and a
    model's build use; `latency_s` is its median repeat (a time that was measured), as in the
    tuning curves."""

    budget: int
    trial: int  # index into the run's trial lines
    latency_s: float


def best_so_far(lines: list[tuple[Any, Any]], budgets: list[int]) -> list[BestSoFar]:
    """The deployed trial after each budget a run's `trial_lines` reached (none before its first success).
    By TVM's rule, not the curves' best median: the two differ at about one budget in eight, on near-ties
    (docs/BENCHMARKS.md, "The kernel TVM deploys")."""
    wanted, out, best_mean, best_at, latency = set(budgets), [], float("inf"), -1, 0.0
    for i, (_, record) in enumerate(lines):
        secs = successful_run_seconds(record[1])
        if secs and (mean := sum(secs) / len(secs)) < best_mean:
            best_mean, best_at, latency = mean, i, median_latency(secs, high=True)
        if i + 1 in wanted and best_at >= 0:
            out.append(BestSoFar(i + 1, best_at, latency))
    return out
