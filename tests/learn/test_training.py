"""The cost model really learns: pretraining lowers the loss, and MAML's adaptation on a few
support samples improves ranking on tasks whose structure is known."""

import numpy as np
import pytest
import torch

from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.encode.graphs import EncodedWorkload, FeatureStats, GraphBuilder
from metatune.encode.supergraph import Template
from metatune.learn.config import EvalConfig, MAMLConfig, PretrainConfig
from metatune.learn.evaluate import evaluate, gcn_adapter
from metatune.learn.maml import adapt, meta_train, pairwise_rank_loss, pretrain
from metatune.learn.metrics import pairwise_accuracy, peak_score


@pytest.fixture(scope="module")
def template():
    return Template.load()


def synthetic_workload(template, key: str, weights: np.ndarray, rng, graphs: int = 64, loops: int = 8) -> EncodedWorkload:
    """Programs on fixed slots whose speed is a known linear function of two loop features."""
    f = len(template.features)
    slots = torch.arange(loops)
    feats, ptr, y = [], [0], []
    for _ in range(graphs):
        x = torch.zeros(loops, f)
        x[0, 0], x[1, 1] = (float(v) for v in rng.normal(size=2))
        feats.append(x)
        ptr.append(ptr[-1] + loops)
        y.append(float(weights[0] * x[0, 0] + weights[1] * x[1, 1]))
    return EncodedWorkload(key, "dense", "train", torch.cat(feats), slots.repeat(graphs),
                           torch.arange(-1, loops - 1).repeat(graphs), torch.tensor(ptr), torch.tensor(y))


def tasks(template, n: int, seed: int):
    """Each task's speed is +f or -f of the same loop features: the sign is the task's secret."""
    rng = np.random.default_rng(seed)
    signs = np.resize([1.0, -1.0], n)
    return [synthetic_workload(template, f"t{seed}-{i}", s * np.array([1.0, 0.5]), rng) for i, s in enumerate(signs)]


def small_model(builder, template, rank_scores: bool = False, gcn_layers: int = 1, slot_readout: int = 0):
    torch.manual_seed(0)
    return CostModel(ModelConfig(in_dim=builder.width, hidden=16, gcn_layers=gcn_layers, fc_hidden=16,
                                 num_positions=template.num_nodes, rank_scores=rank_scores, slot_readout=slot_readout))


@pytest.mark.parametrize("gcn_layers, slot_readout", [(1, 0), (1, 4), (0, 4)])
def test_pretraining_loss_falls(template, gcn_layers, slot_readout):
    rng = np.random.default_rng(0)
    train = [synthetic_workload(template, f"w{i}", np.array([1.0, 0.5]), rng) for i in range(4)]
    valid = [synthetic_workload(template, "v", np.array([1.0, 0.5]), rng)]
    builder = GraphBuilder(template, "supergraph", FeatureStats.fit(train))
    model = small_model(builder, template, gcn_layers=gcn_layers, slot_readout=slot_readout)
    assert model.embedding.out_dim == (64 if slot_readout else 32)
    log = pretrain(model, builder, train, valid, PretrainConfig(epochs=8, steps_per_epoch=10, lr=1e-2,
                   workloads_per_batch=4, graphs_per_workload=16, patience=8), seed=0)
    curve = log.curves["pretrain_valid_mse"]
    assert min(curve) < 0.5 * curve[0], curve


