"""Real measurement of MetaSchedule candidates with TVM's builder and runner.

Settings were chosen by measurement on a 2-core AVX-512 VM (see docs/BENCHMARKS.md):
* the build function skips `import tvm.s_tir.tensor_intrin` (20-30 s per fresh worker,
  which made every default build time out); tensorization already happened when the
  schedule was made, so the build worker does not need the intrinsics registered;
* the build workers are kept from one batch to the next (measure/builder.py): a new pool per
  batch, as TVM's LocalBuilder starts, cost ~3 s of each batch;
* TVM's workers start without PyTorch (measure/popen_worker.py): 1.3 s instead of 4.7 s to
  start a measurer's three on 2 cores;
* `number=1, repeat=5, min_repeat_ms=20`: ranks like TVM's default (Spearman ~0.97) at a
  fraction of the cost; the median of the repeats is the latency;
* each timed candidate can then be run once here on random inputs and compared with the
  workload's NumPy reference, so a miscompiled schedule is a typed failure (after the timing,
  so that this process's kernel threads are not running beside the runner's).
A failed candidate never aborts a run: every candidate gets a `MeasureResult`. Ctrl-C or SIGTERM
(under `stop_on_signals`) drops the batch in flight: `measure` raises `Interrupted` instead of
returning results the signal may have spoilt (env/interrupt.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Sequence

from metatune.env.device import usable_cores
from metatune.env.interrupt import raise_if_stopped, uninterrupted
from metatune.env.tvm_setup import use_threads
from metatune.measure.arguments import alloc_local
from metatune.measure.builder import kept_pool_builder
from metatune.measure.check import DEFAULT_RTOL, ReferenceCheck, device_type
from metatune.measure.popen_worker import run_workers_without_torch
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.runner import Runner, RunnerResult


FAILED_RUN_S = 1e9  # MetaSchedule records a failed run as 1e10 s
BROKEN_TIMING = "no valid run time (zero, negative or NaN)"


def successful_run_seconds(run_secs: Any) -> list[float] | None:
    """The run times of a measurement (TVM FloatImms or floats), or None if it failed: no times,
    MetaSchedule's failure marker, or a time no kernel takes (zero, negative, NaN: a broken timer)."""
    secs = [float(getattr(v, "value", v)) for v in (run_secs or [])]
    return secs if secs and all(0.0 < s < FAILED_RUN_S for s in secs) else None


def with_failed_timings(results: Sequence["RunnerResult"]) -> list["RunnerResult"]:
    """The runner's results with a time no kernel takes turned into an error, for a model that
    learns from them (TVM's XGBModel stops on an infinite throughput label)."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    return [r if r.error_msg or successful_run_seconds(r.run_secs) is not None
            else RunnerResult(run_secs=None, error_msg=BROKEN_TIMING) for r in results]


def broken_timing(run_secs: Any) -> bool:
    """Times a kernel cannot take (zero, negative, NaN), as opposed to none or the failure marker."""
    secs = [float(getattr(v, "value", v)) for v in (run_secs or [])]
    return bool(secs) and not any(s >= FAILED_RUN_S for s in secs) and successful_run_seconds(secs) is None


def median_latency(run_secs: Sequence[float], *, high: bool = False) -> float:
    """The latency of a measurement: the median of its run times. An even count has two middle
    times; `high` takes the upper one (a time that was actually measured) instead of their mean."""
    return statistics.median_high(run_secs) if high else statistics.median(run_secs)


class FailureKind(str, Enum):
    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUN_ERROR = "run_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_RESULT = "wrong_result"


@dataclass
class MeasureResult:
    """Latency samples of one candidate (seconds), or why there are none."""

    latencies_s: list[float] = field(default_factory=list)
    failure: FailureKind | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def median_s(self) -> float:
        return median_latency(self.latencies_s) if self.latencies_s else float("inf")


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed."""

    build_timeout_s: float = 30.0
    run_timeout_s: float = 30.0
    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 20
    cache_flush: bool = False
    build_workers: int | None = None  # default: all usable cores
    num_threads: int | None = None  # TVM kernel threads; default: all usable cores
    verify: bool = True
    rtol: float = DEFAULT_RTOL

    def with_threads_in_force(self) -> "MeasureSettings":
        """These settings with the kernel threads set for TVM in this process and its workers (`use_threads`)."""
        return dataclasses.replace(self, num_threads=use_threads(self.num_threads or usable_cores()))

    def evaluator_config(self) -> Any:
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

        return EvaluatorConfig(
            number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
            enable_cpu_cache_flush=self.cache_flush,
        )


