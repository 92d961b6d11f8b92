"""TVM's gradient task scheduler for a network's tasks, with each task's batch joined once it has run.

MetaSchedule's `GradientBased` scheduler first sends one batch of every task to the builder and the
runner, and joins none of them before all are sent: on a network of N tasks no measurement reaches
the database, the progress report or a stop request until N batches are built and run (mobilenet_v2's
33 tasks: 17 minutes, nearly all of a 200-trial budget, on 2 cores). The builder here touches every
task before it builds the next batch, as TVM's `RoundRobin` scheduler does at each step: a task whose
batch has finished running is joined then (its measure callbacks run, its records are written), and
the gradient scheduler's own join at the end of that first round passes over it. Which task runs
next stays GradientBased's choice."""

from __future__ import annotations

from typing import Any

from metatune.env.interrupt import raise_if_stopped
from metatune.env.plugin import BUILDER, plugin_class


class _JoinFinishedBatchesLogic:
    """Before building a batch: join every other task whose batch has run, then stop if asked to."""

    def __init__(self, builder: Any, scheduler: Any, n_tasks: int) -> None:
        self.builder, self.scheduler, self.n_tasks = builder, scheduler, n_tasks

    def build(self, build_inputs: list[Any]) -> list[Any]:
        for task_id in range(self.n_tasks):
            self.scheduler.touch_task(task_id)  # joins the task when all its runs are done
        raise_if_stopped()  # a stop asked before, or in a callback of, the joins above
        return self.builder.build(build_inputs)


def gradient_scheduler(builder: Any, n_tasks: int, seed: int) -> tuple[Any, Any]:
    """(TVM's GradientBased task scheduler, `builder` wrapped to join finished batches early) for
    `ms.tune_tasks` over `n_tasks` tasks."""
    from tvm.s_tir import meta_schedule as ms

    scheduler = ms.task_scheduler.GradientBased(seed=seed)
    joining = plugin_class(BUILDER, _JoinFinishedBatchesLogic, "JoinFinishedBatchesBuilder")
    return scheduler, joining(builder, scheduler, n_tasks)
