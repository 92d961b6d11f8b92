"""MetaTuneCostModel: the meta-trained GCN as a MetaSchedule cost model, adapted online.

Before any measurement of a workload it predicts with the meta-learned initialisation
(zero-shot). Each `update()` re-runs MAML's inner loop from that initialisation on the successful
measurements of the workload so far (the latest MAX_SUPPORT) — the adaptation MAML trained it for — so the
model never drifts away from the meta-learned prior through accumulated updates. Failed
measurements carry no latency: they are counted and excluded from adaptation (the search
strategy never proposes a measured configuration again).
"""

from __future__ import annotations

import collections
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from metatune.encode.graphs import EncodedWorkload, concat, encode_programs, iter_batches, log_throughput
from metatune.encode.supergraph import GraphEncoder
from metatune.env.plugin import COST_MODEL, plugin_class
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.maml import adapt, adaptable_params, standardize_by
from metatune.measure.measurer import successful_run_seconds

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

logger = logging.getLogger(__name__)

MAX_SUPPORT = 256  # the most recent successful measurements the inner loop adapts on (its cost grows with them)


@dataclass
class _WorkloadState:
    """What the model knows about one workload: its measured programs and adapted weights."""

    measured: EncodedWorkload | None = None
    failures: int = 0
    params: dict[str, torch.Tensor] | None = None


def _workload_key(context: "TuneContext") -> str:
    import tvm_ffi

    return str(tvm_ffi.structural_hash(context.mod))


def _speed(run_secs: Any) -> float:
    """log2(1 / median latency): log-throughput up to the workload's constant FLOP count,
    which per-workload standardisation removes anyway."""
    return log_throughput(1e9, [float(x) for x in run_secs])


class _MetaTuneCostModelLogic:
    """A zoo checkpoint adapted to each workload by MAML's inner loop on its measurements."""

    def __init__(self, trained: TrainedModel) -> None:
        self.trained = trained
        self.encoder = GraphEncoder(trained.builder.template)
        self.states: dict[str, _WorkloadState] = {}
        # BatchBO re-scores its persistent candidate pool after every update: encodings are
        # cached per scheduled module (the cache keeps the module alive, so its handle is unique).
        self._encodings: collections.OrderedDict[int, tuple[Any, EncodedWorkload]] = collections.OrderedDict()
        self.encode_seconds = 0.0
        self._base = {n: p.detach() for n, p in adaptable_params(trained.model, trained.maml.freeze_embedding).items()}

    # -- MetaSchedule interface -----------------------------------------------------------

    def update(self, context: "TuneContext", candidates: list["MeasureCandidate"],
               results: list["RunnerResult"]) -> None:
        import time

        state = self._state(context)
        ok = [(c, r) for c, r in zip(candidates, results)
              if r.error_msg is None and successful_run_seconds(r.run_secs) is not None]
        state.failures += len(candidates) - len(ok)
        if not ok:
            return
        t0 = time.perf_counter()
        fresh = encode_programs(self.encoder, [c.sch for c, _ in ok], "", "", "tune",
                                [_speed(r.run_secs) for _, r in ok])
        self.encode_seconds += time.perf_counter() - t0
        state.measured = fresh if state.measured is None else concat([state.measured, fresh])
        state.params = self._adapt(state.measured)

    def predict(self, context: "TuneContext", candidates: list["MeasureCandidate"]) -> np.ndarray:
        import time

        if not candidates:
            return np.zeros(0)
        params = self.adapted_params(context)
        t0 = time.perf_counter()
        encoded = self._encode([c.sch for c in candidates])
        self.encode_seconds += time.perf_counter() - t0
        out = []
        with torch.no_grad():
            for idx in iter_batches(len(encoded), 128):
                batch = self.trained.builder.batch(encoded, idx)
                out.append(torch.func.functional_call(self.trained.model, params, batch.inputs()))
        return torch.cat(out).numpy().astype(np.float64)

    def save(self, path: str) -> None:
        """Measured programs per workload (safetensors) + counters (JSON); weights are re-adapted on load."""
        from safetensors.torch import save_file

        tensors, meta = {}, {}
        for key, st in self.states.items():
            meta[key] = {"failures": st.failures, "measured": st.measured is not None}
            if st.measured is not None:
                for name in ("features", "slots", "parents", "ptr", "log_thr"):
                    tensors[f"{key}.{name}"] = getattr(st.measured, name).contiguous()
        save_file(tensors, path, metadata={"states": json.dumps(meta)})

    def load(self, path: str) -> None:
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(path, "pt") as f:
            meta = json.loads((f.metadata() or {}).get("states", "{}"))
        tensors = load_file(path)
        self.states = {}
        for key, info in meta.items():
            st = _WorkloadState(failures=info["failures"])
            if info["measured"]:
                st.measured = EncodedWorkload(key, "", "tune", *(tensors[f"{key}.{n}"] for n in
                                                                 ("features", "slots", "parents", "ptr", "log_thr")))
                st.params = self._adapt(st.measured)
            self.states[key] = st

    # -- internals ------------------------------------------------------------------------

    def _encode(self, schedules: list[Any], cache_size: int = 8192) -> EncodedWorkload:
        parts = []
        for sch in schedules:
            mod = sch.mod
            key = hash(mod)
            hit = self._encodings.get(key)
            if hit is None or not hit[0].same_as(mod):
                hit = (mod, encode_programs(self.encoder, [sch], "", "", "tune", [0.0]))
                self._encodings[key] = hit
                if len(self._encodings) > cache_size:
                    self._encodings.popitem(last=False)
            else:
                self._encodings.move_to_end(key)
            parts.append(hit[1])
        return concat(parts)

    def adapted_params(self, context: "TuneContext") -> dict[str, torch.Tensor]:
        """The adaptable weights for `context`'s workload: adapted to its measurements once it has
        enough, else the meta-learned ones (what `predict` uses; gradient search descends through them)."""
        state = self._state(context)
        return state.params if state.params is not None else self._base

    def _state(self, context: "TuneContext") -> _WorkloadState:
        key = _workload_key(context)
        if key not in self.states:
            self.states[key] = _WorkloadState()
        return self.states[key]

    def _adapt(self, measured: EncodedWorkload) -> dict[str, torch.Tensor] | None:
        """MAML's inner loop from the meta-learned weights on the most recent measurements."""
        n = len(measured)
        if n < 2:
            return None
        idx = torch.arange(max(0, n - MAX_SUPPORT), n)
        y = standardize_by(measured.log_thr[idx], measured.log_thr[idx])
        batch = self.trained.builder.batch(measured, idx)
        maml = self.trained.maml
        return adapt(self.trained.model, dict(self._base), batch.inputs(), y, maml.inner_lr, maml.inner_steps,
                     create_graph=False)


def MetaTuneCostModel(trained: TrainedModel) -> Any:  # noqa: N802 (creates the TVM class)
    """A MetaSchedule cost model: `trained` adapted online to each workload it measures."""
    return plugin_class(COST_MODEL, _MetaTuneCostModelLogic, "MetaTuneCostModel")(trained)
