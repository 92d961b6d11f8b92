"""A tuning run says which of its batches were measured while other processes kept the cores busy."""

import os
import signal
import subprocess
import sys

from metatune.tune.load_watch import DISTURBING_CORES, LoadWatch, watch_load
from metatune.tune.tuner import tune_workload
from metatune.workload.operators import Workload

SMALL = "dense:m=64,n=64,k=64"


def outside_hog() -> int:
    """A busy loop that is not this process's descendant (its shell parent exits at once), as another
    user's job would be: a child of the tuning process would count as the run's own load."""
    started = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    return int(started.stdout)


def test_a_run_measured_beside_busy_processes_lists_its_disturbed_trials(tmp_path):
    busy = [outside_hog() for _ in range(os.cpu_count() or 1)]
    try:
        result = tune_workload(Workload.parse(SMALL), 8, "random", tmp_path / "db", trials_per_iter=4)
    finally:
        for pid in busy:
            os.kill(pid, signal.SIGKILL)
    assert result.trials == 8 and result.verified
    assert result.disturbed, "two busy loops beside the run, yet no batch was flagged"
    for first, last, cores in result.disturbed:
        assert 1 <= first <= last <= 8 and cores >= DISTURBING_CORES
    assert any("were measured while other processes kept" in note for note in result.notes)


def test_batches_are_numbered_from_where_a_resumed_run_starts():
    watch = LoadWatch(done=16, limit=0.0).start()  # every batch counts as disturbed
    watch.batch_done(8)
    watch.batch_done(8)
    assert [(b.first, b.last) for b in watch.disturbed] == [(17, 24), (25, 32)]
    assert watch.note() is not None and watch.note().startswith("16 trials (2 batches)")


def test_only_local_timing_is_watched():
    assert watch_load("local", 0) is not None
    assert watch_load("rpc://127.0.0.1:9190/key", 0) is None
    assert LoadWatch().start().note() is None
