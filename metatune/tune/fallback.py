"""Which tasks of a model metatune can tune, and TVM's default for the others.

metatune's cost model reads a program as a graph on its super-graph template, which was built
from the operator families it was trained on; BatchBO needs the task's design spaces as knob
spaces. A task that fails either (a pooling reduction, a reshape, an rfactored matmul: stages
whose loops have no template slot) would make MetaTuneCostModel raise TemplateMismatch on every
prediction and update. Such a task is tuned with XGBModel +
EvolutionarySearch instead, and the choice is reported per task.

The check samples a few configurations per design space. Should a later candidate still not
encode, `RoutedCostModel` moves that task to the fallback model for the rest of the run and
logs why, rather than failing the whole model; the fallback first learns the task's measurements
so far from the run's database, so that it does not start cold halfway through.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from metatune.encode.supergraph import REBUILD_HINT
from metatune.env.plugin import COST_MODEL, plugin_class
from metatune.measure.database import earlier_results, record_of, trial_lines
from metatune.measure.measurer import with_failed_timings
from metatune.space.knob_space import DesignSpaces, SearchSpace

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from metatune.encode.supergraph import GraphEncoder

logger = logging.getLogger(__name__)


def _reason(err: Exception) -> str:
    """The error's message without the template-rebuild advice (it is the same for every task);
    errors raised in Python and re-raised by TVM keep the message on their last line."""

    lines = str(err).strip().splitlines() or [type(err).__name__]
    return lines[-1].replace(f": {REBUILD_HINT}", "").strip()


def uncovered_reason(context: "TuneContext", encoder: "GraphEncoder", samples_per_space: int = 4,
                     seed: int = 0) -> str | None:
    """None when BatchBO's knob space and the graph encoder accept every design space of the
    task (on `samples_per_space` random configurations each); otherwise why not."""
    return spaces_uncovered_reason(lambda: DesignSpaces.from_context(context), encoder, samples_per_space, seed)


def spaces_uncovered_reason(spaces: Callable[[], DesignSpaces], encoder: "GraphEncoder", samples_per_space: int = 4,
                            seed: int = 0) -> str | None:
    """`uncovered_reason` of the design spaces `spaces()` builds (a single operator's, without a TuneContext)."""
    try:
        space = SearchSpace(spaces())
        rng = np.random.default_rng(seed)
        for knobs in space.knob_spaces:
            for _ in range(samples_per_space):
                cand = knobs.sample(rng)
                if cand is not None:
                    encoder.slots_of(encoder.analyse(cand))
    except Exception as err:  # noqa: BLE001 - TemplateMismatch, SpaceError, or TVM refusing a replay
        return _reason(err)
    return None


class _RoutedCostModelLogic:
    """One cost model per task, as MetaSchedule's task scheduler takes a single one:
    tasks named in `primary_tasks` use `primary`, all others `fallback`. A task whose primary
    model fails moves to `fallback`, which first learns the task's records in `db_dir` (the run's
    JSON database) when given."""

    def __init__(self, primary: Any, fallback: Any, primary_tasks: set[str], db_dir: Path | None = None) -> None:
        self.primary = primary
        self.fallback = fallback
        self.primary_tasks = set(primary_tasks)
        self.db_dir = db_dir
        self.demoted: dict[str, str] = {}  # task -> why it left the primary model mid-run
        self._handed: dict[str, set[str]] = {}  # task -> traces of the records its fallback learnt on demotion

    def update(self, context: "TuneContext", candidates: list["MeasureCandidate"],
               results: list["RunnerResult"]) -> None:
        self._call("update", context, candidates, with_failed_timings(results))

    def predict(self, context: "TuneContext", candidates: list["MeasureCandidate"]) -> np.ndarray:
        return self._call("predict", context, candidates)

    def _call(self, method: str, context: "TuneContext", *args: Any) -> Any:
        task = str(context.task_name)
        if task in self.primary_tasks:
            try:
                return getattr(self.primary, method)(context, *args)
            except Exception as err:  # noqa: BLE001 - one task's encoding must not end the model's run
                self.primary_tasks.discard(task)
                self.demoted[task] = _reason(err)
                logger.warning("task %s: metatune's cost model failed in %s (%s); XGBModel takes over",
                               task, method, self.demoted[task])
                if self._hand_over(task, context) and method == "update":
                    return None  # MetaSchedule adds a batch to the database before UpdateCostModel: it was learnt
        if method == "update" and task in self._handed:
            args = self._not_handed(task, *args)
            if not args[0]:
                return None
        return getattr(self.fallback, method)(context, *args)

    def _hand_over(self, task: str, context: "TuneContext") -> bool:
        """Teach `fallback` the task's measurements so far, in measurement order (failures as the worst,
        as on resume); whether there were any."""
        if self.db_dir is None:
            return False
        records = [record_of(line) for line in trial_lines(self.db_dir, context.mod)]
        if records:
            self.fallback.update(context, [r.as_measure_candidate() for r in records], earlier_results(records))
            self._handed[task] = {str(r.trace) for r in records}
        return bool(records)

    def _not_handed(self, task: str, candidates: list[Any], results: list[Any]) -> tuple[list[Any], list[Any]]:
        """The update's measurements the hand-over did not give already (BatchBO's resume scores the
        database's records, which may demote the task, then has the model learn the same records)."""
        handed = self._handed[task]
        traces = [str(c.sch.trace) for c in candidates]
        keep = [i for i, trace in enumerate(traces) if trace not in handed]
        handed.difference_update(traces)  # each is skipped once
        if not handed:  # all seen again: later updates go straight to the fallback
            del self._handed[task]
        return [candidates[i] for i in keep], [results[i] for i in keep]


def RoutedCostModel(primary: Any, fallback: Any, primary_tasks: set[str],  # noqa: N802 (creates the TVM class)
                    db_dir: Path | None = None) -> Any:
    """A MetaSchedule cost model that sends each task to `primary` or `fallback` (see the logic class)."""
    return plugin_class(COST_MODEL, _RoutedCostModelLogic, "RoutedCostModel")(primary, fallback, primary_tasks, db_dir)
