"""Building candidate schedules on every core.

A candidate costs a trace replay plus TVM's postprocessors, all in C++ with the GIL released;
on CUDA, VerifyGPUCode lowers the whole program (~20 ms a candidate) and rejects most random
tilings (shared memory, registers), so a search pool of a few hundred entries costs thousands
of builds. Threads build them side by side. What is built stays a function of the caller's
random generator alone: every draw happens in the calling thread, in slot order, before the
round's builds start.
"""

from __future__ import annotations

import collections
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from metatune.env.device import usable_cores

T = TypeVar("T")
K = TypeVar("K")

_counter_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=usable_cores(), thread_name_prefix="metatune-build")


def run_all(jobs: list[Callable[[], T]]) -> list[T]:
    """Every job's result, in order; side by side when there are several."""
    if len(jobs) < 2:
        return [job() for job in jobs]
    return list(_executor().map(lambda job: job(), jobs))


def count(counter: collections.Counter[str], key: str) -> None:
    """`counter[key] += 1` from a build thread (a read and a write: not atomic on its own)."""
    with _counter_lock:
        counter[key] += 1


def build_until_accepted(slots: int, draw: Callable[[int], Callable[[], T | None] | None],
                         accept: Callable[[int, T], bool], tries: int) -> list[T | None]:
    """One candidate per slot: each round draws once for every slot still open (a draw is a
    build still to run, or None), runs the round's builds side by side and closes the slots whose build is
    accepted; a slot still open after `tries` rounds gets None."""
    results: list[T | None] = [None] * slots
    open_slots = list(range(slots))
    for _ in range(tries):
        if not open_slots:
            break
        drawn = [(slot, build) for slot in open_slots if (build := draw(slot)) is not None]
        built = run_all([build for _, build in drawn])
        for (slot, _), cand in zip(drawn, built):
            if cand is not None and accept(slot, cand):
                results[slot] = cand
        open_slots = [slot for slot in open_slots if results[slot] is None]
    return results


def collect_new(n: int, attempts: int, draw_round: Callable[[int], list[T | None]], key: Callable[[T], K],
                known: Callable[[K], bool]) -> list[T]:
    """Up to `n` results whose keys are not `known` nor repeated, from rounds of `draw_round(k)`
    (k = as many as still missing, at most `attempts` over all rounds)."""
    found: list[T] = []
    seen: set[K] = set()
    while len(found) < n and attempts > 0:
        k = min(attempts, n - len(found))
        attempts -= k
        for item in draw_round(k):
            if item is None or key(item) in seen or known(key(item)):
                continue
            seen.add(key(item))
            found.append(item)
    return found
