"""MetaSchedule's postprocessors replayed on a symbolic program at given loop extents.

Which loops the postprocessors fuse and annotate depends on the tile sizes, so the final loop
nest (and with it the super-graph slots of every loop) is a piecewise-constant function of
them. `Rewrite` replays, at one point of log-factor space, what TVM 0.27 does:

* RewriteParallelVectorizeUnroll, block by block in program order: fuse the outer data-parallel
  loops into one parallel loop until the product exceeds `meta_schedule.parallel` or a loop
  has several children; fuse the inner data-parallel loops into one vectorised loop while the
  product stays within `meta_schedule.vectorize` and the buffer accesses stay contiguous;
  prefer vectorising; put the unroll pragma on the outermost loop of a non-spatial block;
* RewriteReductionBlock: split a reduction's init into its own block before the first
  non-data-parallel loop, over copies of the data-parallel loops below (named `<loop>_init`).

Decisions compare continuous products with TVM's integer thresholds; they are exact at
integer tile sizes. "Extent 1" means below sqrt(2) (the log-space midpoint between 1 and 2),
so a decision flips where rounding to the nearest factor would flip it.

The contiguity analysis needs a loop's stride as TVM's stride extractor sees it. Only a
block's own loops are modelled; a loop shared with another block (or fused by one) stops the
scan. That never changes a decision: the scan only matters up to the innermost run of loops
that can be vectorised, and that run ends before any shared loop (at a reduction loop, or at
the compute-at location, whose body holds two statements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from metatune.encode.loopgraph import PARALLEL, SERIAL, VECTORIZED, Access, Block, Loop, LoopProgram
from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.program import SymAccess, SymbolicProgram

UNIT = 0.5 * math.log(2.0)  # a loop whose log extent is below this has extent 1
_TOL = 1e-9
_UNKNOWN = object()


class _Node:
    """A loop of the program being rewritten."""

    __slots__ = ("name", "parts", "kind", "pragma", "datapar", "le", "parent", "children")

    def __init__(self, name: str, parts: tuple[int, ...], kind: int, datapar: bool, le: float) -> None:
        self.name, self.parts, self.kind, self.datapar, self.le = name, parts, kind, datapar, le
        self.pragma = False
        self.parent: _Node | None = None
        self.children: list[_Node | int] = []  # loops, or indices into Rewrite.blocks


@dataclass
class _BlockRec:
    source: int  # the symbolic block
    init: bool = False
    decomposed: bool = False


@dataclass
class FinalProgram:
    """The postprocessed loop nest of one structure, as the encoder would read it."""

    program: LoopProgram  # names, nesting and blocks (extents are those of the point simulated)
    parts: list[tuple[int, ...]]  # per loop: the pre-postprocessing loops it is made of, outermost first
    sources: list[int]  # per block: the symbolic block it derives from (init blocks: their update block)
    pragma: tuple[int, ...]  # the loops carrying the unroll pragma


class Rewrite:
    """The postprocessors applied to `program` at log-factors `y` with unroll step `unroll`."""

    def __init__(self, program: SymbolicProgram, y: Sequence[float], log_extents: Sequence[float], unroll: int) -> None:
        self.prog, self.y, self.unroll = program, y, unroll
        self.blocks = [_BlockRec(b.index) for b in program.blocks]
        self.block_parent: dict[int, _Node | None] = {}
        nodes = [_Node(lp.name, (lp.index,), SERIAL, lp.datapar, float(log_extents[lp.index])) for lp in program.loops]
        self.root: list[_Node | int] = []
        for lp in program.loops:
            nodes[lp.index].parent = nodes[lp.parent] if lp.parent >= 0 else None
            for kind, i in lp.children:
                nodes[lp.index].children.append(nodes[i] if kind == "loop" else i)
                if kind == "block":
                    self.block_parent[i] = nodes[lp.index]
        for kind, i in program.top:
            self.root.append(nodes[i] if kind == "loop" else i)
            if kind == "block":
                self.block_parent[i] = None
        decisions = [self._parallel_vectorize_unroll(b) for b in self._program_order()]
        for b in self._program_order():
            if program.blocks[b].has_init:
                self._decompose(b)
        self.key = (tuple(decisions), unroll > 0)

    # -- tree helpers --------------------------------------------------------------------------

    def _program_order(self) -> list[int]:
        out: list[int] = []

        def visit(items: list[_Node | int]) -> None:
            for item in items:
                if isinstance(item, _Node):
                    visit(item.children)
                else:
                    out.append(item)

        visit(self.root)
        return out

    def _chain(self, b: int) -> list[_Node]:
        chain = []
        node = self.block_parent[b]
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain[::-1]

    def _siblings(self, node: _Node) -> list[_Node | int]:
        return node.parent.children if node.parent is not None else self.root

    def _fuse(self, loops: list[_Node], kind: int) -> _Node:
        fused = _Node("_".join(n.name for n in loops) + "_fused", sum((n.parts for n in loops), ()), kind, True,
                      sum(n.le for n in loops))
        fused.parent = loops[0].parent
        fused.children = loops[-1].children
        for child in fused.children:
            if isinstance(child, _Node):
                child.parent = fused
            else:
                self.block_parent[child] = fused
        siblings = self._siblings(loops[0])
        siblings[siblings.index(loops[0])] = fused
        return fused

    # -- RewriteParallelVectorizeUnroll --------------------------------------------------------

    def _stride(self, acc: SymAccess, node: _Node) -> object:
        """TVM's stride of a loop in an access: None (not used), (sign, log|stride|), or _UNKNOWN."""
        if len(node.parts) != 1 or node.parts[0] not in acc.tvm_strides:
            return _UNKNOWN
        stride = acc.tvm_strides[node.parts[0]]
        if stride is None:
            return None
        return stride.sign, stride.value.log_value(self.y)

    def _max_fusible(self, b: int, loops: list[_Node]) -> int:
        blk = self.prog.blocks[b]
        result = 1 << 30
        for acc in blk.reads + ([blk.write] if blk.write is not None else []):
            fusible, prev, prev_stride = 0, -1, (0, 0.0)
            for i in range(len(loops) - 1, -1, -1):
                s = self._stride(acc, loops[i])
                if s is _UNKNOWN:
                    break
                if s is None:
                    fusible += 1
                    continue
                sign, log = s  # type: ignore[misc]
                if prev == -1:
                    if not (sign == 1 and abs(log) < _TOL) and fusible != 0:
                        break
                elif not (sign == prev_stride[0] and abs(log - prev_stride[1] - loops[prev].le) < _TOL):
                    break
                fusible += 1
                prev, prev_stride = i, (sign, log)
            result = min(result, fusible)
        return result

    def _parallel_vectorize_unroll(self, b: int) -> tuple[int, int]:
        prog, blk = self.prog, self.prog.blocks[b]
        loops = self._chain(b)
        n = len(loops)
        if n == 0:
            return (0, 0)
        num_par = num_vec = -1
        if prog.max_parallel != -1 or prog.max_vectorize != -1:
            max_fusible = self._max_fusible(b, loops)
            rewritable = sum(1 for nd in loops if not nd.pragma and nd.datapar and len(nd.children) == 1)
            if prog.max_parallel != -1:
                num_par, prod = 0, 0.0
                for nd in loops:
                    if not nd.datapar or nd.pragma:
                        break
                    num_par += 1
                    prod += nd.le
                    if prod > math.log(prog.max_parallel) + _TOL or len(nd.children) != 1:
                        break
                if prod < UNIT:
                    num_par = -1
            if prog.max_vectorize != -1:
                num_vec, prod = 0, 0.0
                for nd in reversed(loops):
                    if not nd.datapar or num_vec >= max_fusible or nd.pragma or len(nd.children) != 1:
                        break
                    prod += nd.le
                    if prod > math.log(prog.max_vectorize) + _TOL:
                        break
                    num_vec += 1
                if prod < UNIT:
                    num_vec = -1
            if num_par != -1 and num_vec != -1:
                if rewritable == n and max_fusible == n:
                    raise NotDifferentiable(f"{prog.name}: block {blk.name} would be fused whole and split for "
                                            "vectorisation (not modelled)")
                num_par = min(num_par, n - num_vec)
        if num_par > 0:
            fused = self._fuse(loops[:num_par], PARALLEL)
            loops[:num_par] = [fused] * num_par
        if num_vec > 0:
            fused = self._fuse(loops[n - num_vec :], VECTORIZED)
            loops[n - num_vec :] = [fused] * num_vec
        if self.unroll > 0 and prog.unroll is not None and not blk.spatial:
            loops[0].pragma = True
        return (num_par, num_vec)

    # -- RewriteReductionBlock -----------------------------------------------------------------

    def _decompose(self, b: int) -> None:
        blk = self.prog.blocks[b]
        chain = self._chain(b)
        point = next((i for i, nd in enumerate(chain) if not nd.datapar), None)
        if point is None:
            return
        init = len(self.blocks)
        self.blocks.append(_BlockRec(b, init=True))
        self.blocks[b].decomposed = True
        inner: _Node | int = init
        for nd in reversed([nd for nd in chain[point:] if set(nd.parts) <= blk.spatial_loops]):
            copy = _Node(nd.name + "_init", nd.parts, nd.kind, True, nd.le)
            copy.children = [inner]
            if isinstance(inner, _Node):
                inner.parent = copy
            else:
                self.block_parent[inner] = copy
            inner = copy
        anchor = chain[point]
        if isinstance(inner, _Node):
            inner.parent = anchor.parent
        else:
            self.block_parent[inner] = anchor.parent
        siblings = self._siblings(anchor)
        siblings.insert(siblings.index(anchor), inner)

    # -- the final program ---------------------------------------------------------------------

    def final(self) -> FinalProgram:
        prog = self.prog
        loops: list[Loop] = []
        blocks: list[Block] = []
        parts: list[tuple[int, ...]] = []
        sources: list[int] = []
        pragma: list[int] = []

        def access(acc: SymAccess) -> Access:
            return Access(acc.buffer, acc.handle, 0, {})

        def visit(items: list[_Node | int], parent: int, chain: tuple[int, ...]) -> None:
            for item in items:
                if isinstance(item, _Node):
                    index = len(loops)
                    loops.append(Loop(index, item.name, max(1, round(math.exp(item.le))), item.kind, 0, 0, parent,
                                      len(chain), index + 1))
                    parts.append(item.parts)
                    if item.pragma:
                        pragma.append(index)
                    if parent >= 0:
                        loops[parent].children.append(index)
                    visit(item.children, index, chain + (index,))
                    continue
                rec = self.blocks[item]
                src = prog.blocks[rec.source]
                name = src.name + ("_init" if rec.init else "_update" if rec.decomposed else "")
                keep = [i for i, red in enumerate(src.iter_reduce) if not (rec.init and red)]
                write = access(src.write) if src.write is not None else None
                reads = [] if rec.init else [access(a) for a in src.reads]
                if rec.decomposed and write is not None and all(a.handle != write.handle for a in reads):
                    reads.insert(0, write)  # the update block now reads what it accumulates into
                index = len(blocks)
                blocks.append(Block(index, name, src.family, rec.init, chain, tuple(src.iter_names[i] for i in keep),
                                    tuple(src.iter_reduce[i] for i in keep), src.tiled, write, reads))
                sources.append(rec.source)
                for loop in chain:
                    loops[loop].blocks.append(index)

        visit(self.root, -1, ())
        return FinalProgram(LoopProgram(loops, blocks), parts, sources, tuple(pragma))