@pytest.mark.parametrize("rank_loss", [False, True])
def test_maml_adaptation_improves_ranking(template, rank_loss):
    """Tasks differ by an unknown sign: without adaptation no model ranks a new task better than
    chance on average, after k=16 support samples the meta-trained model must (with the MSE or
    the rank loss in both loops)."""
    train, valid, test = tasks(template, 12, 1), tasks(template, 3, 2), tasks(template, 4, 3)
    builder = GraphBuilder(template, "supergraph", FeatureStats.fit(train))
    model = small_model(builder, template, rank_scores=rank_loss)
    # lr 3e-3: at 1e-2 this 16-wide model can lose every ReLU in pretraining (constant output)
    pretrain(model, builder, train, valid, PretrainConfig(epochs=6, steps_per_epoch=10, lr=3e-3,
             workloads_per_batch=6, graphs_per_workload=16, rank_loss=rank_loss), seed=0)
    maml = MAMLConfig(k_support=16, q_query=32, tasks_per_batch=4, inner_lr=0.3, inner_steps=5, outer_lr=3e-3,
                      iterations=400, eval_every=100, patience=100, freeze_embedding=True)
    meta_train(model, builder, train, valid, maml, seed=0)
    result = evaluate(test, {"maml": gcn_adapter(model, builder, test, maml)},
                      EvalConfig(ks=(0, 16), repeats=2, methods=("maml",)))
    zero_shot = result.metrics["maml"]["0"]["pairwise_acc"]
    adapted = result.metrics["maml"]["16"]["pairwise_acc"]
    assert adapted > 0.75 and adapted > zero_shot + 0.1, (zero_shot, adapted)


def test_meta_training_that_never_beats_the_weights_it_started_from_keeps_them(template, monkeypatch):
    """The starting weights are validated first: an outer loop that only makes them worse is undone."""
    import copy

    from metatune.learn import maml as maml_module

    train, valid = tasks(template, 6, 1), tasks(template, 3, 2)
    builder = GraphBuilder(template, "supergraph", FeatureStats.fit(train))
    model = small_model(builder, template)
    before = copy.deepcopy(model.state_dict())
    scores = iter([0.5, 0.9, 0.8])  # the start, then two validations of meta-trained weights
    monkeypatch.setattr(maml_module, "maml_validation", lambda *args: next(scores))
    config = MAMLConfig(k_support=16, q_query=32, tasks_per_batch=4, inner_lr=0.3, inner_steps=1, outer_lr=1e-2,
                        iterations=20, eval_every=10, patience=5, freeze_embedding=True)
    log = meta_train(model, builder, train, valid, config, seed=0)
    assert log.curves["maml_valid_query_mse"] == [0.5, 0.9, 0.8]
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_metrics_on_known_orderings():
    truth = np.array([1.0, 2.0, 3.0, 4.0])
    assert pairwise_accuracy(truth, truth) == 1.0
    assert pairwise_accuracy(-truth, truth) == 0.0
    assert pairwise_accuracy(np.zeros(4), truth) == 0.5  # a constant predictor is a coin flip, not always wrong
    assert pairwise_accuracy(np.array([1.0, 1.0, 3.0, 4.0]), truth) == pytest.approx(5.5 / 6)  # one pair of six tied
    assert peak_score(truth, truth, 1) == 1.0
    assert peak_score(-truth, truth, 1) == pytest.approx(2.0 ** (1.0 - 4.0))


def test_rank_loss_orders_pairs_and_ignores_ties():
    y = torch.tensor([0.0, 1.0, 2.0, 2.0])
    right, wrong = 10.0 * y, -10.0 * y
    assert pairwise_rank_loss(right, y) < 1e-3 < pairwise_rank_loss(wrong, y)
    assert pairwise_rank_loss(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])) == 0.0  # only a tie
    preds, labels = torch.randn(3, 8), torch.randn(3, 8)
    batched = torch.func.vmap(pairwise_rank_loss)(preds, labels)
    assert torch.allclose(batched, torch.stack([pairwise_rank_loss(p, t) for p, t in zip(preds, labels)]))


