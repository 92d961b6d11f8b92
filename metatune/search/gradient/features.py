"""The GCN's input as a torch function of log tile factors, for one design-space variant.

For a final loop structure (`postproc.Rewrite`), every loop context feature of the encoder
(encode/features.py) is `log2(1 + X)` with X a product of loop extents or a stride, so with
`L = ln X` it is `softplus(L) / ln 2`, smooth in the log factors:

* length, top-down and bottom-up products, touch counts: sums of log extents over fixed sets
  of loops (a loop's ancestors; the loops below it in its block; those of them that move a
  buffer's index);
* reuse: bottom-up minus touch; stride: a constant plus the log factors of the inner tiles;
* kind, unroll step and explicit flag: constants of the structure and the unroll decision.

Only two selections are piecewise constant, both decided by hard comparisons that are exact
at integer configurations and carry no gradient: the loop structure itself (`postproc`), and
which constituent of a fused loop gives its stride (the innermost one whose extent is not 1,
as for TVM's `floordiv`/`floormod` fused bindings). No smoothing is applied elsewhere: the
features equal the encoder's at every valid integer configuration. The one clamp: a region
extent (compute-at span) is kept >= 1 at points outside the constraints, where factors < 1
would make it meaningless.

Node features are laid out as `GraphBuilder` lays them out for the cost model (encode/layout.py,
with the features standardised), so the GCN runs on them unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from metatune.encode import layout
from metatune.encode.features import NUM_BUFFER_SLOTS, NUM_FEATURES, buffer_slots, owners
from metatune.encode.graphs import FeatureStats
from metatune.encode.loopgraph import PARALLEL, SERIAL, UNROLLED, VECTORIZED
from metatune.encode.supergraph import (  # the encoder's own slot rules
    EncodedProgram,
    GraphEncoder,
    RoleCache,
    TemplateMismatch,
)
from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.postproc import UNIT, FinalProgram, Rewrite
from metatune.search.gradient.program import Mono, Span, SymAccess, SymbolicProgram

if TYPE_CHECKING:
    from metatune.encode.graphs import GraphBuilder

_KIND_COLUMN = {SERIAL: 1, PARALLEL: 2, VECTORIZED: 3, UNROLLED: 4}
_BUF0 = 9  # first buffer column (after the 9 loop features)
_LN2 = math.log(2.0)
DTYPE = torch.float64


def _log2_1p_exp(log_x: torch.Tensor) -> torch.Tensor:
    """log2(1 + exp(log_x)): the encoder's log2(1 + x) of a positive quantity given in log space."""
    return torch.nn.functional.softplus(log_x) / _LN2


