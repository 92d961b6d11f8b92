"""Where a network to tune comes from (`metatune tune --model SPEC`) and what every kind of
network offers the tuner: its inputs, its Relax module, and the source's own output and call.

A SPEC is one of
* a registry name (`resnet18`, `tinycnn`): seeded PyTorch networks with calibrated BatchNorm;
* `path/to/model.onnx`: an ONNX file (read as data: loading it runs no code), referenced by
  onnxruntime;
* `path/to/file.py:callable`: a Python file and a function in it returning an `nn.Module`; the
  file is the user's own code and is executed, as `python file.py` would;
* `torchvision:NAME`: a torchvision model with random weights (nothing is downloaded).
Input shapes come from `--input-shape` (one per input, in order), else from the model where it
fixes them (ONNX files, registry networks, torchvision's 1x3x224x224 images).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.workload.networks import MODELS

if TYPE_CHECKING:
    import tvm

Kind = Literal["registry", "onnx", "python", "torchvision"]
Shape = tuple[int, ...]

TORCHVISION_PREFIX = "torchvision:"
TORCHVISION_INPUT: Shape = (1, 3, 224, 224)
SPEC_FORMS = f"{', '.join(MODELS)}, PATH.onnx, FILE.py:CALLABLE or {TORCHVISION_PREFIX}NAME"


def parse_shape(text: str) -> Shape:
    """`1,3,224,224` -> (1, 3, 224, 224); positive integers only."""
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise MetatuneError(f"--input-shape {text!r} is not a comma-separated list of integers, "
                            "e.g. 1,3,224,224") from None
    if not shape or min(shape) < 1:
        raise MetatuneError(f"--input-shape {text!r}: every dimension must be a positive integer")
    return shape


@dataclass(frozen=True)
class InputSpec:
    """One input of the network: its name in the model, its shape and NumPy dtype."""

    name: str
    shape: Shape
    dtype: str = "float32"

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """Normal floats; integers and booleans as 0/1 (safe as indices and masks)."""
        if np.issubdtype(np.dtype(self.dtype), np.floating):
            return rng.standard_normal(self.shape).astype(self.dtype)
        return rng.integers(0, 2, size=self.shape).astype(self.dtype)


@dataclass(frozen=True)
class ModelSource:
    """A parsed `--model SPEC` with the input shapes given on the command line (may be empty)."""

    spec: str
    kind: Kind
    input_shapes: tuple[Shape, ...] = ()

    @classmethod
    def parse(cls, spec: str, input_shapes: Sequence[Shape] = ()) -> "ModelSource":
        """Check the SPEC's form and that its file exists (cheap: nothing is imported or loaded)."""
        shapes = tuple(tuple(s) for s in input_shapes)
        if spec in MODELS:
            if shapes and shapes != (MODELS[spec].input_shape,):
                raise MetatuneError(f"{spec} is tuned for input {','.join(map(str, MODELS[spec].input_shape))}; "
                                    "drop --input-shape or use torchvision:/FILE.py: for another shape")
            return cls(spec, "registry", shapes)
        if spec.startswith(TORCHVISION_PREFIX):
            if not spec[len(TORCHVISION_PREFIX):]:
                raise MetatuneError(f"--model {spec!r}: name the torchvision model, e.g. torchvision:mobilenet_v2")
            return cls(spec, "torchvision", shapes)
        path, sep, attr = spec.rpartition(":")
        if sep and path.endswith(".py"):
            if not attr.isidentifier():
                raise MetatuneError(f"--model {spec!r}: {attr!r} is not a Python name")
            _require_file(Path(path))
            return cls(spec, "python", shapes)
        if spec.endswith(".py"):
            raise MetatuneError(f"--model {spec!r}: name the function that returns the network, as FILE.py:CALLABLE")
        if Path(spec).suffix in (".pt", ".pth", ".ckpt", ".bin", ".safetensors"):
            raise MetatuneError(f"--model {spec!r} holds weights, not a network (and a pickle is never loaded): "
                                "write FILE.py with a function that builds the network and loads them, and give "
                                "FILE.py:CALLABLE")
        if spec.endswith(".onnx") or Path(spec).is_file():
            _require_file(Path(spec))
            return cls(spec, "onnx", shapes)
        raise MetatuneError(f"unknown model {spec!r}; give {SPEC_FORMS}")

    @property
    def name(self) -> str:
        """A short name for tables and file names: the registry or torchvision name, the file's stem."""
        if self.kind == "registry":
            return self.spec
        if self.kind == "torchvision":
            return self.spec[len(TORCHVISION_PREFIX):]
        path, _, attr = self.spec.rpartition(":") if self.kind == "python" else (self.spec, "", "")
        return Path(path).stem + (f"-{attr}" if attr else "")

    @property
    def library(self) -> str:
        """What runs the source network as it is: the reference TVM is checked and timed against."""
        return "onnxruntime" if self.kind == "onnx" else "PyTorch eager"

def _require_file(path: Path) -> None:
    if not path.is_file():
        raise MetatuneError(f"--model: no such file {path}")


@dataclass
class SourceModel(ABC):
    """A loaded network: inputs, Relax form, and the source library's output and call."""

    source: ModelSource
    inputs: list[InputSpec]
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def example_inputs(self) -> list[np.ndarray]:
        """The inputs verification and timing use, the same in every process for one seed."""
        rng = np.random.default_rng(self.seed)
        return [spec.random(rng) for spec in self.inputs]

    @abstractmethod
    def to_relax(self) -> "tvm.IRModule":
        """The network as a Relax module with its weights as constants."""

    @abstractmethod
    def expected_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The source network's outputs (float64 where floating), what TVM's are checked against."""

    @abstractmethod
    def reference_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
        """The outputs of the network the reference times where it is not the source itself (a
        PyTorch network with BatchNorm folded), to check that transformation; else None."""

    @abstractmethod
    def reference_call(self, inputs: list[np.ndarray], threads: int) -> Callable[[], Any]:
        """The call timed as the reference, on `threads` threads."""


def shapes_for(names: Sequence[str], declared: Sequence[tuple[int | None, ...] | None],
               given: tuple[Shape, ...], spec: str) -> list[Shape]:
    """Each input's shape: `--input-shape` where given (checked against what the model fixes),
    else the model's own; a dynamic dimension without `--input-shape` is an error naming it."""
    if given and len(given) != len(names):
        raise MetatuneError(f"{spec} has {len(names)} input(s) ({', '.join(names)}); --input-shape was given "
                            f"{len(given)} time(s)")
    shapes = []
    for i, (name, fixed) in enumerate(zip(names, declared)):
        if given:
            shape = given[i]
            if fixed is not None and (len(fixed) != len(shape) or any(
                    f is not None and f != s for f, s in zip(fixed, shape))):
                raise MetatuneError(f"--input-shape {','.join(map(str, shape))} does not fit input {name!r} "
                                    f"of {spec}, whose shape is {_show(fixed)}")
            shapes.append(shape)
        elif fixed is None or any(d is None for d in fixed):
            declared_as = f" {_show(fixed)}" if fixed is not None else ""
            raise MetatuneError(f"input {name!r} of {spec} has no fixed shape{declared_as}; "
                                "give it with --input-shape, e.g. --input-shape 1,3,224,224")
        else:
            shapes.append(tuple(int(d) for d in fixed))  # type: ignore[arg-type]
    return shapes


def _show(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
