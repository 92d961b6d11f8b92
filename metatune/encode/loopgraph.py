"""The loop structure of a scheduled TIR program, read straight from TVM's objects.

TVM 0.27 exposes no Python statement visitor (`post_order_visit` is gone), so we walk the
statement tree through the FFI field accessors. Only statements are walked: a block's buffer
accesses are read from its `reads`/`writes` regions, which are exact single-point accesses
for the blocks MetaSchedule produces, so block bodies never need an expression visitor.

Index expressions are evaluated in a small "point-difference" algebra: an expression is
represented by its value at the origin (all loop variables 0) and its change when one loop
variable is set to 1. That change is the loop's stride in the access, and it stays exact
through the `floordiv`/`floormod` that fused loops introduce (it is then the local stride).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from metatune import MetatuneError
from metatune.env.tvm_nodes import type_key

if TYPE_CHECKING:
    import tvm

# A point-difference value: (value at the origin, {loop var handle: change at unit step}).
Rep = tuple[int, dict[int, int]]
_EMPTY: dict[int, int] = {}

TILING_ANN = "meta_schedule.tiling_structure"
UNROLL_MAX_STEP = "pragma_auto_unroll_max_step"
UNROLL_EXPLICIT = "pragma_unroll_explicit"

# ForKind values (tvm.tirx.ForKind).
SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING = 0, 1, 2, 3, 4


class LoopGraphError(MetatuneError):
    """A program the walker cannot read (dynamic extents, unknown statement kinds)."""


@dataclass
class Access:
    """One buffer access of a block, flattened row-major over the buffer's shape."""

    buffer: str
    handle: int
    offset: int
    strides: dict[int, int]  # loop-var handle -> elements moved per unit step of that loop
    scope: str = "global"  # memory scope of the buffer: global, shared, local (GPU stages)
    element_bytes: int = 4


@dataclass
class Block:
    """A block instance in program order with the loops that enclose it."""

    index: int
    name: str
    family: str  # the name without decompose_reduction's `_init` / `_update` suffix
    is_init: bool
    chain: tuple[int, ...]  # enclosing loops, outermost first
    iter_names: tuple[str, ...]
    iter_reduce: tuple[bool, ...]
    tiled: bool  # carries MetaSchedule's multi-level-tiling annotation: the main compute
    write: Access | None
    reads: list[Access]
    iter_loops: tuple[frozenset[int], ...] = ()  # per iteration variable: handles of the loop vars it is bound to

    @property
    def is_reduction(self) -> bool:
        return any(self.iter_reduce)


@dataclass
class Loop:
    """One `for` statement."""

    index: int
    name: str
    extent: int
    kind: int
    unroll_max_step: int
    unroll_explicit: int
    parent: int  # enclosing loop, -1 for the root
    depth: int
    var: int  # handle of the loop variable
    thread: str = ""  # the thread axis a THREAD_BINDING loop is bound to (blockIdx.x, vthread.x, threadIdx.y)
    children: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)  # every block below this loop


@dataclass
class LoopProgram:
    """Loops and blocks of one PrimFunc, both in program (pre-)order."""

    loops: list[Loop]
    blocks: list[Block]


# ---------------------------------------------------------------------------------------------
# Point-difference evaluation of index expressions


def _floordiv(a: int, b: int) -> int:
    return a // b if b else 0


def _floormod(a: int, b: int) -> int:
    return a % b if b else 0


def _truncdiv(a: int, b: int) -> int:
    if not b:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _truncmod(a: int, b: int) -> int:
    return a - b * _truncdiv(a, b) if b else 0


_BINARY_OPS: dict[str, Callable[[int, int], int]] = {
    "prim.Mul": lambda a, b: a * b,
    "prim.FloorDiv": _floordiv,
    "prim.FloorMod": _floormod,
    "prim.Div": _truncdiv,
    "prim.Mod": _truncmod,
    "prim.Min": min,
    "prim.Max": max,
}


def _add(a: Rep, b: Rep, sign: int) -> Rep:
    if not b[1]:
        return a[0] + sign * b[0], a[1]
    if not a[1] and sign == 1:
        return a[0] + b[0], b[1]
    deltas = dict(a[1])
    for key, value in b[1].items():
        total = deltas.get(key, 0) + sign * value
        if total:
            deltas[key] = total
        else:
            deltas.pop(key, None)
    return a[0] + sign * b[0], deltas


def _binary(op: Callable[[int, int], int], a: Rep, b: Rep) -> Rep:
    base = op(a[0], b[0])
    if not a[1] and not b[1]:
        return base, _EMPTY
    deltas: dict[int, int] = {}
    for key in a[1].keys() | b[1].keys():
        change = op(a[0] + a[1].get(key, 0), b[0] + b[1].get(key, 0)) - base
        if change:
            deltas[key] = change
    return base, deltas