@pytest.mark.parametrize("rank_scores", [False, True])
def test_adaptation_uses_the_loss_the_model_was_trained_with(template, rank_scores):
    """Every caller of `adapt` (evaluation, the tuner) gets the model's own loss: the rank loss
    ignores the labels' scale and offset, MSE does not."""
    rng = np.random.default_rng(0)
    w = synthetic_workload(template, "w", np.array([1.0, 0.5]), rng, graphs=16)
    builder = GraphBuilder(template, "supergraph", FeatureStats.fit([w]))
    model = small_model(builder, template, rank_scores=rank_scores)
    inputs = builder.batch(w, range(16)).inputs()
    head = {n: p.detach() for n, p in model.head.named_parameters()}
    h = model.embedding(*inputs).detach()
    a = adapt(model, head, (h,), w.log_thr, 0.1, 3, create_graph=False, module=model.head)
    b = adapt(model, head, (h,), 10.0 * w.log_thr + 3.0, 0.1, 3, create_graph=False, module=model.head)
    same = all(torch.allclose(a[n], b[n]) for n in a)
    assert same == rank_scores


def test_subset_keeps_the_chosen_programs_intact(template):
    w = synthetic_workload(template, "w", np.array([1.0, 0.5]), np.random.default_rng(0), graphs=10)
    builder = GraphBuilder(template, "supergraph")
    part = w.subset([7, 2, 5])
    assert len(part) == 3 and part.ptr.tolist() == [0, 8, 16, 24]
    assert torch.equal(part.log_thr, w.log_thr[[7, 2, 5]])
    assert torch.equal(builder.batch(part, [0, 1, 2]).x, builder.batch(w, [7, 2, 5]).x)


def test_a_meta_training_that_would_never_validate_is_refused():
    """It keeps its best validated weights: never validating, it would silently keep the pretrained ones."""
    with pytest.raises(ValueError, match=r"iterations \(20\) must be at least eval_every \(25\)"):
        MAMLConfig(iterations=20, eval_every=25)
    with pytest.raises(ValueError, match="eval_every"):
        MAMLConfig(eval_every=0)


def test_evaluation_leaves_out_what_cannot_predict_and_stops_at_a_diverged_model(template):
    w = synthetic_workload(template, "w", np.array([1.0, 0.5]), np.random.default_rng(0))
    config = EvalConfig(ks=(0, 8), repeats=1)
    half_known = evaluate([w], {"xgb-like": lambda t, s, q, seed: np.full(len(q), np.nan) if len(s) == 0
                                else np.arange(len(q), dtype=np.float64)}, config)
    assert list(half_known.metrics["xgb-like"]) == ["8"]  # no row at k = 0, where it has nothing to learn from
    with pytest.raises(ValueError, match="non-finite scores for w at k = 0"):
        evaluate([w], {"diverged": lambda t, s, q, seed: np.where(np.arange(len(q)) == 0, np.inf, 1.0)}, config)


@pytest.mark.parametrize("rank_loss", [False, True])
@pytest.mark.parametrize("graphs", [20, 64])  # 20: fewer than k_support + q_query, so the query set is short
def test_both_meta_training_paths_give_a_task_the_same_loss(template, rank_loss, graphs):
    """With the embedding frozen, MAML adapts the head on stacked tasks under `vmap`, where a short query
    set must be padded: the padding counts for nothing, so a task's loss is what the unstacked path gives."""
    from metatune.learn.maml import _full_task_loss, _head_task_batch, embed_all

    rng = np.random.default_rng(0)
    workload = synthetic_workload(template, "w", np.array([1.0, 0.5]), rng, graphs=graphs)
    builder = GraphBuilder(template, "supergraph", FeatureStats.fit([workload]))
    model = small_model(builder, template, rank_scores=rank_loss).eval()
    config = MAMLConfig(k_support=8, q_query=32, inner_lr=0.3, inner_steps=3, freeze_embedding=True)
    head = {name: p for name, p in model.named_parameters() if name.startswith("head.")}
    stacked = _head_task_batch(model, head, [embed_all(model, builder, workload)], [workload], config,
                               np.random.default_rng(1))
    alone = _full_task_loss(model, builder, head, workload, config, np.random.default_rng(1))
    assert torch.allclose(stacked, alone, rtol=1e-4, atol=1e-6), (float(stacked), float(alone))
