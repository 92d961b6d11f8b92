"""Runs of a bench that raised instead of finishing, kept in `<out>/failures.json`.

Why: a bench tunes dozens of (workload, strategy) runs for hours; one run that TVM cannot finish (a
search strategy that raises inside C++, a damaged database) must not take the rest
down with it, nor be forgotten. The failed run's database stays as it is, so a later `bench` with the
same arguments retries it from there; the entry is dropped once it succeeds. The table names every
failed run, and the command exits non-zero while any is left.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metatune.fileio import write_atomic

FAILURES_FILE = "failures.json"
_SUMMARY_CHARS = 300


@dataclass(frozen=True)
class RunFailure:
    """One failed run: which, after how many trials of its budget, and the error."""

    workload: str
    strategy: str
    repeat: int
    trials: int | None  # trials in the run's database when it failed (None: the database could not be read)
    budget: int  # trials it was to reach
    error: str  # exception type and the first line of its message
    at: str  # local time of the failure
    traceback: str  # the whole Python traceback, for a bug report

    @property
    def label(self) -> str:
        return f"{self.workload} [{self.strategy}] r{self.repeat}"

    @property
    def progress(self) -> str:
        done = "?" if self.trials is None else str(self.trials)
        return f"at {done} of {self.budget} trials"

    @classmethod
    def of(cls, error: BaseException, workload: str, strategy: str, repeat: int, trials: int | None,
           budget: int) -> "RunFailure":
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        message = lines[0] if lines else ""
        summary = f"{type(error).__name__}: {message}" if message else type(error).__name__
        if len(summary) > _SUMMARY_CHARS:
            summary = summary[: _SUMMARY_CHARS - 1] + "…"
        return cls(workload, strategy, repeat, trials, budget, summary, time.strftime("%Y-%m-%dT%H:%M:%S"),
                   "".join(traceback.format_exception(error)))


def _key(workload: str, strategy: str, repeat: int) -> str:
    return f"{workload}/{strategy}/r{repeat}"


def read_failures(out: Path) -> dict[str, RunFailure]:
    path = out / FAILURES_FILE
    if not path.exists():
        return {}
    return {key: RunFailure(**entry) for key, entry in json.loads(path.read_text()).items()}


def _write(out: Path, failures: dict[str, RunFailure]) -> None:
    path = out / FAILURES_FILE
    if not failures:
        path.unlink(missing_ok=True)
        return
    data: dict[str, Any] = {key: asdict(f) for key, f in sorted(failures.items())}
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def record_failure(out: Path, failure: RunFailure) -> None:
    failures = read_failures(out)
    failures[_key(failure.workload, failure.strategy, failure.repeat)] = failure
    _write(out, failures)


def clear_failure(out: Path, workload: str, strategy: str, repeat: int) -> None:
    """The run finished: an earlier failure of it no longer stands."""
    failures = read_failures(out)
    if failures.pop(_key(workload, strategy, repeat), None) is not None:
        _write(out, failures)


def failed_note(out: Path) -> str:
    """The failed runs, for the bench table ("" when none failed)."""
    failures = read_failures(out)
    if not failures:
        return ""
    items = [f"{f.label} {f.progress}: {f.error}" for f in failures.values()]
    return (f"**Failed**: these runs raised before reaching their budget (a row above, where one "
            f"exists, is a run's last finished segment; `{FAILURES_FILE}` has each traceback; the same `bench` "
            f"command retries them): " + "; ".join(items) + ".")
