"""Per-loop context features (AutoTVM, Chen et al. 2018, appendix A.2.1) and MetaSchedule's
per-store features for the XGBoost baseline.

Every loop is described along the path from it to the block it belongs to (its *owner*, see
`owners`): the loop's length and annotation, the top-down product of the lengths of all
enclosing loops, the bottom-up product of the lengths on the path, and for a fixed number of
buffer slots of the owner block (slot 0 its output, then its distinct inputs in `reads`
order) the touch count, reuse ratio and stride. Counts are log-scaled as log2(1 + x).

Touch count follows AutoTVM's approximation: the product of the lengths of the loops on the
path whose variable appears in the buffer's index (overlapping windows are not deduplicated).

GPU programs add GPU_FEATURE_NAMES: which thread axis a loop is bound to (blockIdx, vthread,
threadIdx), the launch shape its owner block sees (threads per block, blocks per grid), whether
the owner is a shared-memory or register (local) stage, and two program-wide costs that decide
occupancy and bandwidth: shared-memory bytes per thread block and global-memory accesses per
thread. A template lists the features its device kind uses (CPU templates only the first set).
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from metatune.encode.loopgraph import PARALLEL, SERIAL, UNROLLED, VECTORIZED, Access, LoopGraphError, LoopProgram

NUM_BUFFER_SLOTS = 4
LOOP_FEATURES = (
    "length", "serial", "parallel", "vectorized", "unrolled", "unroll_max_step", "unroll_explicit",
    "topdown", "bottomup",
)
BUFFER_FEATURES = ("touch", "reuse", "stride")
FEATURE_NAMES: tuple[str, ...] = LOOP_FEATURES + tuple(
    f"buf{slot}.{name}" for slot in range(NUM_BUFFER_SLOTS) for name in BUFFER_FEATURES
)
NUM_FEATURES = len(FEATURE_NAMES)
GPU_FEATURE_NAMES: tuple[str, ...] = (
    "blockIdx", "vthread", "threadIdx", "threads_per_block", "blocks_per_grid", "writes_shared", "writes_local",
    "shared_bytes", "global_per_thread",
)
ALL_FEATURE_NAMES = FEATURE_NAMES + GPU_FEATURE_NAMES
_THREAD_COLUMN = {"blockIdx": 0, "vthread": 1, "threadIdx": 2}
_KIND_COLUMN = {SERIAL: 1, PARALLEL: 2, VECTORIZED: 3, UNROLLED: 4}
_BUF0 = len(LOOP_FEATURES)

# Loops made by compute-at / reverse-compute-at / cache stages are named ax0, ax1, ...: they
# belong to the block they were made for, never to the block they are nested in.
_AX_LOOP = re.compile(r"^ax\d+(?:_|$)")


def is_ax_loop(name: str) -> bool:
    return _AX_LOOP.match(name) is not None


def owners(program: LoopProgram) -> list[int]:
    """For each loop, the block it was made for.

    A loop named `ax*` belongs to the last block below it (a block computed at a loop gets
    fresh `ax` loops that enclose only itself and its own producers). Any other loop comes
    from splitting/fusing a block's own loops: it belongs to the block reachable from it
    without crossing `ax` loops, preferring the multi-level-tiled block when several are.
    Within a block family, `*_init` loops belong to the decomposed init block.
    """
    blocks = program.blocks
    result: list[int] = []
    for loop in program.loops:
        below = loop.blocks
        if not below:
            raise LoopGraphError(f"loop {loop.name} encloses no block")
        if is_ax_loop(loop.name):
            family = blocks[below[-1]].family
        else:
            direct = []
            for b in below:
                chain = blocks[b].chain
                pos = chain.index(loop.index)
                if not any(is_ax_loop(program.loops[x].name) for x in chain[pos + 1 :]):
                    direct.append(b)
            families = list(dict.fromkeys(blocks[b].family for b in direct)) or [blocks[below[-1]].family]
            tiled = [f for f in families if any(blocks[b].tiled for b in direct if blocks[b].family == f)]
            family = tiled[0] if tiled else families[-1]
        members = [b for b in below if blocks[b].family == family]
        want_init = loop.name.endswith("_init")
        preferred = [b for b in members if blocks[b].is_init == want_init]
        result.append((preferred or members)[0])
    return result


def _log(x: float) -> float:
    return math.log2(1.0 + x)


def buffer_slots(program: LoopProgram, block: int) -> list[Access]:
    """The owner block's accesses in slot order: its output, then distinct inputs."""
    blk = program.blocks[block]
    slots: list[Access] = []
    seen: set[int] = set()
    for acc in ([blk.write] if blk.write is not None else []) + blk.reads:
        if acc.handle in seen:
            continue
        seen.add(acc.handle)
        slots.append(acc)
    return slots[:NUM_BUFFER_SLOTS]


