"""A MetaSchedule JSON database read in measurement order (its getters sort by latency)."""

from metatune.measure.database import earlier_results, records_in_trial_order, trial_lines
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
