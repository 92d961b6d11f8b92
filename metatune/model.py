"""MetaTune's cost model: GCN embedding → ReLU → weighted-sum + max aggregation → 3 FC layers.

A batch is B graphs padded to N nodes: features `x` [B, N, F], a block-diagonal
`edge_index` over the B*N nodes and a mask [B, N] that marks padding (never the
super-graph's placeholder nodes, which are real nodes with zero features). Message passing
is PyG's sparse `GCNConv`: loop graphs are trees, so it costs O(edges), not O(N²).
The model predicts a per-workload standardised log-throughput: only its ordering and
relative scale within a workload are meaningful.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import GCNConv


@dataclass(frozen=True)
class ModelConfig:
    in_dim: int
    hidden: int = 64
    gcn_layers: int = 2
    fc_hidden: int = 64

    def to_json(self) -> dict:
        return asdict(self)


class GraphEmbedding(nn.Module):
    """GCN layers with ReLU, then attention-weighted sum and max over nodes."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        dims = [config.in_dim] + [config.hidden] * config.gcn_layers
        self.convs = nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.gate = nn.Linear(config.hidden, 1)
        self.out_dim = 2 * config.hidden

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, nodes, _ = x.shape
        h = x.reshape(batch * nodes, -1)
        for conv in self.convs:
            h = torch.relu(conv(h, edge_index))
        h = h.reshape(batch, nodes, -1)
        keep = mask.unsqueeze(-1)
        scores = self.gate(h).masked_fill(~keep, float("-inf"))
        weights = torch.softmax(scores, dim=1)
        weighted_sum = (weights * h).sum(dim=1)
        maximum = h.masked_fill(~keep, float("-inf")).amax(dim=1)
        return torch.cat([weighted_sum, maximum], dim=-1)


class RegressionHead(nn.Module):
    """Three fully connected layers with ReLU, as in MAML's regression experiments."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.layers(h).squeeze(-1)


class CostModel(nn.Module):
    """Embedding + head; `forward` maps a dense graph batch to one score per graph."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = GraphEmbedding(config)
        self.head = RegressionHead(self.embedding.out_dim, config.fc_hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(x, edge_index, mask))