def _mono_rows(monos: Sequence[Mono], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(constants (n,), 0/1 matrix (n, width)) so that log values = constants + y @ matrix.T."""
    const = torch.tensor([m.logc for m in monos], dtype=DTYPE)
    mat = torch.zeros(len(monos), width, dtype=DTYPE)
    for i, m in enumerate(monos):
        for j in m.idx:
            mat[i, j] += 1.0
    return const, mat


@dataclass
class Plan:
    """Everything about one final loop structure that does not depend on the tile sizes."""

    slots: torch.Tensor  # (loops,) super-graph slot of each final loop
    parts: torch.Tensor  # (loops, max parts) pre-postprocessing loop ids, -1 padded, outermost first
    part_mat: torch.Tensor  # (loops, pre loops): log extent of a final loop = sum of its parts'
    ancestors: torch.Tensor  # (loops, loops): 1 where column is an ancestor-or-self of row
    below: torch.Tensor  # (loops, loops): 1 where column is in row's block chain at or below it
    stride_const: torch.Tensor  # (loops, slots, max parts) log |stride constant|
    stride_mat: torch.Tensor  # (loops, slots, max parts, columns) inner-tile factors in the stride
    stride_nonzero: torch.Tensor  # (loops, slots, max parts) bool: the part moves the buffer's index
    has_slot: torch.Tensor  # (loops, slots) bool: the owner block has that buffer slot
    static: torch.Tensor  # (loops, NUM_FEATURES) kind one-hot columns
    pragma: torch.Tensor  # (loops,) bool: carries the unroll pragma
    final: FinalProgram


class VariantFeatures:
    """Differentiable super-graph node features of one variant (design space + compute locations)."""

    def __init__(self, program: SymbolicProgram, builder: "GraphBuilder", encoder: GraphEncoder) -> None:
        if builder.mode != "supergraph" or builder.template.version != encoder.version:
            raise NotDifferentiable("gradient search needs a super-graph cost model on the current template")
        self.program, self.builder, self.encoder = program, builder, encoder
        self.roles = RoleCache()
        self.plans: dict[tuple, Plan] = {}
        width = program.num_columns
        loops = program.loops
        self.num_loops = len(loops)
        monos = [lp.extent if isinstance(lp.extent, Mono) else Mono(0.0) for lp in loops]
        self.ext_const, self.ext_mat = _mono_rows(monos, width)
        self.spans: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for lp in loops:
            if isinstance(lp.extent, Span):
                cc, cm = _mono_rows([c for c, _ in lp.extent.terms], width)
                ec, em = _mono_rows([e for _, e in lp.extent.terms], width)
                self.spans.append((lp.index, cc, cm, ec, em))
        t = builder.template
        self.num_slots, self.num_nodes = t.num_slots, t.num_nodes
        self.stats = builder.stats if builder.stats is not None else FeatureStats(torch.zeros(NUM_FEATURES),
                                                                                  torch.ones(NUM_FEATURES))
        unroll = program.unroll
        values = unroll.categories if unroll is not None else (0,)
        self.unroll_values = torch.tensor(values, dtype=torch.long)
        self.unroll_log = torch.tensor([math.log2(1.0 + v) for v in values], dtype=DTYPE)
        self.unroll_explicit = 1.0 if unroll is not None and unroll.explicit else 0.0

    # -- extents and structures ----------------------------------------------------------------

    def log_extents(self, y: torch.Tensor) -> torch.Tensor:
        """(B, pre loops) natural-log extents of the loops before postprocessing."""
        le = self.ext_const + y @ self.ext_mat.T
        if not self.spans:
            return le
        cols = [le[:, i] for i in range(self.num_loops)]
        for index, cc, cm, ec, em in self.spans:
            value = 1.0 + (torch.exp(cc + y @ cm.T) * (torch.exp(ec + y @ em.T) - 1.0)).sum(-1)
            cols[index] = torch.log(value.clamp_min(1.0))
        return torch.stack(cols, dim=-1)

    def structures(self, y: torch.Tensor, unroll: torch.Tensor, le: torch.Tensor | None = None) -> list[Rewrite]:
        """The postprocessed structure at each point (hard decisions, no gradient)."""
        le = self.log_extents(y) if le is None else le
        y_np, le_np = y.detach().numpy(), le.detach().numpy()
        values = self.unroll_values[unroll].tolist()
        return [Rewrite(self.program, y_np[b].tolist(), le_np[b].tolist(), values[b]) for b in range(len(y_np))]

    def plan(self, rewrite: Rewrite) -> Plan:
        plan = self.plans.get(rewrite.key)
        if plan is None:
            plan = self.plans[rewrite.key] = self._make_plan(rewrite.final())
        return plan

    def _make_plan(self, final: FinalProgram) -> Plan:
        prog = final.program
        owner = owners(prog)
        enc = EncodedProgram(prog, owner, np.zeros((len(prog.loops), NUM_FEATURES), np.float32),
                             self.roles.roles(prog, owner))
        try:
            slots = torch.from_numpy(self.encoder.slots_of(enc))
        except TemplateMismatch as err:  # a structure only this point reaches: drop the variant, not the search
            raise NotDifferentiable(f"{self.program.name}: {err}") from err
        n, width = len(prog.loops), self.program.num_columns
        max_parts = max(len(p) for p in final.parts)
        parts = torch.full((n, max_parts), -1, dtype=torch.long)
        part_mat = torch.zeros(n, self.num_loops, dtype=DTYPE)
        ancestors = torch.zeros(n, n, dtype=DTYPE)
        below = torch.zeros(n, n, dtype=DTYPE)
        stride_const = torch.zeros(n, NUM_BUFFER_SLOTS, max_parts, dtype=DTYPE)
        stride_mat = torch.zeros(n, NUM_BUFFER_SLOTS, max_parts, width, dtype=DTYPE)
        stride_nonzero = torch.zeros(n, NUM_BUFFER_SLOTS, max_parts, dtype=torch.bool)
        has_slot = torch.zeros(n, NUM_BUFFER_SLOTS, dtype=torch.bool)
        static = torch.zeros(n, NUM_FEATURES, dtype=DTYPE)
        for i, lp in enumerate(prog.loops):
            parts[i, : len(final.parts[i])] = torch.tensor(final.parts[i])
            part_mat[i, list(final.parts[i])] = 1.0
            static[i, _KIND_COLUMN[lp.kind]] = 1.0
            a = i
            while a >= 0:
                ancestors[i, a] = 1.0
                a = prog.loops[a].parent
            b = owner[i]
            chain = prog.blocks[b].chain
            for j in chain[chain.index(i) :]:
                if owner[j] != b:
                    raise NotDifferentiable(f"{self.program.name}: loop {prog.loops[j].name} below "
                                            f"{lp.name} belongs to another block")
                below[i, j] = 1.0
            sym = self._accesses(final, b)
            for s, acc in enumerate(buffer_slots(prog, b)):
                has_slot[i, s] = True
                strides = sym[acc.handle].strides
                for k, part in enumerate(final.parts[i]):
                    if part not in strides:
                        raise NotDifferentiable(f"{self.program.name}: no stride of {lp.name} in {acc.buffer}")
                    stride = strides[part]
                    if stride is not None:
                        stride_nonzero[i, s, k] = True
                        stride_const[i, s, k] = stride.value.logc
                        for col in stride.value.idx:
                            stride_mat[i, s, k, col] += 1.0
        pragma = torch.zeros(n, dtype=torch.bool)
        pragma[list(final.pragma)] = True
        return Plan(slots, parts, part_mat, ancestors, below, stride_const, stride_mat, stride_nonzero, has_slot,
                    static, pragma, final)

    def _accesses(self, final: FinalProgram, block: int) -> dict[int, SymAccess]:
        src = self.program.blocks[final.sources[block]]
        return {a.handle: a for a in ([src.write] if src.write is not None else []) + src.reads}

    # -- features ------------------------------------------------------------------------------

    def loop_features(self, plan: Plan, y: torch.Tensor, le: torch.Tensor, unroll: torch.Tensor) -> torch.Tensor:
        """(B, final loops, NUM_FEATURES) the encoder's loop features (float64, before standardising)."""
        batch = y.shape[0]
        lf = le @ plan.part_mat.T  # (B, loops)
        feats = plan.static.expand(batch, -1, -1).clone()
        feats[:, :, 0] = _log2_1p_exp(lf)
        feats[:, :, 7] = _log2_1p_exp(lf @ plan.ancestors.T)
        bottom = lf @ plan.below.T
        feats[:, :, 8] = _log2_1p_exp(bottom)
        if plan.pragma.any():
            feats[:, plan.pragma, 5] = self.unroll_log[unroll].unsqueeze(-1)
            feats[:, plan.pragma, 6] = self.unroll_explicit  # a pragma exists only for a positive step
        # the part that gives a loop its stride: the innermost one whose extent is not 1
        part_le = torch.where(plan.parts >= 0, le[:, plan.parts.clamp_min(0)], torch.full((), -1.0, dtype=DTYPE))
        moving = part_le >= UNIT
        moving[:, :, 0] |= ~moving.any(-1)
        chosen = torch.where(moving, torch.arange(plan.parts.shape[1]), -1).amax(-1)  # (B, loops)
        pick = chosen[:, :, None, None].expand(-1, -1, NUM_BUFFER_SLOTS, 1)
        every = plan.stride_const + torch.einsum("bv,lskv->blsk", y, plan.stride_mat)  # (B, loops, slots, parts)
        log_stride = every.gather(3, pick).squeeze(3)
        nonzero = plan.stride_nonzero.expand(batch, -1, -1, -1).gather(3, pick).squeeze(3)  # (B, loops, slots)
        touch = torch.einsum("lm,bms->bls", plan.below, lf.unsqueeze(-1) * nonzero.to(DTYPE))
        for s in range(NUM_BUFFER_SLOTS):
            live = plan.has_slot[:, s].to(DTYPE)
            base = _BUF0 + 3 * s
            feats[:, :, base] = _log2_1p_exp(touch[:, :, s]) * live
            feats[:, :, base + 1] = _log2_1p_exp(bottom - touch[:, :, s]) * live
            feats[:, :, base + 2] = torch.where(nonzero[:, :, s], _log2_1p_exp(log_stride[:, :, s]),
                                                torch.zeros((), dtype=DTYPE)) * live
        return feats

    def node_features(self, y: torch.Tensor, unroll: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Rewrite]]:
        """(x (B, nodes, width) float32, mask (B, nodes), structures) as `GraphBuilder.batch` gives
        the cost model, at log factors `y` (B, columns) float64 and unroll indices (B,)."""
        le = self.log_extents(y)
        rewrites = self.structures(y, unroll, le)
        groups: dict[tuple, list[int]] = {}
        for b, rw in enumerate(rewrites):
            groups.setdefault(rw.key, []).append(b)
        parts, order = [], []
        for members in groups.values():
            plan = self.plan(rewrites[members[0]])
            idx = torch.tensor(members)
            feats = self.loop_features(plan, y[idx], le[idx], unroll[idx]).to(torch.float32)
            x = torch.zeros(len(members), self.num_nodes, self.builder.width)
            layout.place(x, slice(None), layout.for_node(plan.slots), layout.interval_node(plan.slots, self.num_slots),
                         self.stats.normalize(feats))
            parts.append(x)
            order += members
        x = torch.cat(parts)[torch.argsort(torch.tensor(order))]
        return x, layout.present(x), rewrites
