"""GPU thread limits of a design space, read from the data flow of its trace.

On CUDA, MultiLevelTiling fuses one tile factor of each spatial loop into a loop bound to
threadIdx and annotates the block with the thread counts it accepts
(`meta_schedule.thread_extent_low_inclusive` / `_high_inclusive`); VerifyGPUCode rejects every
schedule outside them, which is most uniformly drawn tile decisions (80-95% for small shapes).
Checking that product on the decisions costs microseconds instead of a replay and the
postprocessors, so sampling and neighbour moves draw only thread counts TVM accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

_LOW = "meta_schedule.thread_extent_low_inclusive"
_HIGH = "meta_schedule.thread_extent_high_inclusive"


@dataclass(frozen=True)
class ThreadLimit:
    """The threads of one block, a product of tile factors, must lie in [low, high]."""

    block: str
    factors: tuple[tuple[int, int], ...]  # (knob position, index in that knob's tile)
    low: int
    high: int

    def threads(self, decisions: Sequence[Any]) -> int:
        return math.prod(int(decisions[position][index]) for position, index in self.factors)

    def violation(self, decisions: Sequence[Any]) -> str | None:
        """Why `decisions` break the limit (None when they keep it)."""
        n = self.threads(decisions)
        if self.low <= n <= self.high:
            return None
        return f"threads of {self.block}: {n} not in [{self.low}, {self.high}]"


def _handle(rv: Any) -> int | None:
    return rv.__chandle__() if hasattr(rv, "__chandle__") else None


class _Flow:
    """Which instruction of a trace produced each random variable (loops, blocks, samples)."""

    def __init__(self, insts: Sequence[Any]) -> None:
        self.insts = insts
        self.producer: dict[int | None, tuple[int, int]] = {}
        for i, inst in enumerate(insts):
            for j, out in enumerate(inst.outputs):
                self.producer[_handle(out)] = (i, j)

    def made_by(self, rv: Any) -> tuple[Any, int, int] | None:
        """(instruction, its index, output index) that produced `rv`."""
        found = self.producer.get(_handle(rv))
        return None if found is None else (self.insts[found[0]], *found)

    def block_of(self, loop: Any) -> int | None:
        """The block whose loops were split and fused into `loop` (its handle)."""
        made = self.made_by(loop)
        if made is None:
            return None
        inst = made[0]
        if inst.kind.name in ("Fuse", "Split"):
            return self.block_of(inst.inputs[0])
        return _handle(inst.inputs[0]) if inst.kind.name == "GetLoops" else None

    def block_name(self, block: int | None) -> str:
        i, _ = self.producer.get(block, (-1, 0)) if block is not None else (-1, 0)
        return str(self.insts[i].attrs[0]) if i >= 0 and self.insts[i].kind.name == "GetSBlock" else "a block"

    def tile_factors(self, loop: Any, knob_at: dict[int, int]) -> list[tuple[int, int]] | None:
        """The (knob, factor index) pairs whose product is the loop's extent; None if some
        part of it is not a sampled tile factor."""
        made = self.made_by(loop)
        if made is None:
            return None
        inst, _, out = made
        if inst.kind.name == "Fuse":
            factors: list[tuple[int, int]] = []
            for part in inst.inputs:
                found = self.tile_factors(part, knob_at)
                if found is None:
                    return None
                factors += found
            return factors
        if inst.kind.name != "Split":
            return None
        factor = self.made_by(inst.inputs[1 + out])
        if factor is None or factor[0].kind.name != "SamplePerfectTile" or factor[1] not in knob_at:
            return None
        return [(knob_at[factor[1]], factor[2])]


def thread_limits(insts: Sequence[Any], knob_at: dict[int, int]) -> tuple[ThreadLimit, ...]:
    """The thread limit of every annotated block whose threadIdx loops are all tile factors.

    `knob_at` maps a sampling instruction's index to its knob position. Empty on CPUs.
    """
    flow = _Flow(insts)
    bounds: dict[int | None, dict[str, int]] = {}
    factors: dict[int | None, list[tuple[int, int]] | None] = {}
    for inst in insts:
        name = inst.kind.name
        if name == "Annotate" and str(inst.attrs[0]) in (_LOW, _HIGH):
            bounds.setdefault(_handle(inst.inputs[0]), {})[str(inst.attrs[0])] = int(inst.inputs[1])
        elif name == "Bind" and str(inst.attrs[0]).startswith("threadIdx"):
            block = flow.block_of(inst.inputs[0])
            if block is not None:
                found = flow.tile_factors(inst.inputs[0], knob_at)
                known = factors.get(block, [])
                factors[block] = None if found is None or known is None else known + found
    limits = []
    for block, bound in bounds.items():
        found = factors.get(block)
        if found and len(bound) == 2:
            limits.append(ThreadLimit(flow.block_name(block), tuple(found), bound[_LOW], bound[_HIGH]))
    return tuple(limits)


def thread_axis_sized_by(insts: Sequence[Any], inst_index: int) -> str | None:
    """'threadIdx.x of compute' when the sampled value is the extent of a loop bound to a
    thread axis (AutoBind's thread count), else None."""
    flow = _Flow(insts)
    out = _handle(insts[inst_index].outputs[0])
    for split in insts[inst_index + 1 :]:
        if split.kind.name != "Split" or out not in [_handle(x) for x in split.inputs[1:]]:
            continue
        piece = _handle(split.outputs[[_handle(x) for x in split.inputs[1:]].index(out)])
        for bind in insts:
            if bind.kind.name == "Bind" and _handle(bind.inputs[0]) == piece:
                return f"{bind.attrs[0]} of {flow.block_name(flow.block_of(split.inputs[0]))}"
    return None
