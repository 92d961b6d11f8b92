"""The kept-pool builder: TVM's LocalBuilder results, with the same workers from batch to batch."""

import sys

import psutil
import pytest
from tvm.support.popen_pool import PopenPoolExecutor

from metatune.measure.builder import kept_pool_builder
from metatune.measure.measurer import Measurer, MeasureSettings, build_without_intrinsics
from metatune.measure.popen_worker import WORKER
from metatune.space.knob_space import DesignSpaces
from metatune.workload.operators import Workload
from tests.conftest import SMALL_SHAPES
from tests.processes import tvm_workers


@pytest.fixture(scope="module")
def build_inputs(target):
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    workload = Workload.parse(SMALL_SHAPES["dense"])
    return [BuilderInput(c.measure_candidate().sch.mod, target)
            for c in DesignSpaces(workload, target).random_candidates(3, seed=0)]


def test_workers_outlive_a_batch_until_their_builds_are_used_up(build_inputs):
    import tvm

    before = tvm_workers()
    builder = kept_pool_builder(1, 30.0, build_without_intrinsics, max_builds_per_worker=4)
    try:
        first = builder.build(build_inputs)  # builds 1-3
        worker = tvm_workers() - before
        assert len(worker) == 1
        second = builder.build(build_inputs[:1])  # build 4: the same worker
        assert tvm_workers() - before == worker
        third = builder.build(build_inputs[:1])  # build 5: a new worker
        assert len(tvm_workers() - before) == 1 and tvm_workers() - before != worker
        for result in first + second + third:
            assert result.error_msg is None
            assert tvm.runtime.load_module(result.artifact_path)  # an exported library, as LocalBuilder's
    finally:
        builder.shutdown()
    assert tvm_workers() - before == set()


def test_a_timeout_reads_as_local_builders_and_the_killed_worker_is_replaced(build_inputs, tmp_path):
    slow = tmp_path / "slow"
    slow.touch()

    def build(mod, target, params, slow=str(slow)):
        import os
        import time

        if os.path.exists(slow):
            time.sleep(30)
        return build_without_intrinsics(mod, target, params)

    builder = kept_pool_builder(1, 2.0, build)
    try:
        assert [r.error_msg for r in builder.build(build_inputs[:1])] == ["LocalBuilder: Timeout, killed after 2.0 seconds"]
        slow.unlink()
        after = builder.build(build_inputs[:2])  # the killed worker's successor builds
        assert all(r.error_msg is None and r.artifact_path for r in after)
    finally:
        builder.shutdown()


def test_a_measurer_starts_its_build_workers_ahead_without_torch_and_closing_it_ends_them(target, build_inputs):
    """TVM's workers import PyTorch through tvm-ffi unless it is hidden (seconds of each worker's start):
    a measurer's three run metatune's worker, which hides it, and still build; any TVM pool started
    afterwards in this process does the same."""
    before = tvm_workers()
    measurer = Measurer(target, MeasureSettings(repeat=1, min_repeat_ms=1, build_workers=2))
    try:
        started = tvm_workers() - before
        assert len(started) == 1 + 2  # the runner's worker and both build workers, before any build
        assert all(WORKER in psutil.Process(pid).cmdline() for pid in started)
        assert all(r.error_msg is None for r in measurer.builder.build(build_inputs[:2]))
        assert tvm_workers() - before == started  # the builds ran on the workers started ahead
    finally:
        measurer.close()
    assert tvm_workers() - before == set()
    pool = PopenPoolExecutor(max_workers=1, timeout=60)
    try:
        assert pool.submit(lambda: sys.modules.get("torch", "not imported") is None).result()
    finally:
        pool.shutdown()
