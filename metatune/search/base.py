"""What metatune's search strategies share: MetaSchedule's `PySearchStrategy` life cycle.

A strategy proposes a batch of knob configurations (`_propose`); MetaSchedule builds and times
them and reports back (`notify_runner_results`); a strategy resumed on a database never proposes
a configuration measured there again. `SearchLogic` owns that plumbing once: the task's design
spaces as a `SearchSpace`, seeding from the TuneContext, the trial budget, matching results to
proposals, reading the database, clones (`tune_tir`/`tune_tasks` run one per task) that share
their counters with the original, and the profiler scopes TVM's own strategies have
("<name>/PreTuning", "<name>/GenerateMeasureCandidates").
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, TypeVar

import numpy as np

from metatune.env.plugin import SEARCH_STRATEGY, plugin_class
from metatune.measure.database import records_in_trial_order
from metatune.measure.measurer import median_latency, successful_run_seconds
from metatune.space.knob_space import Config, DesignSpaces, SearchSpace, SpaceError

if TYPE_CHECKING:
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext
    from tvm.s_tir.meta_schedule.database import Database, TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerResult

logger = logging.getLogger(__name__)

StatsT = TypeVar("StatsT", bound="SearchStats")
LAST = {"total": "last"}  # field metadata: `SearchStats.total` keeps the last value set instead of a sum


@dataclass
class SearchStats:
    """One task's search counters (seconds are wall clock in this process)."""

    task: str = ""
    batches: int = 0
    proposed: int = 0
    resumed: int = 0  # database records of this workload read at pre_tuning
    measured: int = 0
    failed: int = 0
    search_s: float = 0.0  # pre_tuning + generate_measure_candidates, everything else included
    batch_s: list[float] = field(default_factory=list)

    @classmethod
    def total(cls: type[StatsT], stats: Iterable[StatsT]) -> StatsT:
        """Summed over tasks: numbers add up, lists concatenate, `LAST` fields keep the last value set."""
        out = cls(task="total")
        for s in stats:
            for f in dataclasses.fields(cls):
                value, acc = getattr(s, f.name), getattr(out, f.name)
                if f.metadata.get("total") == "last":
                    setattr(out, f.name, acc if value is None else value)
                elif isinstance(value, list):
                    setattr(out, f.name, acc + value)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    setattr(out, f.name, acc + value)
        return out

    @property
    def per_trial_s(self) -> float:
        return self.search_s / self.proposed if self.proposed else 0.0

    @property
    def per_batch_s(self) -> float:
        return statistics.fmean(self.batch_s) if self.batch_s else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "per_trial_s": self.per_trial_s, "per_batch_s": self.per_batch_s}


