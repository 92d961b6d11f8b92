"""Batches measured while other processes kept cores busy: the tuning run says which ones.

On a small machine another process (a test run, a compile, a second tuner) can slow every kernel of a
batch alike, ten times over when TVM's parallel loops wait for a core the other process holds. The
search then learns from latencies that are wrong, and nothing in the run shows it: all candidates of
the batch look slow together. A local run watches the CPU time of everything outside its own process
tree, batch by batch (`metatune.measure.cpu_load`), warns as soon as a batch was disturbed and lists
the disturbed trials in its result, so a comparison built on such a run can be discarded or re-run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from metatune.env.plugin import MEASURE_CALLBACK, plugin_class
from metatune.measure.cpu_load import DISTURBING_CORES, OtherLoad

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DisturbedBatch:
    """Trials `first`..`last` (1-based, of the whole run) were measured while other processes kept
    `cores` cores busy on average."""

    first: int
    last: int
    cores: float

    def to_json(self) -> list[float]:
        return [self.first, self.last, round(self.cores, 2)]


@dataclass
class LoadWatch:
    """Watches the other processes' load per batch; `callback()` is the MeasureCallback that reads it."""

    done: int = 0  # trials in the database before this run's first batch
    limit: float = DISTURBING_CORES
    disturbed: list[DisturbedBatch] = field(default_factory=list)

    def start(self) -> "LoadWatch":
        self._load = OtherLoad((os.getpid(),), descendants=True).start()
        return self

    def batch_done(self, trials: int) -> None:
        """Called after each batch of `trials`: the load since the previous batch ended (its search,
        building and timing)."""
        cores = self._load.cores()
        self.start()  # the next batch's interval begins here
        first, self.done = self.done + 1, self.done + trials
        if cores >= self.limit and trials:
            batch = DisturbedBatch(first, self.done, cores)
            self.disturbed.append(batch)
            logger.warning("trials %d-%d were measured while other processes kept %.1f cores busy: their "
                           "latencies may be too slow", batch.first, batch.last, cores)

    def note(self) -> str | None:
        """One line for the run's notes, when any batch was disturbed."""
        if not self.disturbed:
            return None
        trials = sum(b.last - b.first + 1 for b in self.disturbed)
        worst = max(b.cores for b in self.disturbed)
        return (f"{trials} trials ({len(self.disturbed)} batches) were measured while other processes kept up to "
                f"{worst:.1f} cores busy: their latencies, and the search that learned from them, may be off; "
                "re-run on an idle machine to compare")

    def callback(self) -> Any:
        return plugin_class(MEASURE_CALLBACK, _LoadWatchLogic, "LoadWatch")(self)


def watch_load(runner: str, done: int) -> LoadWatch | None:
    """A started watch for a run that times on this machine (`runner` "local"); None for RPC, whose
    servers time elsewhere."""
    return LoadWatch(done).start() if runner == "local" else None


class _LoadWatchLogic:
    """After every batch, how busy other processes kept the cores while it was searched, built and timed."""

    def __init__(self, watch: LoadWatch) -> None:
        self.watch = watch

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
              runner_results: Any) -> None:
        self.watch.batch_done(len(runner_results))
