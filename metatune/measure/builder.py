"""TVM's local builder, with its worker processes kept from one batch to the next.

MetaSchedule's `LocalBuilder` starts a new pool of worker processes for every batch (its comment
cites a memory leak of reused workers), and each new worker imports TVM before it builds anything.
On a 2-core host that start is 1.5-2.9 s of every batch: 16 small conv2d candidates built in 4.1 s
with a new pool and 1.6 s with a kept one, medians of 25 batches (docs/BENCHMARKS.md, "Build
workers kept between batches"). The leak did not show with TVM 0.27: the two kept workers stayed at
432-440 MB resident over 400 builds. The pool here is kept, and each worker is still replaced after `MAX_BUILDS_PER_WORKER`
builds, TVM's own remedy (`maximum_process_uses`), so that a leak in a later TVM stays bounded.

Idle workers wait on a pipe and take no CPU time while the runner times a batch. A worker that
timed out or died is replaced by the pool on its next build, as in a new pool. `start` starts the
workers without waiting for them, so that their TVM import (3-4 s each) runs beside the caller's
own start-up (the runner's worker imports TVM too) instead of inside the first batch; otherwise a
worker is started by the first build that needs it. Either runs under the signal mask of
`env/interrupt.uninterrupted` (`Measurer` starts them there, TVM's tuning loop and
`Measurer.measure` build there), and the pool's threads and their workers keep it: the terminal's
Ctrl-C never reaches a worker.
"""

from __future__ import annotations

from typing import Any, Callable

from metatune.env.plugin import BUILDER, plugin_class

MAX_BUILDS_PER_WORKER = 512


class _KeptPoolBuilderLogic:
    """MetaSchedule's LocalBuilder (same worker function, results and error texts) with one worker
    pool for all batches; `shutdown` ends the workers."""

    def __init__(self, max_workers: int, timeout_sec: float, f_build: Callable[..., Any],
                 max_builds_per_worker: int = MAX_BUILDS_PER_WORKER) -> None:
        self.max_workers, self.timeout_sec, self.f_build = max_workers, timeout_sec, f_build
        self.max_builds_per_worker = max_builds_per_worker
        self._pool: Any = None

    def build(self, build_inputs: list[Any]) -> list[Any]:
        from tvm.s_tir.meta_schedule.builder import BuilderResult
        # The function LocalBuilder's workers run: build with `f_build`, export with TVM's default.
        from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
        from tvm.support.popen_pool import StatusKind

        jobs = [(self.f_build, None, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]
        results = []
        for outcome in self._worker_pool().map_with_error_catching(lambda job: _worker_func(*job), jobs):
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
            else:
                results.append(BuilderResult(None, f"LocalBuilder: An exception occurred\n{outcome.value}"))
        return results

    def start(self) -> None:
        """Start every worker now and return at once (each worker's first task waits for its start)."""
        pool = self._worker_pool()
        for _ in range(self.max_workers):  # the pool adds a thread, and with it a worker, per task while none is idle
            pool.submit(_started)

    def _worker_pool(self) -> Any:
        from tvm.support.popen_pool import PopenPoolExecutor

        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec,
                                           maximum_process_uses=self.max_builds_per_worker)
        return self._pool

    def shutdown(self) -> None:
        """End the worker processes now (a later `build` starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _started() -> None:
    """A worker's first task when it is started ahead of the first batch: nothing, once TVM is imported."""


def kept_pool_builder(max_workers: int, timeout_sec: float, f_build: Callable[..., Any],
                      max_builds_per_worker: int = MAX_BUILDS_PER_WORKER) -> Any:
    """A MetaSchedule `Builder` that builds like `LocalBuilder` and keeps its workers between batches."""
    cls = plugin_class(BUILDER, _KeptPoolBuilderLogic, "KeptPoolBuilder")
    return cls(max_workers, timeout_sec, f_build, max_builds_per_worker)
