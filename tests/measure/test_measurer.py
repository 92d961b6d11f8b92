"""Every family builds, runs and matches NumPy on this CPU through TVM's real builder/runner."""

import collections

import pytest

from metatune.measure.check import check_schedule
from metatune.measure.measurer import FailureKind, Measurer, MeasureSettings
from metatune.space.knob_space import DesignSpaces
from metatune.workload.operators import FAMILIES, Workload
from tests.conftest import SMALL_SHAPES


@pytest.fixture(scope="module")
def measurer(target):
    with Measurer(target, MeasureSettings(repeat=2, min_repeat_ms=1)) as measurer:
        yield measurer


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_builds_runs_and_matches_numpy(family, target, measurer):
    workload = Workload.parse(SMALL_SHAPES[family])
    spaces = DesignSpaces(workload, target)
    candidates = spaces.random_candidates(4, seed=3)
    assert len(candidates) == 4
    assert len({c.trace_key for c in candidates}) == 4
    results = measurer.measure(workload, [c.measure_candidate() for c in candidates])
    kinds = collections.Counter(r.failure for r in results)
    good = [c for c, r in zip(candidates, results) if r.ok]
    if family == "conv2d_winograd":
        # Some MetaSchedule winograd schedules miscompile in TVM 0.27: verification must catch
        # them as WRONG_RESULT, and never let them through as measured.
        assert set(kinds) <= {None, FailureKind.WRONG_RESULT}
    else:
        assert kinds == {None: 4}, [r.message for r in results]
    assert good, "no candidate of this family measured"
    for r in results:
        if r.ok:
            assert len(r.latencies_s) == 2 and all(t > 0 for t in r.latencies_s)
    assert check_schedule(workload, good[0].sch, target) < 1e-3


def test_verification_flags_wrong_results(target):
    """With an impossible tolerance every built candidate must be reported as wrong."""
    workload = Workload.parse(SMALL_SHAPES["dense"])
    cands = DesignSpaces(workload, target).random_candidates(2, seed=0)
    with Measurer(target, MeasureSettings(repeat=1, min_repeat_ms=1, rtol=-1.0)) as strict:
        results = strict.measure(workload, [c.measure_candidate() for c in cands])
    assert [r.failure for r in results] == [FailureKind.WRONG_RESULT] * 2


def test_build_failure_is_typed_not_raised(target):
    workload = Workload.parse(SMALL_SHAPES["dense"])
    cands = DesignSpaces(workload, target).random_candidates(2, seed=0)
    with Measurer(target, MeasureSettings(build_timeout_s=0.001, repeat=1, min_repeat_ms=1)) as tight:
        results = tight.measure(workload, [c.measure_candidate() for c in cands])
    assert all(r.failure in (FailureKind.BUILD_TIMEOUT, FailureKind.BUILD_ERROR) for r in results)


def test_candidates_are_checked_after_the_batch_is_timed(target):
    """Checking runs each kernel in this process, whose TVM threads then spin for a while: done
    before the runner times the batch, they took a core from it (docs/BENCHMARKS.md, "Checked before timed")."""
    workload = Workload.parse(SMALL_SHAPES["dense"])
    measurer = Measurer(target, MeasureSettings(repeat=1, min_repeat_ms=1))
    events: list[str] = []
    runner_run, verify = measurer.runner.run, measurer._verify

    class RecordingRunner:
        verify_locally = True

        def run(self, inputs):
            events.append("time")
            return runner_run(inputs)

    def recording_verify(*args):
        events.append("check")
        return verify(*args)

    measurer.runner, measurer._verify = RecordingRunner(), recording_verify
    cands = DesignSpaces(workload, target).random_candidates(2, seed=0)
    with measurer:
        results = measurer.measure(workload, [c.measure_candidate() for c in cands])
    assert all(r.ok for r in results), [r.message for r in results]
    assert events == ["time", "check", "check"]


def test_a_time_no_kernel_takes_is_a_failure_everywhere_it_is_read():
    """Zero, negative and NaN times are a broken timer: a failure to the search and the cost models
    (an infinite throughput label stops TVM's XGBModel), not a success, and not MetaSchedule's own
    failure marker either (a failed trial is not a broken one)."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from metatune.measure.measurer import broken_timing, successful_run_seconds, with_failed_timings

    for secs in ([0.0], [1e-5, float("nan")], [float("nan"), 1e-5], [-1e-6]):
        assert successful_run_seconds(secs) is None and broken_timing(secs)
    assert successful_run_seconds([1e-5, 2e-5]) == [1e-5, 2e-5] and not broken_timing([1e-5])
    assert not broken_timing([1e10]) and not broken_timing([]) and not broken_timing(None)
    kept, failed = with_failed_timings([RunnerResult(run_secs=[1e-5], error_msg=None),
                                        RunnerResult(run_secs=[0.0], error_msg=None)])
    assert kept.error_msg is None and failed.run_secs is None and "no valid run time" in failed.error_msg
