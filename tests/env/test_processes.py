"""Worker pools: spawned workers run their initializer and leave quietly on Ctrl-C."""

from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from metatune.env.processes import process_pool, worker_count


def test_worker_count_is_bounded_by_jobs_and_limit():
    assert worker_count(1) == 1
    assert worker_count(5, limit=2) == 2
    assert worker_count(0, limit=3) == 1


def test_initializer_runs_in_each_worker(tmp_path):
    with process_pool(1, os.chdir, (str(tmp_path),)) as pool:
        assert pool.submit(os.getcwd).result(timeout=60) == str(tmp_path)


def test_ctrl_c_ends_a_worker_without_a_traceback(capfd):
    pool = process_pool(1)
    try:
        pid = pool.submit(os.getpid).result(timeout=60)
        assert pid != os.getpid()
        os.kill(pid, signal.SIGINT)
        with pytest.raises(BrokenProcessPool):
            pool.submit(os.getpid).result(timeout=60)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