def evaluate(expr: Any, env: dict[int, Rep]) -> Rep:
    """Point-difference value of an integer expression; variables not in `env` are loop vars."""
    key = type_key(expr)
    if key == "ir.IntImm":
        return int(expr.value), _EMPTY
    if key == "ir.Var":
        handle = expr.__chandle__()
        rep = env.get(handle)
        return rep if rep is not None else (0, {handle: 1})
    if key == "prim.Add":
        return _add(evaluate(expr.a, env), evaluate(expr.b, env), 1)
    if key == "prim.Sub":
        return _add(evaluate(expr.a, env), evaluate(expr.b, env), -1)
    op = _BINARY_OPS.get(key)
    if op is not None:
        return _binary(op, evaluate(expr.a, env), evaluate(expr.b, env))
    if key == "prim.Cast":
        return evaluate(expr.value, env)
    # Anything else (select, calls, loads used as indices) has no meaningful stride.
    return 0, _EMPTY


# ---------------------------------------------------------------------------------------------
# The walk

_DECOMPOSED = re.compile(r"^(.*)_(init|update)$")


class _Walker:
    def __init__(self) -> None:
        self.loops: list[Loop] = []
        self.blocks: list[Block] = []
        self.chain: list[int] = []
        self.shapes: dict[int, tuple[int, ...]] = {}

    def stmt(self, node: Any) -> None:
        key = type_key(node)
        if key == "tirx.For":
            self.loop(node)
        elif key == "tirx.SeqStmt":
            for child in node.seq:
                self.stmt(child)
        elif key == "s_tir.SBlockRealize":
            self.block(node)
        elif key in ("tirx.BufferStore", "tirx.Evaluate"):
            return
        elif key == "tirx.IfThenElse":
            self.stmt(node.then_case)
            if node.else_case is not None:
                self.stmt(node.else_case)
        else:
            body = getattr(node, "body", None)  # AttrStmt, DeclBuffer, AllocBuffer, LetStmt...
            if body is None:
                raise LoopGraphError(f"cannot walk TIR statement {key}")
            self.stmt(body)

    def loop(self, node: Any) -> None:
        extent = node.extent
        if type_key(extent) != "ir.IntImm":
            raise LoopGraphError(f"loop {node.loop_var.name} has a non-constant extent {extent}")
        ann = node.annotations
        max_step = explicit = 0
        if len(ann):
            value = ann.get(UNROLL_MAX_STEP)
            max_step = int(value) if value is not None else 0
            value = ann.get(UNROLL_EXPLICIT)
            explicit = int(value) if value is not None else 0
        index = len(self.loops)
        parent = self.chain[-1] if self.chain else -1
        var = node.loop_var
        binding = node.thread_binding
        self.loops.append(
            Loop(index, var.name, int(extent.value), int(node.kind), max_step, explicit, parent,
                 len(self.chain), var.__chandle__(), str(binding.thread_tag) if binding is not None else "")
        )
        if parent >= 0:
            self.loops[parent].children.append(index)
        self.chain.append(index)
        self.stmt(node.body)
        self.chain.pop()

    def block(self, realize: Any) -> None:
        blk = realize.block
        iter_vars = blk.iter_vars
        env: dict[int, Rep] = {}
        names: list[str] = []
        reduce: list[bool] = []
        bound: list[frozenset[int]] = []
        for iv, value in zip(iter_vars, realize.iter_values):
            var = iv.var
            env[var.__chandle__()] = rep = evaluate(value, {})
            names.append(var.name)
            reduce.append(int(iv.iter_type) != 0)
            bound.append(frozenset(h for h, c in rep[1].items() if c))
        writes = [self.access(region, env) for region in blk.writes]
        reads = [self.access(region, env) for region in blk.reads]
        name = blk.name_hint
        match = _DECOMPOSED.match(name)
        family, is_init = (match.group(1), match.group(2) == "init") if match else (name, False)
        index = len(self.blocks)
        self.blocks.append(
            Block(index, name, family, is_init, tuple(self.chain), tuple(names), tuple(reduce),
                  blk.annotations.get(TILING_ANN) is not None, writes[0] if writes else None, reads, tuple(bound))
        )
        for loop in self.chain:
            self.loops[loop].blocks.append(index)
        if blk.init is not None:
            self.stmt(blk.init)
        self.stmt(blk.body)

    def access(self, region: Any, env: dict[int, Rep]) -> Access:
        buf = region.source
        handle = buf.__chandle__()
        shape = self.shapes.get(handle)
        if shape is None:
            shape = tuple(int(getattr(s, "value", 1)) for s in buf.shape)
            self.shapes[handle] = shape
        flat: Rep = (0, _EMPTY)
        stride = 1
        ranges = list(region.region)
        for dim in range(len(ranges) - 1, -1, -1):
            value = evaluate(ranges[dim].min, env)
            if stride != 1:
                value = (value[0] * stride, {k: v * stride for k, v in value[1].items()})
            flat = _add(flat, value, 1)
            stride *= shape[dim] if dim < len(shape) else 1
        return Access(buf.name, handle, flat[0], dict(flat[1]), str(buf.scope()), max(1, buf.dtype.bits // 8))


def extract(func: "tvm.tirx.PrimFunc") -> LoopProgram:
    """Loops and blocks of a scheduled PrimFunc (`sch.mod["main"]`)."""
    walker = _Walker()
    body = func.body
    if type_key(body) == "s_tir.SBlockRealize":  # the implicit root block
        root = body.block
        walker.stmt(root.body)
    else:
        walker.stmt(body)
    return LoopProgram(walker.loops, walker.blocks)
