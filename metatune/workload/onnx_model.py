"""ONNX files as sources to tune: read as data (protobuf; no code runs), imported by Relax's
ONNX frontend, checked and timed against onnxruntime on the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from metatune import MetatuneError, first_line
from metatune.workload.model_source import InputSpec, ModelSource, SourceModel, shapes_for

if TYPE_CHECKING:
    import tvm


def _declared_shape(value: Any) -> tuple[int | None, ...] | None:
    """An input's shape as the file declares it: None for a dimension it leaves open."""
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim)


@dataclass
class OnnxModel(SourceModel):
    proto: Any = None  # onnx.ModelProto

    @classmethod
    def load(cls, source: ModelSource, seed: int = 0) -> "OnnxModel":
        import onnx
        from onnx import helper

        try:
            proto = onnx.load(source.spec)
            onnx.checker.check_model(source.spec)  # by path: a model over 2 GB (external data) cannot be checked as a proto
        except Exception as err:
            raise MetatuneError(f"{source.spec} is not a valid ONNX model ({first_line(err)})") from None
        initializers = {init.name for init in proto.graph.initializer}
        values = [v for v in proto.graph.input if v.name not in initializers]
        if not values:
            raise MetatuneError(f"{source.spec} has no graph input to feed")
        for value in values:
            if not value.type.HasField("tensor_type"):
                raise MetatuneError(f"input {value.name!r} of {source.spec} is not a tensor")
        names = [v.name for v in values]
        shapes = shapes_for(names, [_declared_shape(v) for v in values], source.input_shapes, source.spec)
        dtypes = [np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)).name for v in values]
        return cls(source, [InputSpec(n, s, d) for n, s, d in zip(names, shapes, dtypes)], seed, proto=proto)

    def to_relax(self) -> "tvm.IRModule":
        from tvm.relax.frontend.onnx import from_onnx

        try:
            return from_onnx(self.proto, shape_dict={s.name: list(s.shape) for s in self.inputs},
                             dtype_dict={s.name: s.dtype for s in self.inputs}, keep_params_in_input=False)
        except Exception as err:  # OpNotImplemented names every operator the frontend lacks
            raise MetatuneError(f"Relax cannot import {self.source.spec}: {first_line(err)}") from None

    def _session(self, threads: int | None = None) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        return onnxruntime.InferenceSession(self.proto.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])

    def _feed(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        return {spec.name: x for spec, x in zip(self.inputs, inputs)}

    def expected_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        outputs = self._session().run(None, self._feed(inputs))
        return [np.asarray(out).astype(np.float64) for out in outputs]

    def reference_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
        return None  # onnxruntime runs the file as it is

    def reference_call(self, inputs: list[np.ndarray], threads: int) -> Callable[[], Any]:
        session, feed = self._session(threads), self._feed(inputs)
        return lambda: session.run(None, feed)
