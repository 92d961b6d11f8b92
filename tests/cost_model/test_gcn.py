"""The GCN computes only the nodes its readout depends on, and gets exactly what the whole graph gives."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GCNConv

from metatune.dataset.store import DatasetStore
from metatune.encode.graphs import GraphBuilder, encode_store
from metatune.encode.supergraph import GraphEncoder
from metatune.fileio import REPO_ROOT
from metatune.learn.checkpoint import TrainedModel

ZOO_CHECKPOINT = REPO_ROOT / "zoo" / "x86_64-sapphirerapids-2c" / "v5" / "model.safetensors"
SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


def whole_graph_forward(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """The model's function computed on every node: PyG's normalising GCNConv in each layer, and
    masked dense pooling (an independent reference with the model's weights)."""
    emb = model.embedding
    batch, nodes, _ = x.shape
    h = emb.input(x)
    if emb.slot_embedding is not None:
        h = h + emb.slot_embedding
    h = h.reshape(batch * nodes, -1)
    for conv in emb.convs:
        reference = GCNConv(conv.in_channels, conv.out_channels)  # normalize=True: gcn_norm in every call
        reference.load_state_dict(conv.state_dict())
        h = torch.relu(reference(h, edge_index))
    h = h.reshape(batch, nodes, -1)
    keep = mask.unsqueeze(-1)
    scores = (emb.gate(h) + (emb.slot_bias if emb.slot_bias is not None else 0.0)).masked_fill(~keep, float("-inf"))
    pooled = [(torch.softmax(scores, dim=1) * h).sum(dim=1), h.masked_fill(~keep, float("-inf")).amax(dim=1)]
    return model.head(emb.norm(torch.cat(pooled, dim=-1)))


@pytest.fixture(scope="module")
def programs():
    trained = TrainedModel.load(ZOO_CHECKPOINT)
    stores = [s for s in DatasetStore(SHIPPED) if s.sealed]
    conv = next(s for s in stores if s.workload.family == "conv2d")
    dense = next(s for s in stores if s.workload.family == "dense")
    encoder = GraphEncoder(trained.builder.template)
    return trained, [encode_store(store, encoder).subset(range(12)) for store in (conv, dense)]


@pytest.mark.parametrize("mode", ["supergraph", "plain"])
def test_pooled_nodes_are_exactly_the_whole_graphs(programs, mode):
    trained, workloads = programs
    model = trained.model.eval()
    if mode == "plain":  # the same weights on plain loop graphs (no slot embedding)
        model = type(model)(type(model.config)(**{**model.config.to_json(), "num_positions": 0})).eval()
    builder = GraphBuilder(trained.builder.template, mode, trained.builder.stats)
    for w in workloads:
        batch = builder.batch(w, range(len(w)))
        with torch.no_grad():
            fast, whole = model(*batch.inputs()), whole_graph_forward(model, *batch.inputs())
        assert torch.allclose(fast, whole, rtol=1e-4, atol=1e-5), (w.key, (fast - whole).abs().max())
        assert fast.std() > 1e-3  # the programs are told apart: the comparison is not of constants


def test_gradients_reach_the_features_as_on_the_whole_graph(programs):
    """Gradient search differentiates the score with respect to the loop features."""
    trained, workloads = programs
    batch = trained.builder.batch(workloads[0], range(4))
    grads = []
    for forward in (trained.model, lambda *a: whole_graph_forward(trained.model, *a)):
        x = batch.x.clone().requires_grad_(True)
        forward(x, batch.edge_index, batch.mask).sum().backward()
        grads.append(x.grad)
    assert torch.allclose(grads[0], grads[1], rtol=1e-3, atol=1e-5)
    assert grads[0].abs().sum() > 0
