"""Worker processes for CPU-bound Python work that threads cannot share (TVM trace replay, training
with one torch thread per model).

Workers are spawned, not forked: a forked child inherits TVM's and torch's thread pools in a state
they cannot run from. Each worker imports what it needs, so a job pays a few seconds to start and
is worth it only for work of tens of seconds or more.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

from metatune.env.device import usable_cores


def worker_count(jobs: int, limit: int | None = None) -> int:
    """Workers for `jobs` independent jobs: one per usable core (or `limit`), never more than the jobs."""
    return max(1, min(jobs, limit or usable_cores()))


def process_pool(workers: int, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)
