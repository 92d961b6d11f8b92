"""A model of one task learnt from that task's measurements alone: BatchBO's second prior.

Why: the meta-learned cost model adapts little to a task's own samples (from k = 16 to 150, the
pairwise accuracy on held-out workloads rises by <= 0.007), while TVM's XGBModel on PerStoreFeature,
trained on a few hundred of a task's measurements, ranks that task well: that is how TVM's default
tuner catches up at large budgets. BatchBO puts both scores in its GP's mean (`c + w1 meta + w2 task`)
and fits the weights by marginal likelihood on scores each point had *before* it was measured, so
the task model takes over exactly as far as its predictions have earned it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from metatune.cost_model.xgb import new_xgb
from metatune.env.plugin import FEATURE_EXTRACTOR, plugin_class

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult


class _RememberedFeatures:
    """PerStoreFeature per candidate object, extracted once: a pool entry is scored every batch.

    Keyed by the object's handle; the object itself is held with its features, so a handle
    cannot be freed and reused by another candidate while its entry exists."""

    def __init__(self) -> None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        self.extractor = PerStoreFeature()
        self.known: dict[int, tuple["MeasureCandidate", Any]] = {}

    def extract_from(self, context: "TuneContext", candidates: list["MeasureCandidate"]) -> list[Any]:
        missing = {c.__chandle__(): c for c in candidates if c.__chandle__() not in self.known}
        if missing:
            features = self.extractor.extract_from(context, list(missing.values()))
            self.known.update((h, (c, f)) for (h, c), f in zip(missing.items(), features))
        return [self.known[c.__chandle__()][1] for c in candidates]

    def retain(self, candidates: Iterable["MeasureCandidate"]) -> None:
        """Forget every candidate but these (the pool's current entries)."""
        keep = {c.__chandle__() for c in candidates}
        self.known = {h: v for h, v in self.known.items() if h in keep}


class TaskModel:
    """TVM's XGBModel (no random warm-up) on one task's successful and failed measurements."""

    def __init__(self, min_samples: int = 8) -> None:
        self.features = plugin_class(FEATURE_EXTRACTOR, _RememberedFeatures, "RememberedFeatures")()
        self.model = new_xgb(self.features)
        self.min_samples = min_samples
        self.samples = 0

    @property
    def ready(self) -> bool:
        """Trained on enough samples for its scores to mean something."""
        return self.samples >= self.min_samples and self.model.booster is not None

    def update(self, context: "TuneContext", candidates: list["MeasureCandidate"],
               results: list["RunnerResult"]) -> None:
        if candidates:
            self.model.update(context, candidates, results)
            self.samples += len(candidates)

    def predict(self, context: "TuneContext", candidates: list["MeasureCandidate"]) -> np.ndarray:
        """Scores (higher = faster); zeros until `ready` (a flat column the GP's weight ignores)."""
        if not self.ready or not candidates:
            return np.zeros(len(candidates))
        scores = np.asarray(self.model.predict(context, candidates), dtype=np.float64).reshape(-1)
        self.features.retain(candidates)  # the pool is scored whole: older candidates are gone from it
        return scores
