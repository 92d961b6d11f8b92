"""TVM's own XGBoost cost model as the baseline, fed from dataset records.

`xgb` is MetaSchedule's `XGBModel` on `PerStoreFeature` trained on the k support samples of
the unseen workload (TVM's default cost model; its random warm-up predictions are disabled
so the k samples are really used). `xgb-transfer` starts from the same model trained on the
training workloads' records (`tune.transfer.TransferredXGB`, shared with the tuner), then
learns the k samples, which is how a MetaSchedule user transfers a cost model across workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from metatune.dataset.store import WorkloadStore
from metatune.env.tvm_setup import import_tensor_intrinsics

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext


@dataclass
class RecordTask:
    """Candidates and runner results of one workload, in the form XGBModel consumes."""

    context: "TuneContext"
    candidates: list["MeasureCandidate"]
    results: list[Any]

    def subset(self, idx: Sequence[int]) -> tuple[list["MeasureCandidate"], list[Any]]:
        return [self.candidates[i] for i in idx], [self.results[i] for i in idx]


def record_task(store: WorkloadStore, target: Any) -> RecordTask:
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    import_tensor_intrinsics()
    records = store.records()
    context = TuneContext(mod=records[0].workload.mod if records else store.workload.irmodule(), target=target,
                          task_name=store.workload.family)
    return RecordTask(
        context=context,
        candidates=[r.as_measure_candidate() for r in records],
        results=[RunnerResult(run_secs=[float(x) for x in r.run_secs], error_msg=None) for r in records],
    )


def new_xgb() -> Any:
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    return XGBModel(extractor=PerStoreFeature(), num_warmup_samples=0, adaptive_training=False)


def xgb_predict(model: Any, task: RecordTask, support: Sequence[int], query: Sequence[int]) -> np.ndarray:
    """Update a fresh or transferred model with the support samples, then score the query."""
    if len(support) == 0 and model.booster is None:
        return np.full(len(query), np.nan)  # nothing to learn from: no prediction
    if len(support):
        cands, results = task.subset(support)
        model.update(task.context, cands, results)
    cands, _ = task.subset(query)
    return np.asarray(model.predict(task.context, cands), dtype=np.float64)