def build_without_intrinsics(mod: "tvm.IRModule", target: "tvm.target.Target", _params: Any) -> Any:
    """MetaSchedule's default build minus the 20-30 s tensor-intrinsic import."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


class Measurer:
    """Builds and times candidates of one target; local runner unless another is given."""

    def __init__(
        self,
        target: "tvm.target.Target",
        settings: MeasureSettings | None = None,
        runner: "Runner | None" = None,
    ) -> None:
        from tvm.s_tir.meta_schedule.runner import LocalRunner

        self.target = target
        self.settings = (settings or MeasureSettings()).with_threads_in_force()
        run_workers_without_torch()
        self.builder = kept_pool_builder(self.settings.build_workers or usable_cores(), self.settings.build_timeout_s,
                                         build_without_intrinsics)
        # the runner's pool waits for the worker it starts: a stop waits for it too, then ends it;
        # the build workers start meanwhile (each imports TVM: seconds of every run's start)
        with uninterrupted():
            self.builder.start()
            try:
                self.runner = runner or LocalRunner(
                    timeout_sec=self.settings.run_timeout_s, evaluator_config=self.settings.evaluator_config(),
                    f_alloc_argument=alloc_local,
                )
            except BaseException:
                self.builder.shutdown()
                raise
        self.device_type = device_type(target)
        self._check: ReferenceCheck | None = None
        self.timings = {"build_s": 0.0, "verify_s": 0.0, "run_s": 0.0}

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the builder's and the runner's worker processes now: TVM's LocalRunner keeps its
        worker until garbage collection."""
        self.builder.shutdown()
        pool = getattr(self.runner, "pool", None)
        if pool is not None:
            pool.shutdown()

    def measure(self, workload: Workload, candidates: Sequence["MeasureCandidate"]) -> list[MeasureResult]:
        """Build, time, and optionally verify every candidate; failures are typed, not raised."""
        if not candidates:
            return []
        with uninterrupted():
            return self._measure(workload, candidates)

    def _measure(self, workload: Workload, candidates: Sequence["MeasureCandidate"]) -> list[MeasureResult]:
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        results = [MeasureResult() for _ in candidates]
        t0 = time.perf_counter()
        built = self.builder.build([BuilderInput(c.sch.mod, self.target) for c in candidates])
        self.timings["build_s"] += time.perf_counter() - t0
        pending: list[tuple[int, str]] = []
        for i, b in enumerate(built):
            if b.error_msg:
                kind = FailureKind.BUILD_TIMEOUT if "Timeout" in b.error_msg else FailureKind.BUILD_ERROR
                results[i] = MeasureResult(failure=kind, message=_first_line(b.error_msg))
            else:
                pending.append((i, b.artifact_path))
        try:
            raise_if_stopped()  # the batch will be dropped: time none of it
            t0 = time.perf_counter()
            futures = self.runner.run(
                [RunnerInput(path, self.device_type, candidates[i].args_info) for i, path in pending]
            )
            timed: list[tuple[int, str]] = []
            for (i, path), future in zip(pending, futures):
                r = future.result()
                if r.error_msg:
                    kind = FailureKind.RUN_TIMEOUT if "Timeout" in r.error_msg else FailureKind.RUN_ERROR
                    results[i] = MeasureResult(failure=kind, message=_first_line(r.error_msg))
                elif successful_run_seconds(r.run_secs) is None:
                    results[i] = MeasureResult(failure=FailureKind.RUN_ERROR, message=BROKEN_TIMING)
                else:
                    results[i] = MeasureResult(latencies_s=[float(x) for x in r.run_secs])
                    timed.append((i, path))
            self.timings["run_s"] += time.perf_counter() - t0
            # Checked after the batch is timed, never before: TVM's thread pool in this process spins
            # on after running a kernel, and on a 2-core host it took a core from the runner's timing
            # (a depthwise batch read 19% slow: docs/BENCHMARKS.md, "Checked before timed").
            # A remote runner sets verify_locally=False when this host cannot run the remote's code.
            if self.settings.verify and getattr(self.runner, "verify_locally", True):
                t0 = time.perf_counter()
                for i, path in timed:
                    self._verify(workload, path, results, i)
                self.timings["verify_s"] += time.perf_counter() - t0
        finally:
            for b in built:
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return results

    def _verify(self, workload: Workload, artifact: str, results: list[MeasureResult], i: int) -> bool:
        import tvm

        if self._check is None or self._check.workload != workload:
            # One at a time: references can be large.
            self._check = ReferenceCheck(workload, rtol=self.settings.rtol, device=self.device_type)
        try:
            ok, error = self._check.passes(tvm.runtime.load_module(artifact))
        except Exception as err:  # a crash in the kernel is this candidate's failure, not ours
            results[i] = MeasureResult(failure=FailureKind.RUN_ERROR, message=_first_line(str(err)))
            return False
        if not ok:
            results[i] = MeasureResult(
                failure=FailureKind.WRONG_RESULT, message=f"max relative error {error:.2e} > {self.settings.rtol:g}"
            )
        return ok


def _first_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    # TVM puts the useful part last (after a traceback); keep the head and the tail.
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"[:500]
