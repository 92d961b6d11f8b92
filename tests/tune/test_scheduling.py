"""The gradient task scheduler over a network's tasks joins each task's batch once it has run: records and
stop requests are honoured within the first round, not after every task has been sent (real TVM tasks,
builder and runner)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from metatune.env.interrupt import Interrupted
from metatune.fileio import RECORD_FILE, REPO_ROOT
from tests.conftest import local_target
from tests.processes import json_lines

TRIALS_PER_TASK = 2


def extract_tinycnn_tasks(target) -> list:
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model

    import_tensor_intrinsics()
    return extract_tasks(import_model(ModelSource.parse("tinycnn")).mod, target)


@pytest.fixture(scope="module")
def tinycnn_tasks(target) -> list:
    return extract_tinycnn_tasks(target)


class _CountingBuilderLogic:
    """The measurer's builder, counting the batches it builds."""

    def __init__(self, builder) -> None:
        self.builder, self.batches = builder, 0

    def build(self, build_inputs):
        self.batches += 1
        return self.builder.build(build_inputs)


class _JoinLogLogic:
    """Notes, at each join, how many batches had been built; asks to stop at the first when told to."""

    def __init__(self, counter, stop_at_first: bool) -> None:
        self.counter, self.stop_at_first, self.built_at_join = counter, stop_at_first, []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.built_at_join.append(self.counter.batches)
        if self.stop_at_first:
            os.kill(os.getpid(), signal.SIGINT)


def tune(tasks, target, db_dir, stop_at_first: bool) -> dict:
    """ms.tune_tasks as `tune_model` runs it (random search, one batch per task in the first round):
    the batches built, the number built at each join, the records written, the stop if one came."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.interrupt import uninterrupted
    from metatune.env.plugin import BUILDER, MEASURE_CALLBACK, plugin_class
    from metatune.measure.measurer import Measurer
    from metatune.tune.scheduling import gradient_scheduler
    from metatune.tune.tuner import measure_callbacks
    from metatune.workload.relax_tasks import task_context

    measurer = Measurer(target)
    counter = plugin_class(BUILDER, _CountingBuilderLogic, "CountingBuilder")(measurer.builder)
    log = plugin_class(MEASURE_CALLBACK, _JoinLogLogic, "JoinLog")(counter, stop_at_first)
    scheduler, builder = gradient_scheduler(counter, len(tasks), seed=0)
    contexts = [task_context(t, target, search_strategy="replay-trace", num_threads=1).clone() for t in tasks]
    database = ms.database.JSONDatabase(work_dir=str(db_dir))
    stopped = None
    try:
        with measurer, uninterrupted():
            ms.tune_tasks(tasks=contexts, task_weights=[float(t.weight) for t in tasks], work_dir=str(db_dir),
                          max_trials_global=TRIALS_PER_TASK * len(tasks), num_trials_per_iter=TRIALS_PER_TASK,
                          builder=builder, runner=measurer.runner, database=database, cost_model="random",
                          measure_callbacks=[*measure_callbacks(), log], task_scheduler=scheduler)
    except Interrupted as stop:
        stopped = str(stop)
    records = db_dir / RECORD_FILE
    return {"batches": counter.batches, "built_at_join": log.built_at_join, "stopped": stopped,
            "records": len(json_lines(records)) if records.exists() else 0}


def test_each_batch_is_joined_before_the_first_round_ends(tinycnn_tasks, target, tmp_path):
    n = len(tinycnn_tasks)
    assert n >= 3
    run = tune(tinycnn_tasks, target, tmp_path, stop_at_first=False)
    assert run["batches"] == n and run["stopped"] is None
    joins = run["built_at_join"]
    assert len(joins) == n, "every task's batch joined exactly once"
    # TVM's GradientBased alone joins nothing before all n batches are built: [n, n, ..., n]
    assert joins[0] < n and joins == sorted(joins), joins
    assert run["records"] == TRIALS_PER_TASK * n


def test_ctrl_c_in_the_first_round_stops_before_the_next_batch_is_built(tmp_path):
    """In a process of its own: Ctrl-C at the first join (as a user would press it) ends the process's
    children, which pytest's own must not be."""
    script = f"""
import json, pathlib
from metatune.env.interrupt import stop_on_signals
from tests.conftest import local_target
from tests.tune.test_scheduling import extract_tinycnn_tasks, tune
target = local_target()
with stop_on_signals():
    print(json.dumps(tune(extract_tinycnn_tasks(target), target, pathlib.Path({str(tmp_path)!r}), True)))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["stopped"] == "SIGINT"
    first = run["built_at_join"]
    # The first join came before the round's last batch was built (TVM's GradientBased alone builds all
    # of them first); the batch joined there is written (the stop came after TVM's AddToDatabase), no
    # other batch is joined, and at most the one being built when Python's handler ran (it runs in the
    # main thread at its next bytecode, not at once) is built after it.
    assert len(first) == 1 and first[0] < len(extract_tinycnn_tasks(local_target()))
    assert run["batches"] in (first[0], first[0] + 1)
    assert run["records"] == TRIALS_PER_TASK


def test_progress_of_a_resumed_run_starts_from_the_database_bests():
    """A resumed run reports every task measured so far, not only those of its own batches."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.task_scheduler import TaskScheduler

    from metatune.tune.tuner import progress_callback

    reports = []
    callback = progress_callback(20, lambda n, total, best: reports.append((n, total, dict(best))),
                                 [[0.004, 0.002], [], [None]])
    scheduler = TaskScheduler.create("round-robin")
    callback.apply(scheduler, 1, [], [], [RunnerResult(run_secs=[0.003, 0.003, 0.003], error_msg=None),
                                          RunnerResult(run_secs=None, error_msg="run_error")])
    callback.apply(scheduler, 0, [], [], [RunnerResult(run_secs=[0.001] * 3, error_msg=None)])
    assert reports == [(3, 20, {0: 0.002}),  # at once: where the run starts, before its first batch
                       (5, 20, {0: 0.002, 1: 0.003}), (6, 20, {0: 0.001, 1: 0.003})]
