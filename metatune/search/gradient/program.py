"""A design-space variant's program before postprocessing, with extents and strides as symbols.

A *variant* is a design space with every decision except the tile sizes fixed: its compute
locations (each one changes which loops exist) and, per configuration, its categorical
decisions (the unroll step only changes an annotation value). Replaying the variant's trace at
one reference configuration without postprocessors gives its loop nest. In it:

* a loop made by splitting a `SamplePerfectTile` loop has the tile factor as its extent;
* a block's binding gives that loop the coefficient "product of the tile factors of the inner
  levels of the same split" (times a constant), so a buffer access strides over it by a
  constant times a monomial of tile factors;
* a stage computed at a loop (compute-at / reverse-compute-at, loops named `ax<i>`) covers the
  region its neighbour block touches below that loop: along each buffer dimension
  `1 + sum |coefficient| * (extent - 1)` over the neighbour's loops below the location (an
  affine *span*; for the tiles of one axis it telescopes to their product);
* anything else (stages at the root) has constant extents.

Every symbolic value is checked against the replayed program at the reference configuration
and against the encoder's own stride analysis; a program outside this model raises
`NotDifferentiable` naming the design space and the loop.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence, Union

from metatune.encode.loopgraph import extract
from metatune.env.tvm_nodes import type_key
from metatune.search.gradient import NotDifferentiable
from metatune.space.knob_space import CATEGORICAL, COMPUTE_LOCATION, PARTITIONED_TILE, TILE

if TYPE_CHECKING:
    from metatune.space.knob_space import Config, KnobSpace

PARALLEL_ANN = "meta_schedule.parallel"
VECTORIZE_ANN = "meta_schedule.vectorize"
UNROLL_ANNS = {"meta_schedule.unroll_explicit": True, "meta_schedule.unroll_implicit": False}
_AX = re.compile(r"^ax(\d+)$")


# ---------------------------------------------------------------------------------------------
# Symbols


@dataclass(frozen=True)
class Mono:
    """`exp(logc) * prod(f[i] for i in idx)`: a positive constant times a product of tile factors
    (`f` = exp of the log-factor columns)."""

    logc: float
    idx: tuple[int, ...] = ()

    def log_value(self, y: Sequence[float]) -> float:
        return self.logc + sum(y[i] for i in self.idx)


@dataclass(frozen=True)
class Span:
    """`1 + sum(coef * (ext - 1))`: how far an affine index moves while the loops below a
    compute-at location run (`ext` the loop's extent, `coef` its coefficient in the index)."""

    terms: tuple[tuple[Mono, Mono], ...]

    def log_value(self, y: Sequence[float]) -> float:
        total = 1.0 + sum(math.exp(c.log_value(y)) * (math.exp(e.log_value(y)) - 1.0) for c, e in self.terms)
        return math.log(total)


Extent = Union[Mono, Span]


@dataclass(frozen=True)
class Stride:
    """A non-zero stride: `sign * value` with `value` a monomial."""

    sign: int
    value: Mono


class Variant(NamedTuple):
    """A design space with its compute locations fixed: ((knob position, location), ...)."""

    space: int
    locations: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class TileKnob:
    """A `SamplePerfectTile` knob; each of its levels is a column of the log-factor vector."""

    position: int
    block: str
    loop: str  # name of the loop it splits (its split loops are `<loop>_<level>`)
    extent: int
    levels: int
    max_innermost: int
    columns: tuple[int, ...]


@dataclass
class SymLoop:
    index: int
    name: str
    extent: Extent
    datapar: bool  # no block binds it to a reduction variable
    parent: int  # -1: the root
    children: list[tuple[str, int]] = field(default_factory=list)  # ("loop" | "block", index) in order
    column: int | None = None  # the tile variable it is a split of


@dataclass
class SymAccess:
    """One buffer access of a block. Strides are given for the block's own loops (None: the loop
    does not move the index); loops shared with another block are absent (not needed: see
    `postproc`)."""

    buffer: str
    handle: int
    strides: dict[int, Stride | None]  # the encoder's flattened stride
    tvm_strides: dict[int, Stride | None]  # the postprocessor's: innermost dimension that moves


@dataclass
class SymBlock:
    index: int
    name: str
    family: str
    iter_names: tuple[str, ...]
    iter_reduce: tuple[bool, ...]
    tiled: bool
    has_init: bool
    chain: tuple[int, ...]
    own: frozenset[int]  # loops made for this block (its splits, or its stage loops)
    spatial_loops: frozenset[int]  # own loops bound to a spatial iteration variable
    write: SymAccess | None
    reads: list[SymAccess]

    @property
    def spatial(self) -> bool:
        return not any(self.iter_reduce)


@dataclass(frozen=True)
class UnrollKnob:
    position: int
    categories: tuple[int, ...]
    explicit: bool


@dataclass
class SymbolicProgram:
    """The pre-postprocessing loop nest of a variant with symbolic extents and strides."""

    variant: Variant
    name: str  # for messages: "<workload> design space <i>"
    knobs: tuple[TileKnob, ...]
    loops: list[SymLoop]
    blocks: list[SymBlock]
    top: list[tuple[str, int]]  # the root's children in order
    max_parallel: int  # -1 without the annotation
    max_vectorize: int
    unroll: UnrollKnob | None
    nonunit_loops: tuple[int, ...]  # loops whose extent must not be 1 (compute locations sit on them)
    unit_loops: tuple[int, ...]  # loops whose extent must be 1 (else TVM cannot reach a compute location)

    @property
    def num_columns(self) -> int:
        return sum(k.levels for k in self.knobs)

    def columns(self, config: "Config") -> list[float]:
        """The log-factor vector of a configuration."""
        y = [0.0] * self.num_columns
        for knob in self.knobs:
            for col, factor in zip(knob.columns, config.decisions[knob.position]):  # type: ignore[arg-type]
                y[col] = math.log(factor)
        return y


# ---------------------------------------------------------------------------------------------
# Reading the replayed program


@dataclass
class _RawLoop:
    name: str
    extent: int
    kind: int
    annotated: bool
    var: int
    parent: int
    children: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class _RawAccess:
    buffer: str
    handle: int
    shape: tuple[int, ...]
    dims: list[tuple[int, dict[int, int]]]  # per dimension: affine map over iteration variables


@dataclass
class _RawBlock:
    name: str
    iter_vars: list[tuple[int, str, bool]]  # (handle, name, is_reduce)
    bindings: list[tuple[int, dict[int, int]]]  # per iteration variable: affine map over loop vars
    writes: list[_RawAccess]
    reads: list[_RawAccess]
    has_init: bool
    tiled: bool
    chain: tuple[int, ...]


class _NotAffine(Exception):
    pass


def _affine(expr: Any) -> tuple[int, dict[int, int]]:
    """`const + sum coef * var` of an integer expression; raises _NotAffine otherwise."""
    key = type_key(expr)
    if key == "ir.IntImm":
        return int(expr.value), {}
    if key == "ir.Var":
        return 0, {expr.__chandle__(): 1}
    if key == "prim.Cast":
        return _affine(expr.value)
    if key in ("prim.Add", "prim.Sub"):
        (ca, ma), (cb, mb) = _affine(expr.a), _affine(expr.b)
        sign = 1 if key == "prim.Add" else -1
        out = dict(ma)
        for var, coef in mb.items():
            out[var] = out.get(var, 0) + sign * coef
        return ca + sign * cb, {v: c for v, c in out.items() if c}
    if key == "prim.Mul":
        (ca, ma), (cb, mb) = _affine(expr.a), _affine(expr.b)
        if ma and mb:
            raise _NotAffine(str(expr))
        const, terms = (ca, mb) if not ma else (cb, ma)
        return ca * cb, {v: c * const for v, c in terms.items() if c * const}
    raise _NotAffine(str(expr))


class _Reader:
    """Loops and blocks of a PrimFunc with bindings and access indices as affine maps."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.loops: list[_RawLoop] = []
        self.blocks: list[_RawBlock] = []
        self.top: list[tuple[str, int]] = []
        self.chain: list[int] = []

    def _attach(self, child: tuple[str, int]) -> None:
        (self.loops[self.chain[-1]].children if self.chain else self.top).append(child)

    def stmt(self, node: Any) -> None:
        key = type_key(node)
        if key == "tirx.For":
            if type_key(node.extent) != "ir.IntImm":
                raise NotDifferentiable(f"{self.where}: loop {node.loop_var.name} has a non-constant extent")
            index = len(self.loops)
            self._attach(("loop", index))
            self.loops.append(_RawLoop(node.loop_var.name, int(node.extent.value), int(node.kind),
                                       len(node.annotations) > 0, node.loop_var.__chandle__(),
                                       self.chain[-1] if self.chain else -1))
            self.chain.append(index)
            self.stmt(node.body)
            self.chain.pop()
        elif key == "tirx.SeqStmt":
            for child in node.seq:
                self.stmt(child)
        elif key == "s_tir.SBlockRealize":
            self.block(node)
        elif key in ("tirx.BufferStore", "tirx.Evaluate"):
            return
        else:
            body = getattr(node, "body", None)
            if body is None or key == "tirx.IfThenElse":
                raise NotDifferentiable(f"{self.where}: cannot read TIR statement {key}")
            self.stmt(body)

    def block(self, realize: Any) -> None:
        blk = realize.block
        if not (type_key(realize.predicate) == "ir.IntImm" and int(realize.predicate.value) == 1):
            raise NotDifferentiable(f"{self.where}: block {blk.name_hint} has a predicate")
        try:
            iter_vars = [(iv.var.__chandle__(), iv.var.name, int(iv.iter_type) != 0) for iv in blk.iter_vars]
            bindings = [_affine(v) for v in realize.iter_values]
            writes = [self.access(r) for r in blk.writes]
            reads = [self.access(r) for r in blk.reads]
        except _NotAffine as err:
            raise NotDifferentiable(f"{self.where}: block {blk.name_hint} has a non-affine index {err}") from None
        self._attach(("block", len(self.blocks)))
        self.blocks.append(_RawBlock(blk.name_hint, iter_vars, bindings, writes, reads, blk.init is not None,
                                     blk.annotations.get("meta_schedule.tiling_structure") is not None,
                                     tuple(self.chain)))

    @staticmethod
    def access(region: Any) -> _RawAccess:
        buf = region.source
        shape = tuple(int(getattr(s, "value", 1)) for s in buf.shape)
        return _RawAccess(buf.name, buf.__chandle__(), shape, [_affine(r.min) for r in region.region])


# ---------------------------------------------------------------------------------------------
# Building the symbolic program


def _replay(ks: "KnobSpace", config: "Config") -> tuple[Any, list[tuple[int, str, str, int, int, int]]]:
    """The variant's schedule at `config` without postprocessors, and for each tile knob
    (position, block, loop name, extent, levels, max innermost factor)."""
    from tvm.s_tir import Schedule

    position = {k.inst_index: k.position for k in ks.knobs}
    sch = Schedule(ks.spaces.mod)
    tiles: list[tuple[int, str, str, int, int, int]] = []
    counter = [0]

    def provide(inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
        i = counter[0]
        counter[0] += 1
        pos = position.get(i)
        if pos is None:
            return decision
        if ks.knobs[pos].kind == TILE:
            loop = sch.get(inputs[0])
            tiles.append((pos, _block_below(loop), loop.loop_var.name, int(loop.extent.value), int(attrs[0]),
                          int(attrs[1])))
        return config.decisions[pos]

    ks.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
    if ks.decisions_of(sch.trace) != tuple(config.decisions):
        raise NotDifferentiable(f"{ks.spaces.workload} design space {ks.index}: {config} is not a valid configuration")
    return sch, tiles


def _block_below(stmt: Any) -> str:
    while True:
        key = type_key(stmt)
        if key == "s_tir.SBlockRealize":
            return str(stmt.block.name_hint)
        stmt = stmt.seq[0] if key == "tirx.SeqStmt" else stmt.body


def build(ks: "KnobSpace", config: "Config") -> SymbolicProgram:
    """The symbolic program of the variant `config` belongs to (its compute locations and
    categoricals), read at `config`, which must be valid (compute locations not snapped)."""

    where = f"{ks.spaces.workload} design space {ks.index}"
    for knob in ks.knobs:
        if knob.kind == PARTITIONED_TILE:
            raise NotDifferentiable(f"{where}: {knob.name} is a partitioned tile (not modelled)")
    variant = Variant(ks.index, tuple((k.position, int(config.decisions[k.position]))  # type: ignore[arg-type]
                                      for k in ks.knobs if k.kind == COMPUTE_LOCATION))
    sch, tile_info = _replay(ks, config)
    func = sch.mod["main"]
    reader = _Reader(where)
    root = func.body.block
    reader.stmt(root.body)
    annotations = {str(k): v for k, v in root.annotations.items()}
    knobs, col = [], 0
    for pos, block, loop, extent, levels, max_inner in tile_info:
        knobs.append(TileKnob(pos, block, loop, extent, levels, max_inner, tuple(range(col, col + levels))))
        col += levels
    unroll = _unroll_knob(ks, annotations, config, where)
    categorical = [k for k in ks.knobs if k.kind == CATEGORICAL]
    if len(categorical) > (unroll is not None):
        raise NotDifferentiable(f"{where}: a categorical knob other than the unroll step")
    program = _Builder(where, reader, knobs, config).program(variant, annotations, unroll)
    _check_against_encoder(program, func, config, where)
    return program


def _unroll_knob(ks: "KnobSpace", annotations: dict[str, Any], config: "Config", where: str) -> UnrollKnob | None:
    keys = [k for k in UNROLL_ANNS if k in annotations]
    if not keys:
        return None
    knob = next((k for k in ks.knobs if k.kind == CATEGORICAL and f"meta_schedule.{k.name}" == keys[0]), None)
    if knob is None or len(keys) > 1:
        raise NotDifferentiable(f"{where}: unroll annotation {keys} without exactly one categorical knob feeding it")
    if knob.categories[int(config.decisions[knob.position])] != int(annotations[keys[0]]):  # type: ignore[arg-type]
        raise NotDifferentiable(f"{where}: the unroll annotation does not follow {knob.name}")
    return UnrollKnob(knob.position, knob.categories, UNROLL_ANNS[keys[0]])


class _Builder:
    def __init__(self, where: str, reader: _Reader, knobs: list[TileKnob], config: "Config") -> None:
        self.where, self.raw, self.knobs, self.config = where, reader, knobs, config
        self.var_loop = {lp.var: i for i, lp in enumerate(reader.loops)}
        self.split: dict[int, tuple[TileKnob, int]] = {}  # loop -> (knob, level)
        self.below: dict[int, set[int]] = {i: set() for i in range(len(reader.loops))}  # loop -> blocks below
        for b, blk in enumerate(reader.blocks):
            for loop in blk.chain:
                self.below[loop].add(b)
        self.y0 = [0.0] * sum(k.levels for k in knobs)  # the reference configuration's log-factors
        for knob in knobs:
            for col, f in zip(knob.columns, self.decision(knob)):
                self.y0[col] = math.log(f)

    def fail(self, message: str) -> NotDifferentiable:
        return NotDifferentiable(f"{self.where}: {message}")

    def decision(self, knob: TileKnob) -> tuple[int, ...]:
        return tuple(self.config.decisions[knob.position])  # type: ignore[arg-type]

    # -- extents -------------------------------------------------------------------------------

    def map_splits(self) -> None:
        for knob in self.knobs:
            blocks = [b for b in self.raw.blocks if b.name == knob.block]
            if len(blocks) != 1:
                raise self.fail(f"tile knob of {knob.block}.{knob.loop} does not name one block")
            names = {self.raw.loops[i].name: i for i in blocks[0].chain}
            for level in range(knob.levels):
                loop = names.get(f"{knob.loop}_{level}")
                if loop is None:
                    raise self.fail(f"no loop {knob.loop}_{level} in the chain of {knob.block}")
                if self.raw.loops[loop].extent != self.decision(knob)[level]:
                    raise self.fail(f"loop {knob.loop}_{level} does not have its tile factor as extent")
                self.split[loop] = (knob, level)

    def coefficient(self, loop: int, coef: int) -> tuple[int, Mono]:
        """(sign, |coefficient|) of a loop in a binding, symbolic for split loops."""
        if loop not in self.split:
            return (1 if coef > 0 else -1), Mono(math.log(abs(coef)))
        knob, level = self.split[loop]
        inner = math.prod(self.decision(knob)[level + 1 :])
        base, rest = divmod(abs(coef), inner)
        if rest or not base:
            raise self.fail(f"loop {self.raw.loops[loop].name} has coefficient {coef}, "
                            "not a multiple of its inner tiles")
        return (1 if coef > 0 else -1), Mono(math.log(base), knob.columns[level + 1 :])

    def stage_extent(self, loop: int, stage: int, location: int) -> Extent:
        """Extent of loop `ax<i>` of a stage computed at `location`: the span of its neighbour's
        index along the buffer dimension the stage's variable i addresses."""
        raw = self.raw
        name = raw.loops[loop].name
        match = _AX.match(name)
        blk = raw.blocks[stage]
        if match is None or int(match.group(1)) >= len(blk.iter_vars):
            raise self.fail(f"loop {name} of stage {blk.name} is not a compute-at loop ax<i>")
        var = blk.iter_vars[int(match.group(1))][0]
        for own_access, other_kind in ((blk.writes, "reads"), (blk.reads, "writes")):
            for acc in own_access:
                dim = next((d for d, (_, m) in enumerate(acc.dims) if m == {var: 1}), None)
                if dim is None:
                    continue
                others = [(o, a) for o, ob in enumerate(raw.blocks) if o != stage and location in ob.chain
                          for a in getattr(ob, other_kind) if a.handle == acc.handle]
                if len(others) == 1:
                    return self.span(others[0][0], others[0][1].dims[dim][1], location)
        raise self.fail(f"cannot tell which neighbour block the region of {name} ({blk.name}) comes from")

    def span(self, other: int, index: dict[int, int], location: int) -> Span:
        blk = self.raw.blocks[other]
        chain = blk.chain
        below = set(chain[chain.index(location) + 1 :])
        terms = []
        for (var, _, _), (_, binding) in zip(blk.iter_vars, blk.bindings):
            a = index.get(var, 0)
            if not a:
                continue
            for loop_var, c in binding.items():
                loop = self.var_loop[loop_var]
                if loop not in below:
                    continue
                if loop not in self.split:
                    raise self.fail(f"region below {self.raw.loops[location].name} moves with unsplit loop "
                                    f"{self.raw.loops[loop].name}")
                _, mono = self.coefficient(loop, c)
                knob, level = self.split[loop]
                terms.append((Mono(mono.logc + math.log(abs(a)), mono.idx), Mono(0.0, (knob.columns[level],))))
        return Span(tuple(terms))

    def extents(self) -> list[Extent]:
        raw = self.raw
        out: list[Extent] = []
        for i, lp in enumerate(raw.loops):
            if lp.kind != 0 or lp.annotated:
                raise self.fail(f"loop {lp.name} is annotated before postprocessing (not modelled)")
            if i in self.split:
                knob, level = self.split[i]
                out.append(Mono(0.0, (knob.columns[level],)))
                continue
            if len(self.below[i]) != 1:
                raise self.fail(f"loop {lp.name} is shared by several blocks but is not a tile loop")
            stage = next(iter(self.below[i]))
            shared = [x for x in raw.blocks[stage].chain if len(self.below[x]) > 1]
            if not shared:
                out.append(Mono(math.log(lp.extent)))
                continue
            ext = self.stage_extent(i, stage, shared[-1])
            if not math.isclose(math.exp(ext.log_value(self.y0)), lp.extent, rel_tol=1e-9):
                raise self.fail(f"the region model gives loop {lp.name} another extent than {lp.extent}")
            out.append(ext)
        return out

    # -- accesses ------------------------------------------------------------------------------

    def accesses(self, b: int, own: frozenset[int]) -> tuple[SymAccess | None, list[SymAccess]]:
        blk = self.raw.blocks[b]
        # each own loop: the (single) iteration variable it moves, and its coefficient
        moves: dict[int, tuple[int, int, Mono]] = {}
        bases: dict[tuple[int, int], float] = {}  # (variable, knob) -> the constant every level shares
        for (var, _, _), (_, binding) in zip(blk.iter_vars, blk.bindings):
            for loop_var, c in binding.items():
                loop = self.var_loop[loop_var]
                if loop not in own:
                    continue
                if loop in moves:
                    raise self.fail(f"loop {self.raw.loops[loop].name} moves two variables of block {blk.name}")
                sign, mono = self.coefficient(loop, c)
                if loop in self.split:
                    base = bases.setdefault((var, self.split[loop][0].position), mono.logc)
                    if not math.isclose(base, mono.logc, abs_tol=1e-12):
                        raise self.fail(f"the levels of {self.raw.loops[loop].name} do not tile one variable")
                moves[loop] = (var, sign, mono)

        offsets = {var: c for (var, _, _), (c, _) in zip(blk.iter_vars, blk.bindings)}

        def symbolic(acc: _RawAccess) -> SymAccess:
            row = [math.prod(acc.shape[d + 1 :]) for d in range(len(acc.shape))]
            # TVM's stride extractor sees through `+`, `* constant` and variables only: an index
            # with a negative constant simplifies to `... - c`, in which it finds no variable.
            visible = []
            for c, m in acc.dims:
                if any(a < 0 for a in m.values()):
                    raise self.fail(f"{acc.buffer} is indexed with a negative coefficient in block {blk.name}")
                visible.append(c + sum(a * offsets[v] for v, a in m.items() if v in offsets) >= 0)
            flat: dict[int, Stride | None] = {}
            tvm: dict[int, Stride | None] = {}
            for loop in own:
                flat[loop] = tvm[loop] = None
                if loop not in moves:
                    continue
                var, sign, mono = moves[loop]
                total = sum(row[d] * m.get(var, 0) for d, (_, m) in enumerate(acc.dims))
                if total:
                    flat[loop] = Stride(sign * (1 if total > 0 else -1),
                                        Mono(mono.logc + math.log(abs(total)), mono.idx))
                inner = next((d for d in range(len(acc.dims) - 1, -1, -1) if visible[d] and acc.dims[d][1].get(var)),
                             None)
                if inner is not None:
                    a = acc.dims[inner][1][var] * row[inner]
                    tvm[loop] = Stride(sign * (1 if a > 0 else -1), Mono(mono.logc + math.log(abs(a)), mono.idx))
            return SymAccess(acc.buffer, acc.handle, flat, tvm)

        writes = [symbolic(a) for a in blk.writes]
        return (writes[0] if writes else None), [symbolic(a) for a in blk.reads]

    # -- the program ---------------------------------------------------------------------------

    def program(self, variant: Variant, annotations: dict[str, Any], unroll: UnrollKnob | None) -> SymbolicProgram:
        raw = self.raw
        self.map_splits()
        extents = self.extents()
        reduce_loops = {self.var_loop[v] for blk in raw.blocks
                        for (_, _, red), (_, m) in zip(blk.iter_vars, blk.bindings) if red for v in m}
        loops = [SymLoop(i, lp.name, extents[i], i not in reduce_loops, lp.parent, list(lp.children),
                         self.split[i][0].columns[self.split[i][1]] if i in self.split else None)
                 for i, lp in enumerate(raw.loops)]
        blocks = []
        for b, blk in enumerate(raw.blocks):
            own = frozenset(x for x in blk.chain if self.below[x] == {b}
                            or (x in self.split and self.split[x][0].block == blk.name))
            spatial = frozenset(self.var_loop[v] for (_, _, red), (_, m) in zip(blk.iter_vars, blk.bindings)
                                if not red for v in m if self.var_loop[v] in own)
            write, reads = self.accesses(b, own)
            family = re.sub(r"_(init|update)$", "", blk.name)
            blocks.append(SymBlock(b, blk.name, family, tuple(n for _, n, _ in blk.iter_vars),
                                   tuple(r for _, _, r in blk.iter_vars), blk.tiled, blk.has_init, blk.chain, own,
                                   spatial, write, reads))
        nonunit, unit = self.location_rules(variant, loops, blocks)
        return SymbolicProgram(
            variant, self.where, tuple(self.knobs), loops, blocks, list(raw.top),
            int(annotations.get(PARALLEL_ANN, -1)), int(annotations.get(VECTORIZE_ANN, -1)), unroll,
            nonunit, unit,
        )

    def location_rules(self, variant: Variant, loops: list[SymLoop],
                       blocks: list[SymBlock]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Loops that must not be / must be unit for the variant's compute locations to stay valid.

        A location indexes the loops of the block it feeds (the tiled one). TVM offers a loop
        as a location when its extent is not 1 and, skipping unit loops, no data-parallel loop
        follows a reduction loop before it. Sufficient, and what the relaxation enforces: a
        data-parallel location has only unit reduction loops before it; a reduction location
        has only unit data-parallel loops between the first reduction loop and itself.
        """
        nonunit: list[int] = []
        unit: list[int] = []
        main = [b for b in blocks if b.tiled]
        for _, loc in variant.locations:
            if loc < 0:
                continue
            if len(main) != 1 or loc >= len(main[0].chain):
                raise self.fail(f"compute location {loc} does not index the loops of one tiled block")
            chain = main[0].chain
            if chain[loc] not in self.split or len(self.below[chain[loc]]) < 2:
                raise self.fail(f"compute location {loc} is not a tile loop with a stage below")
            nonunit.append(chain[loc])
            before = chain[:loc]
            first_reduce = next((i for i, x in enumerate(before) if not loops[x].datapar), len(before))
            if loops[chain[loc]].datapar:
                unit += [x for x in before if not loops[x].datapar]
            else:
                unit += [x for x in before[first_reduce:] if loops[x].datapar]
        if set(unit) & set(nonunit) or any(x not in self.split for x in unit):
            raise self.fail("compute locations with contradicting unit-loop requirements")
        return tuple(nonunit), tuple(dict.fromkeys(unit))


def _check_against_encoder(program: SymbolicProgram, func: Any, config: "Config", where: str) -> None:
    """The symbolic strides at the reference configuration must be the encoder's strides."""
    y = program.columns(config)
    encoded = extract(func)
    if [lp.name for lp in encoded.loops] != [lp.name for lp in program.loops]:
        raise NotDifferentiable(f"{where}: the encoder reads another loop nest")
    var_of = {lp.var: lp.index for lp in encoded.loops}
    for blk, enc in zip(program.blocks, encoded.blocks):
        pairs = ([(blk.write, enc.write)] if blk.write is not None else []) + list(zip(blk.reads, enc.reads))
        for sym, acc in pairs:
            got = {var_of[v]: s for v, s in acc.strides.items()}
            for loop, stride in sym.strides.items():
                want = 0 if stride is None else stride.sign * math.exp(stride.value.log_value(y))
                if not math.isclose(want, got.get(loop, 0), rel_tol=1e-9, abs_tol=1e-9):
                    raise NotDifferentiable(f"{where}: stride of loop {program.loops[loop].name} in {sym.buffer} "
                                            f"is {got.get(loop, 0)}, the symbolic model says {want:g}")
