"""Worker processes for CPU-bound Python work that threads cannot share (TVM trace replay, training
with one torch thread per model).

Workers are spawned, not forked: a forked child inherits TVM's and torch's thread pools in a state
they cannot run from. Each worker imports what it needs, so a job pays a few seconds to start and
is worth it only for work of tens of seconds or more. Ctrl-C reaches the workers too (they share the
terminal's process group): a worker then exits at once and quietly, leaving the traceback and the
clean-up to the main process (what workers write, they write atomically). A worker whose main process
is gone (killed, say by a service manager's SIGTERM that reaches the main process alone) exits too,
instead of finishing orphaned work on every core.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

from metatune.env.device import usable_cores


def worker_count(jobs: int, limit: int | None = None) -> int:
    """Workers for `jobs` independent jobs: one per usable core (or `limit`), never more than the jobs."""
    return max(1, min(jobs, limit or usable_cores()))


INTERRUPTED_EXIT = 128 + signal.SIGINT  # a worker's exit status after Ctrl-C, as a shell reports it
ORPHANED_EXIT = 128 + signal.SIGTERM  # a worker's exit status once its main process is gone
PARENT_POLL_S = 1.0


class WorkerPool(ProcessPoolExecutor):
    """A ProcessPoolExecutor whose `with` block, left by an exception (a job's error, a stop), ends
    the workers at once: the executor's own exit would first run every job still queued."""

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        if exc_type is None:
            return super().__exit__(exc_type, exc, traceback)
        self.terminate()
        return False

    def terminate(self) -> None:
        """Drop the queued jobs and kill the workers, running jobs and all; return once the executor's
        thread has let go of its queues (their semaphores are released before anything else runs)."""
        workers = list((self._processes or {}).values())
        manager = self._executor_manager_thread
        self.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.join(timeout=10)
        if manager is not None:
            manager.join(timeout=10)


def process_pool(workers: int, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> WorkerPool:
    """Spawned workers that run `initializer(*initargs)` first and leave quietly on Ctrl-C."""
    return WorkerPool(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                      initializer=_start_worker, initargs=(os.getpid(), initializer, initargs))


def _start_worker(parent: int, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    """`parent` is passed, not read here: a parent gone before the worker started would be pid 1 already."""
    signal.signal(signal.SIGINT, _leave_quietly)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True, name="parent-watch").start()
    if initializer is not None:
        initializer(*initargs)


def _leave_quietly(signum: int, frame: Any) -> None:
    os._exit(INTERRUPTED_EXIT)


def _exit_with_parent(parent: int) -> None:
    """Once the main process is gone the worker is re-parented, and nobody would read its results."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(ORPHANED_EXIT)
