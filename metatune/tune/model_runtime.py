"""Run a compiled model on the CPU, check it against its source network, and time it.

TVM uses every usable core (TVM_NUM_THREADS, set by the Measurer before the runtime starts its
thread pool); a timing is the median of repeated runs, each repeat at least `min_repeat_ms`
long. The source library (PyTorch eager, onnxruntime) is timed against it by
`metatune.measure.reference_timing`.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from metatune import MetatuneError, first_line
from metatune.env.tvm_setup import without_vm_scope_logs
from metatune.fileio import write_atomic
from metatune.measure.check import WrongResultError, worst_output_error
from metatune.measure.measurer import median_latency
from metatune.workload.model_source import InputSpec, SourceModel

MIN_REPEAT_MS = 50  # each timed repeat lasts at least this long

MODEL_RTOL = 1e-4  # float32 on both sides; BatchNorm folding alone costs ~1e-6


class CompiledModel:
    """A compiled Relax model on the Relax VM (CPU), called with NumPy inputs; `executable` is
    what `relax.build` returns or a library loaded back with `tvm.runtime.load_module`."""

    def __init__(self, executable: Any) -> None:
        import tvm
        from tvm import relax

        self.device = tvm.cpu(0)
        self.vm = relax.VirtualMachine(executable, self.device)

    def _tensors(self, inputs: list[np.ndarray]) -> list[Any]:
        import tvm

        return [tvm.runtime.tensor(x, self.device) for x in inputs]

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Every output, in order (the frontends return nested tuples)."""
        return _leaves(self.vm["main"](*self._tensors(inputs)))

    def latency_ms(self, inputs: list[np.ndarray], repeat: int, min_repeat_ms: int = MIN_REPEAT_MS) -> float:
        timer = self.vm.time_evaluator("main", self.device, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return median_latency(timer(*self._tensors(inputs)).results) * 1e3


def _leaves(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [leaf for item in out for leaf in _leaves(item)]


def verify(compiled: CompiledModel, model: SourceModel, inputs: list[np.ndarray],
           rtol: float = MODEL_RTOL) -> tuple[float, float]:
    """(max error over the outputs, each relative to its largest magnitude; seconds of the TVM
    run); raises WrongResultError when TVM's outputs disagree with the source network's."""
    expected = model.expected_outputs(inputs)
    t0 = time.perf_counter()
    outputs = compiled(inputs)
    run_s = time.perf_counter() - t0
    library = model.source.library
    if [o.shape for o in outputs] != [e.shape for e in expected]:
        raise WrongResultError(f"compiled model returns shapes {[o.shape for o in outputs]}, {library} "
                               f"{[e.shape for e in expected]}")
    err = worst_output_error(outputs, expected)
    if not (np.isfinite(err) and err <= rtol):
        raise WrongResultError(f"compiled model disagrees with {library}: max relative error {err:.2e} > {rtol:g}")
    return err, run_s


def repeats_for(run_s: float, budget_s: float, lo: int = 3, hi: int = 15) -> int:
    """How many timed repeats fit the time budget, given one run's time: a repeat lasts one run, or
    about MIN_REPEAT_MS when a run is shorter (TVM then runs the model several times per repeat)."""
    return int(min(hi, max(lo, budget_s // max(run_s, MIN_REPEAT_MS / 1e3))))


def inputs_file(library: Path) -> Path:
    """The file next to an exported library that names its inputs: `model.so` -> `model.json`."""
    return library.with_suffix(".json")


def export_library(executable: Any, inputs: list[InputSpec], path: Path, about: dict[str, Any]) -> None:
    """Write the compiled model as a shared library (linked by TVM with the system's C++ compiler)
    and its inputs (name, shape, dtype) with `about` next to it; both replace older files whole."""
    path = Path(path)
    if not path.parent.is_dir():
        raise MetatuneError(f"--export {path}: no such folder {path.parent}")
    tmp = path.with_name(f".{path.stem}.{secrets.token_hex(6)}.so")
    try:
        with without_vm_scope_logs():
            executable.export_library(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    write_atomic(inputs_file(path), (json.dumps({**about, "inputs": [asdict(i) for i in inputs]}, indent=2)
                                     + "\n").encode())


def load_library(path: Path) -> tuple[CompiledModel, list[InputSpec]]:
    """An exported model (an existing file: `metatune run` checks before TVM is imported) and the inputs
    written next to it (an empty list when that file is gone)."""
    import tvm

    path = Path(path)
    try:
        with without_vm_scope_logs():
            compiled = CompiledModel(tvm.runtime.load_module(str(path)))
    except Exception as err:
        raise MetatuneError(f"{path} is not a model exported by metatune tune --export ({first_line(err)})") from None
    info = inputs_file(path)
    if not info.is_file():
        return compiled, []
    inputs = json.loads(info.read_text())["inputs"]
    return compiled, [InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in inputs]
