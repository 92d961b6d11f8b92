"""One few-shot evaluation protocol for every cost model, on held-out workloads.

For each held-out workload, each k in `ks` and each repeat, k measured configurations are
drawn as the support set (the same draw for every method) and the rest are the query set.
Each method adapts on the support set and scores the query set; metrics (metatune.learn.metrics)
are averaged over repeats, then reported as the median over workloads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from metatune.cost_model.gcn import CostModel
from metatune.cost_model.xgb import xgb_predict
from metatune.encode.graphs import EncodedWorkload, GraphBuilder
from metatune.learn.config import EvalConfig, MAMLConfig
from metatune.learn.maml import adapt, adaptable_params, embed_all, standardize_by, task_loss
from metatune.learn.metrics import all_metrics, median_defined

if TYPE_CHECKING:
    from metatune.cost_model.xgb import RecordTask

# (workload index, support indices, query indices, repeat seed) -> scores for the query
Method = Callable[[int, np.ndarray, np.ndarray, int], np.ndarray]


@dataclass
class EvalResult:
    """metrics[method][k][metric] = median over workloads; per_workload keeps the detail;
    seconds[method] = wall time the method spent adapting and predicting (what makes a table slow)."""

    metrics: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    per_workload: dict[str, dict[str, dict[str, dict[str, float]]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def support_query(n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    return np.sort(perm[:k]), np.sort(perm[k:])


def gcn_adapter(model: CostModel, builder: GraphBuilder, tasks: Sequence[EncodedWorkload],
                maml: MAMLConfig) -> Method:
    """Adapt a trained GCN on the support set with MAML's inner loop, then predict.

    With a frozen embedding only the head adapts, so each workload's graphs are embedded once
    and every draw and k reuses them.
    """
    if maml.freeze_embedding:
        return _head_adapter(model, builder, tasks, maml)

    def method(t: int, support: np.ndarray, query: np.ndarray, seed: int) -> np.ndarray:
        w = tasks[t]
        params = {n: p.detach() for n, p in adaptable_params(model, maml.freeze_embedding).items()}
        if len(support) >= 2:
            y = standardize_by(w.log_thr[support], w.log_thr[support])
            params = adapt(model, params, builder.batch(w, support).inputs(), y, maml.inner_lr, maml.inner_steps,
                           create_graph=False)
        with torch.no_grad():
            out = torch.func.functional_call(model, params, builder.batch(w, query).inputs())
        return out.numpy().astype(np.float64)

    return method


def _head_adapter(model: CostModel, builder: GraphBuilder, tasks: Sequence[EncodedWorkload],
                  maml: MAMLConfig) -> Method:
    embeddings: dict[int, torch.Tensor] = {}
    base = {n: p.detach() for n, p in model.head.named_parameters()}

    def method(t: int, support: np.ndarray, query: np.ndarray, seed: int) -> np.ndarray:
        w = tasks[t]
        if t not in embeddings:
            embeddings[t] = embed_all(model, builder, w)
        h = embeddings[t]
        params = base
        if len(support) >= 2:
            y = standardize_by(w.log_thr[support], w.log_thr[support])
            params = adapt(model, base, (h[support],), y, maml.inner_lr, maml.inner_steps, create_graph=False,
                           module=model.head)
        with torch.no_grad():
            out = torch.func.functional_call(model.head, params, (h[query],))
        return out.numpy().astype(np.float64)

    return method


def scratch_trainer(template_model: CostModel, builder: GraphBuilder, tasks: Sequence[EncodedWorkload],
                    config: EvalConfig) -> Method:
    """The same GCN, randomly initialised and trained on the k support samples only."""
    return support_trainer(lambda: CostModel(template_model.config), builder, tasks, config.scratch_steps,
                           config.scratch_lr)


def support_trainer(start: Callable[[], CostModel], builder: GraphBuilder, tasks: Sequence[EncodedWorkload],
                    steps: int, lr: float) -> Method:
    """A model from `start()` (seeded by the draw) trained with Adam on the support set: from a random
    initialisation that is learning from scratch, from a checkpoint it is plain fine-tuning."""

    def method(t: int, support: np.ndarray, query: np.ndarray, seed: int) -> np.ndarray:
        torch.manual_seed(seed)
        model = start()
        w = tasks[t]
        if len(support) >= 2:
            opt = torch.optim.Adam(model.parameters(), lr=lr)
            inputs = builder.batch(w, support).inputs()
            y = standardize_by(w.log_thr[support], w.log_thr[support])
            model.train()
            for _ in range(steps):  # the loss the model was trained with (a rank loss for rank scores)
                loss = task_loss(model(*inputs), y, model.config.rank_scores)
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            model.eval()
            return model(*builder.batch(w, query).inputs()).numpy().astype(np.float64)

    return method


def evaluate(tasks: Sequence[EncodedWorkload], methods: dict[str, Method], config: EvalConfig,
             on_step: Callable[[str], None] | None = None) -> EvalResult:
    """Run every method on identical support/query draws and aggregate the metrics."""
    result = EvalResult()
    for t, w in enumerate(tasks):
        for k in config.ks:
            if len(w) < k + 10:
                continue
            draws = [support_query(len(w), k, np.random.default_rng([config.seed, t, k, r])) for r in range(config.repeats)]
            for name, method in methods.items():
                runs = []
                start = time.perf_counter()
                for r, (support, query) in enumerate(draws):
                    pred = method(t, support, query, config.seed + r)
                    if np.all(np.isnan(pred)):
                        continue  # the method cannot predict here (e.g. XGBoost with k = 0)
                    if not np.all(np.isfinite(pred)):  # a model that diverged: not a row to leave out quietly
                        raise ValueError(f"{name} predicted non-finite scores for {w.key} at k = {k} (repeat {r})")
                    runs.append(all_metrics(pred, w.log_thr[query].numpy().astype(np.float64)))
                result.seconds[name] = result.seconds.get(name, 0.0) + time.perf_counter() - start
                if runs:
                    mean = {m: float(np.mean([run[m] for run in runs])) for m in runs[0]}
                    result.per_workload.setdefault(name, {}).setdefault(str(k), {})[w.key] = mean
            if on_step:
                on_step(f"{w.family} k={k}")
    for name, by_k in result.per_workload.items():
        for k, by_w in by_k.items():
            metric_names = next(iter(by_w.values())).keys()
            result.metrics.setdefault(name, {})[k] = {
                m: median_defined([v[m] for v in by_w.values()]) for m in metric_names
            } | {"workloads": len(by_w)}
    return result


def format_table(result: EvalResult, metrics: Sequence[str] = ("pairwise_acc", "mse", "mse_d", "peak@1", "peak@5")) -> str:
    """Markdown: one row per method and k, medians over held-out workloads."""
    lines = ["| method | k | " + " | ".join(metrics) + " | workloads |", "|---|---|" + "---|" * (len(metrics) + 1)]
    for name, by_k in result.metrics.items():
        for k, vals in sorted(by_k.items(), key=lambda kv: int(kv[0])):
            cells = " | ".join(f"{vals[m]:.3f}" for m in metrics)
            lines.append(f"| {name} | {k} | {cells} | {int(vals['workloads'])} |")
    return "\n".join(lines)


def xgb_method(record_tasks: Sequence["RecordTask"], start: Callable[[object], object]) -> Method:
    """TVM's XGBModel, started fresh (`xgb`) or from a transfer model (`xgb-transfer`), given the feature
    extractor to use; each workload's PerStoreFeature is extracted once for all its draws."""

    def method(t: int, support: np.ndarray, query: np.ndarray, seed: int) -> np.ndarray:
        np.random.seed(seed)
        task = record_tasks[t]
        return xgb_predict(start(task.extractor), task, support, query)

    return method
