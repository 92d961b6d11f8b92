"""Shared memory a GPU schedule allocates per thread block, sized before lowering.

On CUDA, VerifyGPUCode lowers the whole program (18 ms of a 26 ms candidate for ResNet-18 C6)
and rejects most random tilings that keep the thread limits (69% on C6, 85% on dense 1024³).
All of those seen on nine workloads were over the target's `max_shared_memory_per_block`. The
five passes below size each shared buffer as lowering does (`CompactBufferAllocation`: the region
one thread block reads; `InjectSoftwarePipeline`: one copy per pipeline stage that a buffer
spans, three or four on sm_90's multi-stage spaces), so such a schedule is dropped for a fifth of
the cost. Lowering can only pad a buffer, never shrink it further, so no schedule that
VerifyGPUCode accepts is dropped.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from metatune.env.tvm_nodes import type_key

if TYPE_CHECKING:
    import tvm

SHARED_SCOPES = ("shared", "shared.dyn")


def shared_memory_limit(target: "tvm.target.Target") -> int | None:
    """Bytes of shared memory a thread block may use on `target`; None where there is no such limit."""
    if target.kind.name != "cuda":
        return None
    limit = target.attrs.get("max_shared_memory_per_block")
    return int(limit) if limit is not None else None


def shared_memory_bytes(mod: "tvm.IRModule") -> int | None:
    """Bytes of the shared buffers of a scheduled (not yet lowered) module's `main`, compacted and
    multi-buffered; None when the passes cannot size it (then the postprocessors decide)."""
    try:
        sized = _sizing()(mod)
    except RuntimeError:  # a TVM error: VerifyGPUCode's own lowering decides instead
        return None
    total = 0
    for buffer in _allocated_buffers(sized["main"].body):
        if buffer.scope() in SHARED_SCOPES:
            total += math.prod(int(extent) for extent in buffer.shape) * buffer.dtype.itemsize
    return total


@functools.lru_cache(maxsize=1)
def _sizing() -> Any:
    """The passes that size buffers as lowering does, built once (this runs for every GPU candidate)."""
    import tvm
    from tvm.s_tir import transform

    return tvm.transform.Sequential([
        transform.LowerInitBlock(), transform.PlanAndUpdateBufferAllocationLocation(),
        transform.ConvertBlocksToOpaque(), transform.CompactBufferAllocation(),
        transform.InjectSoftwarePipeline(),
    ])


def _allocated_buffers(node: Any) -> list[Any]:
    """Every buffer a block in this statement tree allocates."""
    key = type_key(node)
    if key == "tirx.SeqStmt":
        return [b for child in node.seq for b in _allocated_buffers(child)]
    if key == "s_tir.SBlockRealize":
        block = node.block
        return [*block.alloc_buffers, *_allocated_buffers(block.body)]
    if key == "tirx.IfThenElse":
        found = _allocated_buffers(node.then_case)
        return found + _allocated_buffers(node.else_case) if node.else_case is not None else found
    body = getattr(node, "body", None)  # For, AttrStmt, LetStmt, DeclBuffer, ...; stores have none
    return _allocated_buffers(body) if body is not None else []