def loop_features(program: LoopProgram, owner: Sequence[int] | None = None,
                  names: Sequence[str] = FEATURE_NAMES) -> np.ndarray:
    """(number of loops, len(names)) float32 matrix, rows in program order, columns `names`
    (a subset of ALL_FEATURE_NAMES)."""
    owner = owners(program) if owner is None else owner
    feats = _cpu_features(program, owner)
    if tuple(names) == FEATURE_NAMES:
        return feats
    feats = np.concatenate([feats, _gpu_features(program, owner)], axis=1)
    return feats[:, [ALL_FEATURE_NAMES.index(n) for n in names]]


def _thread_axis(tag: str) -> str:
    return tag.split(".")[0]


def _gpu_features(program: LoopProgram, owner: Sequence[int]) -> np.ndarray:
    loops, blocks = program.loops, program.blocks
    feats = np.zeros((len(loops), len(GPU_FEATURE_NAMES)), dtype=np.float32)

    def launch(chain: Sequence[int], axis: str) -> int:
        return math.prod(loops[i].extent for i in chain if _thread_axis(loops[i].thread) == axis)

    threads = max((launch(b.chain, "threadIdx") * launch(b.chain, "blockIdx") for b in blocks), default=1)
    shared_bytes = global_accesses = 0
    for b in blocks:
        executions = math.prod(loops[i].extent for i in b.chain)
        accesses = ([b.write] if b.write is not None else []) + b.reads
        global_accesses += executions * sum(1 for a in accesses if a.scope == "global")
        if b.write is not None and b.write.scope == "shared":
            # The stage's own loops (below its compute-at point) enumerate one tile of the buffer.
            shared_bytes += b.write.element_bytes * math.prod(loops[i].extent for i in b.chain if owner[i] == b.index)
    program_wide = (_log(shared_bytes), _log(global_accesses / max(threads, 1)))
    per_block: dict[int, tuple[float, ...]] = {}  # the owner block's columns 3..8, shared by its loops
    for lp in loops:
        row = feats[lp.index]
        col = _THREAD_COLUMN.get(_thread_axis(lp.thread))
        if col is not None:
            row[col] = 1.0
        b = owner[lp.index]
        if b not in per_block:
            blk = blocks[b]
            scope = blk.write.scope if blk.write is not None else "global"
            per_block[b] = (_log(launch(blk.chain, "threadIdx")), _log(launch(blk.chain, "blockIdx")),
                            float(scope == "shared"), float(scope == "local"), *program_wide)
        row[3:9] = per_block[b]
    return feats


def _cpu_features(program: LoopProgram, owner: Sequence[int]) -> np.ndarray:
    loops = program.loops
    feats = np.zeros((len(loops), NUM_FEATURES), dtype=np.float32)
    topdown = [0] * len(loops)
    per_block: dict[int, tuple[list[int], list[int], list[list[int]], list[Access]]] = {}
    for lp in loops:
        topdown[lp.index] = lp.extent * (topdown[lp.parent] if lp.parent >= 0 else 1)
    for lp in loops:
        b = owner[lp.index]
        info = per_block.get(b)
        if info is None:
            chain = list(program.blocks[b].chain)
            accesses = buffer_slots(program, b)
            n = len(chain)
            bottom = [1] * (n + 1)
            touch = [[1] * (n + 1) for _ in accesses]
            for i in range(n - 1, -1, -1):
                x = loops[chain[i]]
                bottom[i] = bottom[i + 1] * x.extent
                for a, acc in enumerate(accesses):
                    touch[a][i] = touch[a][i + 1] * (x.extent if acc.strides.get(x.var) else 1)
            info = per_block[b] = (chain, bottom, touch, accesses)
        chain, bottom, touch, accesses = info
        pos = chain.index(lp.index)
        row = feats[lp.index]
        row[0] = _log(lp.extent)
        col = _KIND_COLUMN.get(lp.kind)
        if col is not None:
            row[col] = 1.0
        row[5] = _log(lp.unroll_max_step)
        row[6] = 1.0 if lp.unroll_explicit else 0.0
        row[7] = _log(topdown[lp.index])
        row[8] = _log(bottom[pos])
        for a, acc in enumerate(accesses):
            t = touch[a][pos]
            base = _BUF0 + 3 * a
            row[base] = _log(t)
            row[base + 1] = _log(bottom[pos] / t)
            row[base + 2] = _log(abs(acc.strides.get(lp.var, 0)))
    return feats
