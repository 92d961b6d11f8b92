"""`metatune tune` under Ctrl-C and SIGTERM, with a second run on its database, and resumed from a torn
database: real processes, real measurements."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from metatune.fileio import LOCK_FILE, RECORD_FILE, WORKLOAD_FILE
from tests.processes import Stopped, group_members, json_lines, run, start, stop, wait_until

SMALL = "dense:m=16,n=32,k=24"
STOP_WITHIN_S = 90  # a batch of 4 small candidates, built by workers that start cold, on a slow shared CPU


def tune_args(db: Path, strategy: str, trials: int = 100_000, *extra: str) -> list[str]:
    return ["tune", "--workload", SMALL, "--trials", str(trials), "--trials-per-iter", "4", "--strategy", strategy,
            "--db", str(db), *extra]


def records(db: Path) -> list:
    path = db / RECORD_FILE
    return json_lines(path) if path.exists() else []


def assert_stopped_cleanly(stopped: Stopped, pgid: int, db: Path, args: list[str]) -> None:
    """Exit 130 soon, the same command as the way to resume, whole database files, no process left."""
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.seconds < STOP_WITHIN_S
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert "to resume, run the same command again: metatune " + " ".join(args) in stopped.stderr
    for name in (WORKLOAD_FILE, RECORD_FILE):
        assert (db / name).read_text().endswith("\n")
        json_lines(db / name)
    assert not (db / LOCK_FILE).exists()
    assert group_members(pgid) == [], "a worker process outlived the command"


def distinct_configurations(db: Path) -> bool:
    traces = [json.dumps(record[1][0], sort_keys=True) for record in records(db)]
    return len(set(traces)) == len(traces)


@pytest.fixture(scope="module")
def ctrl_c(tmp_path_factory) -> tuple[Path, int, object, Stopped]:
    """A random-strategy run; a second run on its database once it has records; then Ctrl-C to the
    first, sent to its whole process group as a terminal does (TVM's workers get it too)."""
    db = tmp_path_factory.mktemp("tune") / "db"
    first = start(*tune_args(db, "random"))
    wait_until(lambda: len(records(db)) >= 4, first, timeout_s=240)
    second = run(*tune_args(db, "random"), timeout=120)
    return db, first.pid, second, stop(first, signal.SIGINT, group=True)


def test_ctrl_c_stops_at_a_batch_boundary(ctrl_c):
    db, pid, _, stopped = ctrl_c
    assert_stopped_cleanly(stopped, pid, db, tune_args(db, "random"))
    assert len(records(db)) % 4 == 0, "a batch was written in part"


def test_a_second_run_on_the_database_is_refused(ctrl_c):
    db, pid, second, _ = ctrl_c
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [
        f"error: {db} is in use by process {pid} (a tuning run); wait for it to finish, or stop it (Ctrl-C) and "
        "run this again"]
    assert distinct_configurations(db)


def test_a_torn_database_resumes(ctrl_c, tmp_path):
    db = tmp_path / "db"
    shutil.copytree(ctrl_c[0], db)
    before = len(records(db))
    lines = (db / RECORD_FILE).read_text().splitlines(keepends=True)
    with open(db / RECORD_FILE, "a") as f:
        f.write(lines[-1][: len(lines[-1]) // 2])  # what a kill in the middle of TVM's append leaves
    res = run(*tune_args(db, "random", before + 4))
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "torn last line" in line]
    assert len(notes) == 1 and notes[0].startswith("note: repaired") and RECORD_FILE in notes[0]
    assert len(records(db)) == before + 4


def test_sigterm_stops_the_metatune_strategy(tmp_path):
    db = tmp_path / "db"
    args = tune_args(db, "metatune")
    proc = start(*args)
    wait_until(lambda: len(records(db)) >= 4, proc, timeout_s=240)
    stopped = stop(proc, signal.SIGTERM, group=False)  # a service manager stops the main process only
    assert_stopped_cleanly(stopped, proc.pid, db, args)
    assert "SIGTERM" in stopped.stderr


def test_ctrl_c_stops_a_model_run(tmp_path):
    db = tmp_path / "db"
    args = ["tune", "--model", "tinycnn", "--strategy", "random", "--trials", "100000", "--trials-per-iter", "4",
            "--db", str(db)]
    proc = start(*args)
    wait_until(lambda: len(records(db)) >= 4, proc, timeout_s=400)
    assert_stopped_cleanly(stop(proc, signal.SIGINT, group=True), proc.pid, db, args)
