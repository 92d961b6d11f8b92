"""The NumPy check of compiled kernels: what it must not let through."""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm.script import tirx as T

from metatune.measure.check import output_error, run_on_inputs, worst_output_error
from metatune.workload.operators import Workload


@T.prim_func
def writes_nothing(a: T.Buffer((16, 24), "float32"), w: T.Buffer((32, 24), "float32"), b: T.Buffer((32,), "float32"),
                   out: T.Buffer((16, 32), "float32")):
    T.evaluate(0)


def test_an_output_element_the_kernel_never_writes_fails_the_check():
    """Where the reference is 0 (a ReLU's negative half; here all of it) an unwritten output must not read as right."""
    workload = Workload.parse("dense_bias_relu:m=16,n=32,k=24")
    a, w, b = workload.random_inputs()
    inputs = [a, w, b - 100.0]
    expected = workload.reference(inputs)
    assert not expected.any()
    out = run_on_inputs(tvm.compile(tvm.IRModule({"main": writes_nothing}), target="llvm"), workload, inputs,
                        expected.shape)
    assert math.isnan(output_error(out, expected))


def test_the_worst_error_of_several_outputs_keeps_a_nan_wherever_it_is():
    ok, broken = np.ones(3, "float32"), np.array([1.0, np.nan, 1.0], "float32")
    assert worst_output_error([ok, ok], [ok, ok]) == 0.0
    assert math.isnan(worst_output_error([ok, broken], [ok, ok]))  # Python's max(0.0, nan) is 0.0
    assert math.isnan(worst_output_error([broken, ok], [ok, ok]))