class SearchLogic:
    """The `PySearchStrategy` methods every strategy shares; a strategy supplies `_propose`,
    `_observe` and `_fresh`, and may extend `_reset`, `_prepare`, `_resumed` and `post_tuning`.

    A pending proposal is a tuple whose first two items are its `MeasureCandidate` and `Config`;
    a strategy may append what it wants back in `_observe`.
    """

    name: ClassVar[str]  # the TVM class name, profiler scope and log prefix
    # True: a resumed run's records reach the cost model through the strategy (`_resumed`), which
    # must score them first; the tuner then does not warm the cost model on them beforehand.
    warms_cost_model: ClassVar[bool] = False

    def __init__(self, settings: Any, stats: SearchStats) -> None:
        self.settings = settings
        self.stats = stats
        self.family: list[Any] = [self.stats]  # every clone's counters, shared with the original
        self.context: "TuneContext | None" = None
        self._reset()

    def _reset(self) -> None:
        """Forget the previous task (pre_tuning starts afresh)."""
        self.space: SearchSpace | None = None
        self.args_info: Any = None
        self.observations: dict[Config, Any] = {}
        self.failures: set[Config] = set()
        self.pending: list[tuple] = []
        self.max_trials = self.trials_per_iter = self.trials = 0
        self.rng = np.random.default_rng(self.settings.seed)

    # -- MetaSchedule interface -------------------------------------------------------------

    def _initialize_with_tune_context(self, context: "TuneContext") -> None:
        self.context = context
        self.stats.task = str(context.task_name or "")

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list["Schedule"],
                   database: "Database | None" = None, cost_model: Any = None) -> None:
        from tvm.s_tir.meta_schedule import Profiler
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        with Profiler.timeit(f"{self.name}/PreTuning"):
            t0 = time.perf_counter()
            if self.context is None:
                raise RuntimeError(f"{self.name}.pre_tuning before _initialize_with_tune_context")
            self._reset()
            self.rng = np.random.default_rng(self._seed())
            self.max_trials, self.trials_per_iter = int(max_trials), int(num_trials_per_iter)
            self.space = SearchSpace(DesignSpaces.from_context(self.context, list(design_spaces)))
            self.args_info = ArgInfo.from_entry_func(design_spaces[0].mod, remove_preproc=True)
            self._prepare(cost_model)
            if database is not None:
                self._resume(database)
            self.stats.search_s += time.perf_counter() - t0

    def post_tuning(self) -> None:
        """Nothing to release by default; strategies drop their big per-task structures here."""

    def generate_measure_candidates(self) -> list["MeasureCandidate"] | None:
        from tvm.s_tir.meta_schedule import Profiler

        with Profiler.timeit(f"{self.name}/GenerateMeasureCandidates"):
            t0 = time.perf_counter()
            try:
                q = min(self.trials_per_iter, self.max_trials - self.trials)
                if q <= 0 or self.space is None:
                    return None
                picked = self._propose(q)
                if not picked:
                    logger.info("%s %s: no unmeasured configuration left to propose", self.name, self.stats.task)
                    return None
                self.pending.extend(picked)
                self.trials += len(picked)
                self.stats.proposed += len(picked)
                self.stats.batches += 1
                self.stats.batch_s.append(round(time.perf_counter() - t0, 4))
                return [p[0] for p in picked]
            finally:
                self.stats.search_s += time.perf_counter() - t0

    def notify_runner_results(self, measure_candidates: list["MeasureCandidate"],
                              results: list["RunnerResult"]) -> None:
        assert self.space is not None
        for cand, result in zip(measure_candidates, results):
            match = next((i for i, p in enumerate(self.pending) if p[0].same_as(cand)), None)
            proposal = self.pending.pop(match) if match is not None else None
            config = proposal[1] if proposal is not None else self.space.config_of(cand.sch.trace)
            secs = successful_run_seconds(result.run_secs)
            if result.error_msg or secs is None:
                self.failures.add(config)
                self.stats.failed += 1
            else:
                self._observe(config, median_latency(secs), proposal)
                self.stats.measured += 1

    def clone(self) -> Any:
        new = self._fresh()
        new.family = self.family
        self.family.append(new.stats)
        return new

    # -- counters -------------------------------------------------------------------------

    def total_stats(self) -> Any:
        """The counters summed over this strategy and every clone of it."""
        return type(self.stats).total(self.family)

    # -- hooks ----------------------------------------------------------------------------

    def _prepare(self, cost_model: Any) -> None:
        """Per-task set-up after the search space exists, before the database is read."""

    def _propose(self, q: int) -> list[tuple]:
        """Up to `q` unmeasured configurations as pending tuples (empty: nothing left)."""
        raise NotImplementedError

    def _observe(self, config: Config, latency_s: float, proposal: tuple | None) -> None:
        """A successful measurement (`proposal`: the pending tuple, None for a foreign candidate)."""
        raise NotImplementedError

    def _observe_record(self, config: Config, latency_s: float | None, record: "TuningRecord") -> None:
        """A measurement read from the database (`latency_s` None: it failed); the first of a
        configuration measured twice is the one observed."""
        if latency_s is None:
            self.failures.add(config)
        elif config not in self.observations:
            self._observe(config, latency_s, None)

    def _resumed(self) -> None:
        """Called once the database has been read."""

    def _fresh(self) -> Any:
        """A new MetaSchedule strategy object with the same settings (for `clone`)."""
        raise NotImplementedError

    # -- internals ------------------------------------------------------------------------

    def _seed(self) -> int | None:
        """The settings' seed, else the TuneContext's `rand_state` (MetaSchedule's own seeding)."""
        seed = self.settings.seed
        assert self.context is not None
        if seed is None and self.context.rand_state is not None and int(self.context.rand_state) >= 0:
            seed = int(self.context.rand_state)
        return seed

    def _resume(self, database: "Database") -> None:
        """This workload's records in measurement order: each is avoided, the successful ones observed."""
        assert self.space is not None and self.context is not None
        mod = self.context.mod
        foreign = 0
        for rec in records_in_trial_order(database, mod):
            try:
                config = self.space.config_of(rec.trace)
            except SpaceError:
                foreign += 1  # another design-space structure (other rules): never proposed here anyway
                continue
            self.stats.resumed += 1
            secs = successful_run_seconds(rec.run_secs)
            self._observe_record(config, median_latency(secs) if secs is not None else None, rec)
        self._resumed()
        if self.stats.resumed or foreign:
            logger.info("%s %s: resumed %d records (%d measured, %d failed, %d from other design spaces)", self.name,
                        self.stats.task, self.stats.resumed, len(self.observations), len(self.failures), foreign)


def create_strategy(logic: type[SearchLogic], *args: Any, **kwargs: Any) -> Any:
    """A MetaSchedule search strategy object whose behaviour is `logic`'s."""
    return plugin_class(SEARCH_STRATEGY, logic, logic.name)(*args, **kwargs)
