"""TVM's own XGBoost cost model as the baseline, fed from dataset records.

`xgb` is MetaSchedule's `XGBModel` on `PerStoreFeature` trained on the k support samples of
the unseen workload (TVM's default cost model; its random warm-up predictions are disabled
so the k samples are really used). `xgb-transfer` starts from the same model trained on the
training workloads' records (`cost_model.xgb_transfer.TransferredXGB`, shared with the tuner), then
learns the k samples, which is how a MetaSchedule user transfers a cost model across workloads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.dataset.store import WorkloadStore
from metatune.env.plugin import FEATURE_EXTRACTOR, plugin_class
from metatune.env.tvm_setup import import_tensor_intrinsics

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext


class _KnownCandidateFeatures:
    """PerStoreFeature of one workload's candidates, extracted once and looked up by object: an
    evaluation has XGBModel learn from and score subsets of the same candidates dozens of times."""

    def __init__(self, features: dict[int, Any]) -> None:
        self.features = features

    def extract_from(self, context: "TuneContext", candidates: list["MeasureCandidate"]) -> list[Any]:
        try:
            return [self.features[c.__chandle__()] for c in candidates]
        except KeyError:
            raise MetatuneError("a candidate that is not one of this task's records was scored") from None


@dataclass
class RecordTask:
    """Candidates and runner results of one workload, in the form XGBModel consumes."""

    context: "TuneContext"
    candidates: list["MeasureCandidate"]
    results: list[Any]

    def subset(self, idx: Sequence[int]) -> tuple[list["MeasureCandidate"], list[Any]]:
        return [self.candidates[i] for i in idx], [self.results[i] for i in idx]

    @functools.cached_property
    def extractor(self) -> Any:
        """A feature extractor for XGBModel that knows every candidate's PerStoreFeature (extracted on first use)."""
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        features = PerStoreFeature().extract_from(self.context, self.candidates)
        known = plugin_class(FEATURE_EXTRACTOR, _KnownCandidateFeatures, "KnownCandidateFeatures")
        return known({c.__chandle__(): f for c, f in zip(self.candidates, features)})


def record_task(store: WorkloadStore, target: Any, candidates: Sequence["MeasureCandidate"] | None = None) -> RecordTask:
    """The workload's records as XGBModel's candidates and results (replayed here unless `candidates`
    holds the replays, in record order)."""
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    import_tensor_intrinsics(target)
    mod = store.tvm_workload().mod if store.num_records else store.workload.irmodule()
    context = TuneContext(mod=mod, target=target, task_name=store.workload.family)
    return RecordTask(
        context=context,
        candidates=list(store.measure_candidates() if candidates is None else candidates),
        results=[RunnerResult(run_secs=secs, error_msg=None) for secs in store.run_secs()],
    )


def new_xgb(extractor: Any = None) -> Any:
    """TVM's default cost model (on PerStoreFeature, or `extractor`), learning from its first sample on."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    return XGBModel(extractor=extractor or PerStoreFeature(), num_warmup_samples=0, adaptive_training=False)


def xgb_predict(model: Any, task: RecordTask, support: Sequence[int], query: Sequence[int]) -> np.ndarray:
    """Update a fresh or transferred model with the support samples, then score the query."""
    if len(support) == 0 and model.booster is None:
        return np.full(len(query), np.nan)  # nothing to learn from: no prediction
    if len(support):
        cands, results = task.subset(support)
        model.update(task.context, cands, results)
    cands, _ = task.subset(query)
    return np.asarray(model.predict(task.context, cands), dtype=np.float64)

