"""The node layout of loop graphs: what each row and edge of the cost model's input means.

A loop graph over `n` positions (the super-graph template's slots, or a program's own loops
in the plain ablation) has node 0 the root, nodes 1..n one `for` node per position and nodes
n+1..2n one `interval` node per position. Edges run parent -> `for` (the root above outermost
positions) and `for` -> `interval`, followed by the same edges reversed so that messages flow
both up and down the nesting. A node's row is its type one-hot, the loop context features
(interval nodes only) and a presence bit: 1 for the program's own nodes, 0 for template
placeholders and padding.

Every producer of model inputs (the encoder, the training batcher, gradient search) builds on
these helpers because trained checkpoints are tied to this exact layout. Tensor helpers import
torch when called, so that reading a template stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from metatune.encode.features import NUM_FEATURES

if TYPE_CHECKING:
    import torch

NODE_TYPES = ("root", "for", "interval")
ROOT = 0
IS_ROOT, IS_FOR, IS_INTERVAL = range(len(NODE_TYPES))  # type one-hot columns
FIRST_FEATURE = len(NODE_TYPES)  # loop features follow the type one-hot
PRESENT = -1  # the presence bit is the last column


def width(num_features: int) -> int:
    """Columns of a node row: type one-hot, `num_features` loop features, presence bit."""
    return len(NODE_TYPES) + num_features + 1


NODE_WIDTH = width(NUM_FEATURES)


def num_nodes(positions: int) -> int:
    return 1 + 2 * positions


def num_edges(positions: int) -> int:
    """Parent and interval edges of every position, in both directions."""
    return 4 * positions


def for_node(position: "torch.Tensor | int") -> "torch.Tensor | int":
    return 1 + position


def interval_node(position: "torch.Tensor | int", positions: "torch.Tensor | int") -> "torch.Tensor | int":
    """The interval node of `position` in a graph of `positions` positions."""
    return 1 + positions + position


def parent_node(parents: "torch.Tensor") -> "torch.Tensor":
    """The node above each position's `for` node: its parent position's, the root for -1."""
    import torch

    return torch.where(parents >= 0, for_node(parents), ROOT)


def edges(parent_nodes: "torch.Tensor", for_nodes: "torch.Tensor", interval_nodes: "torch.Tensor") -> "torch.Tensor":
    """(2, 4n) edge_index: parent -> for and for -> interval edges of n positions, then reversed."""
    import torch

    src = torch.cat([parent_nodes, for_nodes])
    dst = torch.cat([for_nodes, interval_nodes])
    return torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])


def edge_mask(parent_real: "torch.Tensor", present: "torch.Tensor") -> "torch.Tensor":
    """Which columns of `edges(...)` are real: per position, whether its parent edge is the
    program's own nesting edge and whether the position holds a loop."""
    import torch

    return torch.cat([parent_real, present, parent_real, present])


def template_edges(parents: Sequence[int]) -> "torch.Tensor":
    """The edges of a template whose slot i hangs below slot parents[i] (-1: the root)."""
    import torch

    slots = torch.arange(len(parents))
    return edges(parent_node(torch.tensor(parents, dtype=torch.long)), for_node(slots),
                 interval_node(slots, len(parents)))


def batched_edges(graph_edges: "torch.Tensor", graphs: int, nodes: int) -> "torch.Tensor":
    """The edges of one graph of `nodes` nodes repeated over `graphs` graphs numbered in sequence."""
    import torch

    offsets = (torch.arange(graphs) * nodes).repeat_interleave(graph_edges.shape[1])
    return graph_edges.repeat(1, graphs) + offsets


def place(x: "torch.Tensor", graph: "torch.Tensor | slice", for_nodes: "torch.Tensor",
          interval_nodes: "torch.Tensor", features: "torch.Tensor") -> None:
    """Write programs into zeroed node rows x (graphs, nodes, width): every graph's root, and per
    loop its `for` node and its `interval` node with `features`. Loop r belongs to graph
    `graph[r]`; with a slice, every graph has the same loops."""
    x[:, ROOT, IS_ROOT] = 1.0
    x[:, ROOT, PRESENT] = 1.0
    x[graph, for_nodes, IS_FOR] = 1.0
    x[graph, for_nodes, PRESENT] = 1.0
    x[graph, interval_nodes, IS_INTERVAL] = 1.0
    x[graph, interval_nodes, FIRST_FEATURE : FIRST_FEATURE + features.shape[-1]] = features
    x[graph, interval_nodes, PRESENT] = 1.0


def present(x: "torch.Tensor") -> "torch.Tensor":
    """The nodes the readout pools over: the program's own, not placeholders or padding."""
    return x[..., PRESENT] > 0
