"""Runner arguments: integer tensors are zero (in-bounds indices), floats TVM's random fill."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool", "float32"])
def test_integer_tensors_are_zero_and_floats_random(dtype):
    import tvm

    from metatune.measure.arguments import RANDOM_FILL, _fill

    tensor = tvm.runtime.empty((64,), dtype=dtype, device=tvm.cpu())
    tensor.copyfrom(np.ones(64, dtype=dtype))
    _fill(tvm.get_global_func(RANDOM_FILL))(tensor)
    values = tensor.numpy()
    if dtype == "float32":  # TVM's fill can repeat values (32 distinct of 64 seen after other tests): not constant
        assert len(np.unique(values)) > 8 and not np.all(values == 1)
    else:
        assert not values.any()


def test_a_take_with_an_index_tensor_is_timed(target):
    """What Relax makes of x[i] or an embedding lookup: `take` in fast mode reads wherever its index points;
    TVM's random fill sent it out of bounds and killed the runner's worker."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from metatune.measure.measurer import Measurer

    data = te.placeholder((3, 128, 768), "float32", name="data")
    index = te.placeholder((), "int64", name="index")
    taken = topi.take(data, index, axis=0, mode="fast")
    mod = tvm.IRModule({"main": te.create_prim_func([data, index, taken])})
    with Measurer(target) as measurer:
        (built,) = measurer.builder.build([BuilderInput(mod, target)])
        assert built.error_msg is None, built.error_msg
        inputs = [RunnerInput(built.artifact_path, measurer.device_type, ArgInfo.from_prim_func(mod["main"]))] * 5
        results = [future.result() for future in measurer.runner.run(inputs)]
    assert [r.error_msg for r in results] == [None] * 5
    assert all(r.run_secs for r in results)
