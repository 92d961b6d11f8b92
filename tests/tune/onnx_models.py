"""Small ONNX files built with onnx.helper (no exporter needed): what a user brings as PATH.onnx."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def small_cnn(path: Path, batch: int | str = 1, op: str = "Relu") -> Path:
    """Conv(3->8, 3x3) + bias, `op`, global average pooling, Flatten, Gemm(8->10): batch `batch`
    (a string: a dynamic dimension of that name), 16x16 images; seeded weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
               "b": rng.standard_normal(8).astype(np.float32) * 0.1,
               "fc_w": rng.standard_normal((10, 8)).astype(np.float32) * 0.3,
               "fc_b": rng.standard_normal(10).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path
