"""A MetaSchedule JSON database read in measurement order (its getters sort by latency)."""

from metatune.measure.database import best_so_far, earlier_results, records_in_trial_order, trial_lines
from metatune.space.knob_space import DesignSpaces
from metatune.workload.operators import Workload

WORKLOAD = Workload.parse("dense:m=16,n=16,k=16")
LATENCIES = [5e-6, 9e-6, 1e10, 2e-6, 7e-6]  # as measured: slow, slower, failed, fastest, ...


def filled(database, target):
    """The database with five trials of WORKLOAD, committed in the order of LATENCIES."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    candidates = DesignSpaces(WORKLOAD, target).random_candidates(len(LATENCIES), seed=0)
    workload = database.commit_workload(WORKLOAD.irmodule())
    for cand, secs in zip(candidates, LATENCIES):
        mc = cand.measure_candidate()
        database.commit_tuning_record(TuningRecord(cand.trace, workload, [secs], target, mc.args_info))
    return [str(c.trace) for c in candidates]


def test_a_json_database_gives_its_records_in_the_order_they_were_measured(tmp_path, target):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    traces = filled(JSONDatabase(work_dir=str(tmp_path)), target)
    reopened = JSONDatabase(work_dir=str(tmp_path))
    by_latency = [float(r.run_secs[0]) for r in reopened.get_all_tuning_records()]
    assert by_latency == sorted(LATENCIES), "TVM's getter no longer sorts by latency: the helper may be moot"
    records = records_in_trial_order(reopened, WORKLOAD.irmodule())
    assert [float(r.run_secs[0]) for r in records] == LATENCIES
    assert [str(r.trace) for r in records] == traces
    assert [record[1] for _, record in trial_lines(tmp_path, WORKLOAD.irmodule())] == [[s] for s in LATENCIES]
    assert records_in_trial_order(reopened, Workload.parse("dense:m=8,n=8,k=8").irmodule()) == []


def test_earlier_failures_reach_a_cost_model_as_errors(tmp_path, target):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    filled(JSONDatabase(work_dir=str(tmp_path)), target)
    records = records_in_trial_order(JSONDatabase(work_dir=str(tmp_path)), WORKLOAD.irmodule())
    results = earlier_results(records)
    assert [r.error_msg is not None for r in results] == [s >= 1e9 for s in LATENCIES]
    assert [float(r.run_secs[0]) for r in results if r.error_msg is None] == [s for s in LATENCIES if s < 1e9]


def test_another_database_gives_its_getters_order(target):
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    database = MemoryDatabase()
    filled(database, target)
    records = records_in_trial_order(database, WORKLOAD.irmodule())
    assert sorted(float(r.run_secs[0]) for r in records) == sorted(LATENCIES)
    assert [float(r.run_secs[0]) for r in records] == [float(r.run_secs[0]) for r in database.get_all_tuning_records()]


# Repeats whose mean and median disagree: trial 1 has the lowest median; trial 4 ties trial 3's mean,
# later; trial 5 has the lowest mean and a higher median than trials 1 and 3.
REPEATS = [[6e-6, 6e-6, 6e-6], [3e-6, 3e-6, 30e-6], [1e10], [4e-6, 4e-6, 4e-6], [4e-6, 4e-6, 4e-6], [5e-6, 5e-6, 1e-6]]


def test_the_kernel_deployed_after_each_budget_is_the_one_tvms_database_returns_first(tmp_path, target):
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    candidates = DesignSpaces(WORKLOAD, target).random_candidates(len(REPEATS), seed=0)
    lines_so_far = []
    for n, (cand, secs) in enumerate(zip(candidates, REPEATS), start=1):
        (tmp_path / f"first-{n}").mkdir()
        database = JSONDatabase(work_dir=str(tmp_path / f"first-{n}"))  # the run stopped after n trials
        workload = database.commit_workload(WORKLOAD.irmodule())
        for c, s in zip(candidates[:n], REPEATS[:n]):
            database.commit_tuning_record(TuningRecord(c.trace, workload, s, target, c.measure_candidate().args_info))
        lines_so_far = trial_lines(tmp_path / f"first-{n}", WORKLOAD.irmodule())
        deployed = database.get_top_k(workload, 1)[0]
        [best] = best_so_far(lines_so_far, [n])
        assert str(candidates[best.trial].trace) == str(deployed.trace), f"after {n} trials"
    picks = {b.budget: b.trial for b in best_so_far(lines_so_far, [1, 2, 3, 4, 5, 6])}
    assert picks == {1: 0, 2: 0, 3: 0, 4: 3, 5: 3, 6: 5}  # never trial 1 (lowest median) nor 4 (equal mean, later)
    assert best_so_far(lines_so_far, [6])[0].latency_s == 5e-6  # its median repeat, as in the curves
