"""The arguments a runner allocates to time a candidate: TVM's random fill, with integer tensors zeroed.

A network's tasks take integer tensors as indices (`take`, gather, embedding lookups). TVM's runners
fill every argument at random, so such a task reads out of bounds and its runner worker dies ("Subprocess
terminated": the encoder layer's `take` task got no successful trial in 200). Zero is an index each of
those operators accepts, and an integer kernel's timing does not depend on the values it reads. The
operator families metatune samples take floats only: their arguments are TVM's, unchanged."""

from __future__ import annotations

from typing import Any, Callable

RANDOM_FILL = "tvm.contrib.random.random_fill_for_measure"


def _fill(random_fill: Callable[[Any], None]) -> Callable[[Any], None]:
    """`random_fill` for floating-point tensors, zeros for integer and boolean ones."""
    import numpy as np

    def fill(tensor: Any) -> None:
        dtype = np.dtype(str(tensor.dtype))
        if dtype.kind in "iub":
            tensor.copyfrom(np.zeros(tuple(tensor.shape), dtype=dtype))
        else:
            random_fill(tensor)

    return fill


def alloc_local(device: Any, args_info: Any, alloc_repeat: int) -> list[list[Any]]:
    """LocalRunner's `f_alloc_argument` (runs in its worker process)."""
    import tvm
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    return alloc_argument_common(_fill(tvm.get_global_func(RANDOM_FILL)), device, args_info, alloc_repeat)


def alloc_rpc(session: Any, device: Any, args_info: Any, alloc_repeat: int) -> list[list[Any]]:
    """RPCRunner's `f_alloc_argument` (runs in its worker process, allocating on the server)."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    return alloc_argument_common(_fill(session.get_function(RANDOM_FILL)), device, args_info, alloc_repeat)
