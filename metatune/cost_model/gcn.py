"""MetaTune's cost model: GCN embedding → ReLU → weighted-sum + max aggregation → 3 FC layers.

Two options exist for ablations: `slot_readout` adds a per-slot readout of the super-graph
beside the pooling, and `gcn_layers: 0` drops message passing.

A batch is B graphs padded to N nodes: features `x` [B, N, F], a block-diagonal
`edge_index` over the B*N nodes and a mask [B, N] that marks padding (never the
super-graph's placeholder nodes, which are real nodes with zero features). Message passing
is PyG's sparse `GCNConv`: loop graphs are trees, so it costs O(edges), not O(N²).
The model predicts a per-workload standardised log-throughput: only its ordering and
relative scale within a workload are meaningful. A model trained with the rank loss
(`rank_scores`) predicts scores whose order alone is meaningful; it must be adapted with the
same loss (meta.adapt reads the flag), since MSE steps on unscaled scores overshoot.
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
    gcn_layers: int = 2  # 0 = no message passing (an ablation: each loop seen alone)
    fc_hidden: int = 64
    num_positions: int = 0  # super-graph node count: node i is always template slot i; 0 = plain graphs
    rank_scores: bool = False  # trained with the pairwise rank loss: scores order configurations, no scale
    slot_readout: int = 0  # super-graph only: per-slot width of the aligned readout (0 = pooling alone)

    def to_json(self) -> dict:
        return asdict(self)


class GraphEmbedding(nn.Module):
    """GCN layers with ReLU, then weighted-sum and max aggregation over nodes.

    On the super-graph every node index is a fixed template slot ("main block / spatial axis 1 /
    tile level 2"), which a GCN alone cannot tell apart. The slot identity enters twice: a
    learned embedding per slot added to the node input, and a learned per-slot bias in the
    weighted-sum's attention. This is what the shared template buys over plain loop graphs.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input = nn.Linear(config.in_dim, config.hidden)
        self.convs = nn.ModuleList(GCNConv(config.hidden, config.hidden) for _ in range(config.gcn_layers))
        self.gate = nn.Linear(config.hidden, 1)
        self.slot_embedding = nn.Parameter(torch.zeros(config.num_positions, config.hidden)) if config.num_positions else None
        self.slot_bias = nn.Parameter(torch.zeros(config.num_positions, 1)) if config.num_positions else None
        self.out_dim = 2 * config.hidden
        self.slot_readout = SlotReadout(config) if config.slot_readout and config.num_positions else None
        if self.slot_readout is not None:
            self.out_dim += self.slot_readout.out_dim
        # Unit-scale embeddings keep the head's gradients, and so few-step adaptation, well scaled.
        self.norm = nn.LayerNorm(self.out_dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, nodes, _ = x.shape
        h = self.input(x)
        if self.slot_embedding is not None:
            h = h + self.slot_embedding
        h = h.reshape(batch * nodes, -1)
        for conv in self.convs:
            h = torch.relu(conv(h, edge_index))
        h = h.reshape(batch, nodes, -1)
        keep = mask.unsqueeze(-1)
        scores = self.gate(h) + (self.slot_bias if self.slot_bias is not None else 0.0)
        scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.softmax(scores, dim=1)
        weighted_sum = (weights * h).sum(dim=1)
        maximum = h.masked_fill(~keep, float("-inf")).amax(dim=1)
        parts = [weighted_sum, maximum]
        if self.slot_readout is not None:
            parts.append(self.slot_readout(h))
        return self.norm(torch.cat(parts, dim=-1))


class SlotReadout(nn.Module):
    """Reads the super-graph slot by slot instead of pooling it away.

    Pooling mixes "tile level 2 of the main block's first spatial axis" with every other node.
    On the super-graph node i is always template slot i, so each node can be projected to a
    few numbers and the concatenation over all slots read by one linear layer, which keeps
    *where* in the loop nest a length or an annotation sits. Plain loop graphs have no
    aligned slots and cannot use it.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.project = nn.Linear(config.hidden, config.slot_readout)
        self.out_dim = 2 * config.hidden
        self.read = nn.Linear(config.num_positions * config.slot_readout, self.out_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.read(torch.relu(self.project(h)).flatten(1)))


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
