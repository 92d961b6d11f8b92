"""MetaTune's cost model: GCN embedding → ReLU → weighted-sum + max aggregation → 3 FC layers.

Two options exist for ablations: `slot_readout` adds a per-slot readout of the super-graph
beside the pooling, and `gcn_layers: 0` drops message passing.

A batch is B graphs padded to N nodes: features `x` [B, N, F], a block-diagonal
`edge_index` over the B*N nodes and a mask [B, N] of the nodes the readout pools over (the
program's own; not padding, and not the super-graph's placeholder nodes, which pass messages
but carry zero features). Message passing is PyG's sparse `GCNConv`: loop graphs are trees,
so it costs O(edges), not O(N²).

Only nodes the readout depends on are computed: with L GCN layers, the pooled nodes and the
nodes within L hops of them (a program fills ~50 of the super-graph's ~1,200 nodes and ~220
lie within 3 hops). The edges are normalised once on the whole graph (PyG's `gcn_norm`, what
`GCNConv` would do in every layer), so degrees still count placeholder neighbours, and the
pooled nodes' embeddings are exactly the whole graph's: a node's value after layer l is only
wrong if a node l hops away is missing, and every node within L hops of a pooled one is kept.
The model predicts a per-workload standardised log-throughput: only its ordering and
relative scale within a workload are meaningful. A model trained with the rank loss
(`rank_scores`) predicts scores whose order alone is meaningful; it must be adapted with the
same loss (maml.adapt reads the flag), since MSE steps on unscaled scores overshoot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import scatter, softmax


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
        # edges arrive normalised (gcn_norm in forward), so the layers do not normalise them again
        self.convs = nn.ModuleList(GCNConv(config.hidden, config.hidden, normalize=False)
                                   for _ in range(config.gcn_layers))
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
        pooled = mask.reshape(-1)
        edge_index, edge_weight = gcn_norm(edge_index, None, batch * nodes, add_self_loops=True)
        # the slot readout reads every node; pooling only the pooled nodes and what reaches them
        kept = torch.ones_like(pooled) if self.slot_readout is not None else \
            reaching(pooled, edge_index, len(self.convs))
        index = kept.nonzero().squeeze(1)
        renumber = torch.full_like(pooled, -1, dtype=torch.long)
        renumber[index] = torch.arange(len(index))
        inside = kept[edge_index[0]] & kept[edge_index[1]]
        edge_index, edge_weight = renumber[edge_index[:, inside]], edge_weight[inside]
        slot = index % nodes
        h = self.input(x.reshape(batch * nodes, -1)[index])
        if self.slot_embedding is not None:
            h = h + self.slot_embedding[slot]
        for conv in self.convs:
            h = torch.relu(conv(h, edge_index, edge_weight))
        read = pooled[index]
        graph, h_read = index[read] // nodes, h[read]
        scores = self.gate(h_read) + (self.slot_bias[slot[read]] if self.slot_bias is not None else 0.0)
        weights = softmax(scores, graph, num_nodes=batch)
        parts = [scatter(weights * h_read, graph, dim_size=batch, reduce="sum"),
                 scatter(h_read, graph, dim_size=batch, reduce="max")]
        if self.slot_readout is not None:
            parts.append(self.slot_readout(h.reshape(batch, nodes, -1)))
        return self.norm(torch.cat(parts, dim=-1))


def reaching(targets: torch.Tensor, edge_index: torch.Tensor, hops: int) -> torch.Tensor:
    """Nodes from which a path of at most `hops` edges leads to a `targets` node (targets included):
    all that `hops` rounds of message passing into the targets read."""
    reached = targets.clone()
    for _ in range(hops):
        step = reached.clone()
        step[edge_index[0][reached[edge_index[1]]]] = True
        if torch.equal(step, reached):
            break
        reached = step
    return reached


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
