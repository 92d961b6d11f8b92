"""PyTorch networks (registry, `FILE.py:CALLABLE`, `torchvision:NAME`) as sources to tune.

BatchNorm is folded into the preceding convolution before export: Relax keeps an inference
BatchNorm as its own elementwise tasks, and tuning time would go to them. The folded network
is what TVM compiles and what PyTorch eager is timed on; TVM's output is checked against the
unfolded one, the network as the user wrote it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from metatune import MetatuneError, first_line
from metatune.workload.model_source import (
    TORCHVISION_INPUT,
    InputSpec,
    ModelSource,
    Shape,
    SourceModel,
    shapes_for,
)
from metatune.workload.networks import MODELS

if TYPE_CHECKING:
    import torch
    import tvm


def _count_batchnorms(module: "torch.nn.Module") -> int:
    from torch import nn

    return sum(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)) for m in module.modules())


def fold_batchnorm(module: "torch.nn.Module") -> tuple["torch.nn.Module", int, int]:
    """A copy with every BatchNorm that directly follows a conv/linear folded into its weights
    (torch.fx's `fuse`), and how many were folded and left."""
    from torch.fx.experimental.optimization import fuse

    before = _count_batchnorms(module)
    folded = fuse(module)
    left = _count_batchnorms(folded)
    return folded, before - left, left


def import_torchvision() -> Any:
    """torchvision, also where only its CUDA wheel is installed next to a CPU torch: that wheel's
    C++ ops cannot load, and its import then registers fake kernels for `nms`/`qnms` that do not
    exist. Declaring the two schemas lets the import finish; the models use neither op, and
    calling one still fails (no kernel)."""
    import torch

    try:
        import torchvision
    except ImportError as err:
        raise MetatuneError(f"torchvision is not installed ({first_line(err)})") from None
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            raise
        for name in [n for n in list(sys.modules) if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import_torchvision.library = library  # type: ignore[attr-defined]  # kept alive: dropping it undefines
        import torchvision
    return torchvision


def _torchvision_model(name: str) -> "torch.nn.Module":
    torchvision = import_torchvision()
    known = torchvision.models.list_models()
    if name not in known:
        raise MetatuneError(f"unknown torchvision model {name!r}; e.g. "
                            f"{', '.join(n for n in ('resnet18', 'mobilenet_v2', 'efficientnet_b0', 'vit_b_16'))} "
                            f"({len(known)} in torchvision.models.list_models())")
    builder = torchvision.models.get_model_builder(name)
    # weights=None leaves a detection or segmentation model's backbone at its pretrained default:
    # that would download ImageNet weights (and fail offline) instead of drawing them from the seed
    untrained = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        untrained["weights_backbone"] = None
    try:
        return builder(**untrained)
    except Exception as err:
        raise MetatuneError(f"--model torchvision:{name}: building it raised {first_line(err)}") from None


def _raised(err: BaseException) -> str:
    """What a user's code did instead of returning: an exception, or a sys.exit (which would end metatune)."""
    if isinstance(err, SystemExit):
        return (f"called sys.exit({err.code!r}): keep a script's command-line part under "
                "`if __name__ == \"__main__\":`")
    return f"raised {first_line(err)}"


@contextmanager
def _own_argv(path: Path) -> Iterator[None]:
    """sys.argv as `python FILE.py` would set it, while the user's code runs."""
    argv, sys.argv = sys.argv, [str(path)]
    try:
        yield
    finally:
        sys.argv = argv


@contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """torch.export logs a traceback of its own for an op that fails on fake tensors; the one-line error
    metatune raises says the same, so the log is held back while the model is captured."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _python_model(spec: str) -> "torch.nn.Module":
    """Run FILE.py (its folder first on sys.path, so it can import its neighbours) and call CALLABLE()."""
    import torch

    file, _, attr = spec.rpartition(":")
    path = Path(file).resolve()
    name = "metatune_model_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    code = importlib.util.module_from_spec(module_spec)
    # registered as an import would be: dataclasses (and pickle, typing) look a class's module up there
    sys.modules[name] = code
    sys.path.insert(0, str(path.parent))  # until CALLABLE() returns: it may import neighbours lazily
    try:
        with _own_argv(path):  # a script parsing its arguments sees none, not metatune's
            try:
                module_spec.loader.exec_module(code)
            except (Exception, SystemExit) as err:
                del sys.modules[name]
                raise MetatuneError(f"--model {spec}: running {file} {_raised(err)}") from None
            factory = getattr(code, attr, None)
            if not callable(factory):
                raise MetatuneError(f"--model {spec}: {file} has no callable {attr!r}")
            try:
                network = factory()
            except (Exception, SystemExit) as err:
                raise MetatuneError(f"--model {spec}: {attr}() {_raised(err)}") from None
    finally:
        sys.path.remove(str(path.parent))
    if not isinstance(network, torch.nn.Module):
        raise MetatuneError(f"--model {spec}: {attr}() returned an object of type {type(network).__name__}, "
                            "not a torch.nn.Module")
    return network


def _build(source: ModelSource, seed: int) -> tuple["torch.nn.Module", Shape | None]:
    """The network with weights drawn from `seed` (the global RNG left untouched) and the input
    shape it fixes, if any."""
    import torch

    if source.kind == "registry":
        spec = MODELS[source.spec]
        return spec.build(seed), spec.input_shape
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if source.kind == "torchvision":
            return _torchvision_model(source.name), TORCHVISION_INPUT
        return _python_model(source.spec), None


def _numpy_outputs(result: Any) -> list[np.ndarray]:
    """Every tensor of a (nested) output, in order."""
    import torch

    if isinstance(result, torch.Tensor):
        return [result.detach().numpy()]
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        return [out for item in result for out in _numpy_outputs(item)]
    raise MetatuneError(f"the network returns a {type(result).__name__}; metatune handles tensors and "
                        "(nested) tuples, lists and dicts of them")


@dataclass
class TorchModel(SourceModel):
    """A PyTorch network in eval mode and its BatchNorm-folded copy."""

    module: Any = None
    folded: Any = None
    folded_batchnorms: int = 0
    left_batchnorms: int = 0

    @classmethod
    def load(cls, source: ModelSource, seed: int = 0) -> "TorchModel":
        module, fixed = _build(source, seed)
        module = module.eval()
        given = source.input_shapes
        names = [f"input{i}" for i in range(max(len(given), 1))]
        shapes = shapes_for(names, [fixed] if not given else [None] * len(given), given, source.spec)
        model = cls(source, [InputSpec(n, s) for n, s in zip(names, shapes)], seed, module=module, folded=module)
        if _count_batchnorms(module):
            try:
                model.folded, model.folded_batchnorms, model.left_batchnorms = fold_batchnorm(module)
            except Exception as err:  # torch.fx cannot trace data-dependent control flow
                model.left_batchnorms = _count_batchnorms(module)
                model.notes.append(f"BatchNorm not folded (torch.fx cannot trace {source.name}: {first_line(err)}); "
                                   f"its {model.left_batchnorms} BatchNorm layers are tuned as tasks of their own")
        return model

    def _tensors(self, inputs: list[np.ndarray]) -> tuple["torch.Tensor", ...]:
        import torch

        return tuple(torch.from_numpy(x) for x in inputs)

    def to_relax(self) -> "tvm.IRModule":
        import torch
        from tvm.relax.frontend.torch import from_exported_program

        try:
            with _quiet_fake_tensors():
                exported = torch.export.export(self.folded, self._tensors(self.example_inputs()))
        except Exception as err:
            raise MetatuneError(f"torch.export cannot capture {self.source.spec} for inputs "
                                f"{[s.shape for s in self.inputs]}: {first_line(err)}") from None
        try:
            with warnings.catch_warnings():  # the frontend's own use of an API torch deprecates, not the model's
                warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
                return from_exported_program(exported, keep_params_as_input=False)
        except Exception as err:  # the frontend asserts on operators it has no converter for
            raise MetatuneError(f"Relax cannot import {self.source.spec}: {first_line(err)}") from None

    def _run(self, network: "torch.nn.Module", inputs: list[np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            return _numpy_outputs(network(*self._tensors(inputs)))

    def expected_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [out.astype(np.float64) for out in self._run(self.module, inputs)]

    def reference_outputs(self, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
        return self._run(self.folded, inputs) if self.folded is not self.module else None

    def reference_call(self, inputs: list[np.ndarray], threads: int) -> Callable[[], Any]:
        import torch

        torch.set_num_threads(threads)
        tensors, folded = self._tensors(inputs), self.folded
        return lambda: folded(*tensors)

    def export_onnx(self, path: Path) -> None:
        """The network TVM compiles (BatchNorm folded) as an ONNX file with its weights inside
        (torch.onnx's exporter), so that onnxruntime runs the same computation."""
        import onnx
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's progress and deprecation chatter
            program = torch.onnx.export(self.folded, self._tensors(self.example_inputs()), dynamo=True,
                                        optimize=True, verbose=False)
        onnx.save(program.model_proto, path)
