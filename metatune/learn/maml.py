"""Supervised pretraining and MAML meta-training of the cost model (torch.func).

A task is one workload: k support and q query configurations. Labels are log-throughput
standardised with the *support* statistics, exactly what is known when adapting to an
unseen operator. The inner loop is plain gradient descent on the support MSE
(`adapt`), the outer loop Adam on the query MSE after adaptation (both the pairwise rank loss
instead for a model with `rank_scores`); second-order MAML
differentiates through the inner loop, first-order MAML does not. With the embedding frozen
(MetaTune's choice) graph embeddings are computed once and the head is meta-trained on all
tasks of a batch at once with `vmap`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from metatune.cost_model.gcn import CostModel
from metatune.encode.graphs import EncodedWorkload, GraphBuilder, iter_batches
from metatune.learn.config import MAMLConfig, PretrainConfig

Params = dict[str, torch.Tensor]
Sets = list[EncodedWorkload]


class EarlyStopping:
    """Keeps the best model state seen on validation; says when `patience` checks brought nothing."""

    def __init__(self, model: CostModel, patience: int) -> None:
        self.model, self.patience = model, patience
        self.best, self.state, self.stale = math.inf, copy.deepcopy(model.state_dict()), 0

    def should_stop(self, val: float) -> bool:
        if val < self.best - 1e-4:
            self.best, self.state, self.stale = val, copy.deepcopy(self.model.state_dict()), 0
        else:
            self.stale += 1
        return self.stale >= self.patience

    def restore_best(self) -> None:
        self.model.load_state_dict(self.state)


@dataclass
class TrainLog:
    curves: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.curves.setdefault(name, []).append(float(value))


def standardize_by(y: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    std = reference.std() if reference.numel() > 1 else torch.tensor(1.0)
    return (y - reference.mean()) / torch.clamp(std, min=1e-6)


def pairwise_rank_loss(pred: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """AutoTVM §3.2: logistic loss on every ordered pair with different labels (and, given `weight`,
    between two samples of weight 1: padding has weight 0).

    Pairs are weighted rather than selected so the shapes stay fixed under `vmap`.
    """
    sign = torch.sign(y[:, None] - y[None, :])
    pair = sign.abs() if weight is None else sign.abs() * weight[:, None] * weight[None, :]
    losses = torch.nn.functional.softplus(-sign * (pred[:, None] - pred[None, :]))
    return (losses * pair).sum() / pair.sum().clamp(min=1.0)


def task_loss(pred: torch.Tensor, y: torch.Tensor, rank: bool, weight: torch.Tensor | None = None) -> torch.Tensor:
    """MSE or pairwise rank loss; `weight` (1 per sample, 0 per padding) lets tasks of different sizes
    be padded to one shape for `vmap` and still count only their own samples."""
    if rank:
        return pairwise_rank_loss(pred, y, weight)
    if weight is None:
        return torch.mean((pred - y) ** 2)
    return (weight * (pred - y) ** 2).sum() / weight.sum()


# ---------------------------------------------------------------------------------------------
# Pretraining


def pretrain(
    model: CostModel, builder: GraphBuilder, train: Sets, valid: Sets, config: PretrainConfig, seed: int,
    on_epoch: Callable[[int, float, float], None] | None = None,
) -> TrainLog:
    """Supervised regression (or rank loss) on per-workload standardised log-throughput."""
    if config.rank_loss != model.config.rank_scores:
        raise ValueError("pretraining loss and the model's rank_scores disagree: adaptation would use the wrong loss")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    log = TrainLog()
    stopper = EarlyStopping(model, config.patience)
    steps_per_epoch = config.steps_per_epoch
    for epoch in range(config.epochs):
        model.train()
        total = 0.0
        for _ in range(steps_per_epoch):
            chosen = rng.choice(len(train), size=min(config.workloads_per_batch, len(train)), replace=False)
            loss = torch.zeros(())
            for w_idx in chosen:
                w = train[int(w_idx)]
                idx = rng.choice(len(w), size=min(config.graphs_per_workload, len(w)), replace=False)
                pred = model(*builder.batch(w, idx).inputs())
                y = standardize_by(w.log_thr[idx], w.log_thr)
                loss = loss + task_loss(pred, y, config.rank_loss)
            loss = loss / len(chosen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        val = validation_loss(model, builder, valid)
        log.add("pretrain_train_loss", total / steps_per_epoch)
        log.add("pretrain_valid_mse", val)
        if on_epoch:
            on_epoch(epoch, total / steps_per_epoch, val)
        if stopper.should_stop(val):
            break
    stopper.restore_best()
    return log


@torch.no_grad()
def predict_all(model: CostModel, builder: GraphBuilder, w: EncodedWorkload, batch: int = 128) -> torch.Tensor:
    model.eval()
    return torch.cat([model(*builder.batch(w, idx).inputs()) for idx in iter_batches(len(w), batch)])


@torch.no_grad()
def validation_loss(model: CostModel, builder: GraphBuilder, valid: Sets) -> float:
    """Mean per-workload MSE between standardised predictions and standardised labels (no adaptation): a
    measure of ranking (correlation), not of calibration."""
    losses = []
    for w in valid:
        pred = predict_all(model, builder, w)
        losses.append(float(torch.mean((standardize_by(pred, pred) - standardize_by(w.log_thr, w.log_thr)) ** 2)))
    return float(np.mean(losses)) if losses else math.nan


# ---------------------------------------------------------------------------------------------
# MAML


def adaptable_params(model: CostModel, freeze_embedding: bool) -> Params:
    return {n: p for n, p in model.named_parameters() if not (freeze_embedding and n.startswith("embedding."))}


def adapt(
    model: CostModel, params: Params, inputs: tuple[torch.Tensor, ...], y: torch.Tensor,
    lr: float, steps: int, create_graph: bool, module: torch.nn.Module | None = None,
) -> Params:
    """Gradient descent on the support loss the model was trained with (MSE or pairwise rank);
    returns the adapted parameters."""
    target = module if module is not None else model
    rank = model.config.rank_scores

    def support_loss(p: Params) -> torch.Tensor:
        return task_loss(functional_call(target, p, inputs), y, rank)

    for _ in range(steps):
        grads = grad(support_loss)(params)
        params = {n: p - lr * (grads[n] if create_graph else grads[n].detach()) for n, p in params.items()}
    return params


def _sample_task(w: EncodedWorkload, k: int, q: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.as_tensor(rng.permutation(len(w)))
    return perm[:k], perm[k : k + q]


def meta_train(
    model: CostModel, builder: GraphBuilder, train: Sets, valid: Sets, config: MAMLConfig, seed: int,
    on_iter: Callable[[int, float, float | None], None] | None = None,
) -> TrainLog:
    """MAML over workload tasks; early stopping on the validation tasks' query MSE. The weights it starts
    from are validated first (the curve's first point), so meta-training that never improves on them
    keeps them rather than its least bad iteration."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    log = TrainLog()
    eligible = [w for w in train if len(w) >= config.k_support + 2]
    if config.freeze_embedding:
        for p in model.embedding.parameters():
            p.requires_grad_(False)
        embeddings = [embed_all(model, builder, w) for w in eligible]
    params = adaptable_params(model, config.freeze_embedding)
    opt = torch.optim.Adam(params.values(), lr=config.outer_lr)
    stopper = EarlyStopping(model, config.patience)
    start = maml_validation(model, builder, valid, config, seed)
    log.add("maml_valid_query_mse", start)
    if math.isfinite(start):
        stopper.should_stop(start)
    for it in range(config.iterations):
        chosen = rng.choice(len(eligible), size=min(config.tasks_per_batch, len(eligible)), replace=False)
        if config.freeze_embedding:
            loss = _head_task_batch(model, params, [embeddings[i] for i in chosen], [eligible[i] for i in chosen], config, rng)
        else:
            loss = torch.stack([_full_task_loss(model, builder, params, eligible[int(i)], config, rng) for i in chosen]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.add("maml_query_mse", loss.item())
        val = None
        if (it + 1) % config.eval_every == 0:
            val = maml_validation(model, builder, valid, config, seed)
            log.add("maml_valid_query_mse", val)
            if stopper.should_stop(val):
                break
        if on_iter:
            on_iter(it, loss.item(), val)
    stopper.restore_best()
    for p in model.parameters():
        p.requires_grad_(True)
    return log


@torch.no_grad()
def embed_all(model: CostModel, builder: GraphBuilder, w: EncodedWorkload, batch: int = 128) -> torch.Tensor:
    model.eval()
    return torch.cat([model.embedding(*builder.batch(w, idx).inputs()) for idx in iter_batches(len(w), batch)])


def _head_task_batch(model, params, embeddings, tasks, config: MAMLConfig, rng) -> torch.Tensor:
    """All tasks at once: vmap the inner loop and query loss over stacked task tensors. A task with
    fewer than `q_query` query samples is padded to that many with weight 0, so that each task's
    loss is the one `_full_task_loss` computes (its own samples, each once)."""
    hs, ys, hq, yq, wq = [], [], [], [], []
    for h, w in zip(embeddings, tasks):
        s, q = _sample_task(w, config.k_support, config.q_query, rng)
        weight = (torch.arange(config.q_query) < len(q)).float()
        q = torch.cat([q, q.new_full((config.q_query - len(q),), int(q[0]))])
        hs.append(h[s]); hq.append(h[q]); wq.append(weight)
        ys.append(standardize_by(w.log_thr[s], w.log_thr[s])); yq.append(standardize_by(w.log_thr[q], w.log_thr[s]))
    head_params = {n[len("head."):]: p for n, p in params.items()}

    def query_loss(h_s, y_s, h_q, y_q, w_q):
        adapted = adapt(model, head_params, (h_s,), y_s, config.inner_lr, config.inner_steps,
                        create_graph=not config.first_order, module=model.head)
        return task_loss(functional_call(model.head, adapted, (h_q,)), y_q, model.config.rank_scores, w_q)

    stacked = (torch.stack(hs), torch.stack(ys), torch.stack(hq), torch.stack(yq), torch.stack(wq))
    return vmap(query_loss)(*stacked).mean()


def _full_task_loss(model, builder: GraphBuilder, params, w: EncodedWorkload, config: MAMLConfig, rng) -> torch.Tensor:
    s, q = _sample_task(w, config.k_support, config.q_query, rng)
    y_s = standardize_by(w.log_thr[s], w.log_thr[s])
    adapted = adapt(model, params, builder.batch(w, s).inputs(), y_s, config.inner_lr, config.inner_steps,
                    create_graph=not config.first_order)
    pred = functional_call(model, adapted, builder.batch(w, q).inputs())
    return task_loss(pred, standardize_by(w.log_thr[q], w.log_thr[s]), model.config.rank_scores)


def maml_validation(model: CostModel, builder: GraphBuilder, valid: Sets, config: MAMLConfig, seed: int) -> float:
    """Query loss (MSE or rank) after adapting on k support samples, on fixed validation tasks."""
    rng = np.random.default_rng(seed + 1)
    losses = []
    params = {n: p.detach() for n, p in adaptable_params(model, config.freeze_embedding).items()}
    for w in valid:
        if len(w) < config.k_support + 2:
            continue
        s, q = _sample_task(w, config.k_support, config.q_query, rng)
        adapted = adapt(model, params, builder.batch(w, s).inputs(), standardize_by(w.log_thr[s], w.log_thr[s]),
                        config.inner_lr, config.inner_steps, create_graph=False)
        with torch.no_grad():
            pred = functional_call(model, adapted, builder.batch(w, q).inputs())
            losses.append(float(task_loss(pred, standardize_by(w.log_thr[q], w.log_thr[s]), model.config.rank_scores)))
    return float(np.mean(losses)) if losses else math.nan

