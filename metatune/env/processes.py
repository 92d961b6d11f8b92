"""Worker processes for CPU-bound Python work that threads cannot share (TVM trace replay, training
with one torch thread per model).

Workers are spawned, not forked: a forked child inherits TVM's and torch's thread pools in a state
they cannot run from. Each worker imports what it needs, so a job pays a few seconds to start and
is worth it only for work of tens of seconds or more. Ctrl-C reaches the workers too (they share the
terminal's process group): a worker then exits at once and quietly, leaving the traceback and the
clean-up to the main process (what workers write, they write atomically).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

from metatune.env.device import usable_cores


def worker_count(jobs: int, limit: int | None = None) -> int:
    """Workers for `jobs` independent jobs: one per usable core (or `limit`), never more than the jobs."""
    return max(1, min(jobs, limit or usable_cores()))


INTERRUPTED_EXIT = 128 + signal.SIGINT  # a worker's exit status after Ctrl-C, as a shell reports it


def process_pool(workers: int, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """Spawned workers that run `initializer(*initargs)` first and leave quietly on Ctrl-C."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(initializer, initargs))


def _start_worker(initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, _leave_quietly)
    if initializer is not None:
        initializer(*initargs)


def _leave_quietly(signum: int, frame: Any) -> None:
    os._exit(INTERRUPTED_EXIT)
