"""Worker pools: spawned workers run their initializer and leave quietly on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from metatune.env.processes import process_pool, worker_count
from metatune.fileio import REPO_ROOT


def test_worker_count_is_bounded_by_jobs_and_limit():
    assert worker_count(1) == 1
    assert worker_count(5, limit=2) == 2
    assert worker_count(0, limit=3) == 1


def test_initializer_runs_in_each_worker(tmp_path):
    with process_pool(1, os.chdir, (str(tmp_path),)) as pool:
        assert pool.submit(os.getcwd).result(timeout=60) == str(tmp_path)


def _fail() -> None:
    raise ValueError("the first job failed")


def test_a_failed_job_ends_the_pool_without_running_the_queued_ones():
    """Leaving the block on an error must not wait for every queued job (each sleeps 20 s here)."""
    start = time.monotonic()
    with pytest.raises(ValueError, match="the first job failed"):
        with process_pool(1) as pool:
            failing = pool.submit(_fail)
            for _ in range(3):
                pool.submit(time.sleep, 20)
            workers = list(pool._processes.values())
            failing.result(timeout=60)
    assert time.monotonic() - start < 20
    assert workers and not any(worker.is_alive() for worker in workers)


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


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (exited, not yet reaped by whoever adopted it) counts as gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_leave_when_their_main_process_is_killed():
    """SIGKILL (or a SIGTERM that reaches the main process alone) must not leave workers busy on every core."""
    code = ("import os, time\n"
            "from metatune.env.processes import process_pool\n"
            "pool = process_pool(2)\n"
            "print(*{pool.submit(os.getpid).result() for _ in range(8)}, flush=True)\n"
            "pool.submit(time.sleep, 300)\n"
            "time.sleep(300)\n")
    main = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        workers = [int(pid) for pid in main.stdout.readline().split()]
        assert workers and all(_alive(pid) for pid in workers)
        main.kill()
        main.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in workers), "a worker outlived its main process"
    finally:
        main.kill()
        for pid in workers if "workers" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
