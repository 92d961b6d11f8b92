"""A network as a Relax module, its MetaSchedule tasks, and its compiled form.

Tasks are extracted after the passes `compile_relax` runs before it consults the database
(library dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR): on
the frontend's module `extract_tasks` finds no task at all, and only functions fused the
same way at compile time find their tuning records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metatune import MetatuneError
from metatune.env.tvm_setup import import_tensor_intrinsics
from metatune.workload.model_source import ModelSource, SourceModel
from metatune.workload.onnx_model import OnnxModel
from metatune.workload.torch_model import TorchModel

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir.meta_schedule import ExtractedTask, TuneContext


def load_model(source: ModelSource, seed: int = 0) -> SourceModel:
    """The network of a `--model SPEC` (imports PyTorch or ONNX; runs a FILE.py SPEC's file)."""
    return (OnnxModel if source.kind == "onnx" else TorchModel).load(source, seed)


@dataclass
class ImportedModel:
    """A network ready to tune: the loaded source and its Relax form (weights as constants)."""

    model: SourceModel
    mod: "tvm.IRModule"

    @property
    def name(self) -> str:
        return self.model.source.name


def import_model(source: ModelSource, seed: int = 0) -> ImportedModel:
    """Load the network and translate it to Relax (PyTorch: BatchNorm folded, then torch.export)."""
    model = load_model(source, seed)
    return ImportedModel(model, model.to_relax())


def tuning_passes(target: "tvm.target.Target") -> list[Any]:
    """The passes `ms.relax_integration.compile_relax` applies before it looks tasks up."""
    from tvm import relax
    from tvm.relax import pipeline

    return [
        *pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def extract_tasks(mod: "tvm.IRModule", target: "tvm.target.Target") -> list["ExtractedTask"]:
    """MetaSchedule's tasks of a Relax module: one per distinct fused TIR function."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with target, tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(tuning_passes(target))(mod)
    tasks = ms.relax_integration.extract_tasks(fused, target)
    if not tasks:
        raise MetatuneError("the model has no tunable TIR function after fusion")
    return tasks


def task_context(task: "ExtractedTask", target: "tvm.target.Target", **options: Any) -> "TuneContext":
    """The TuneContext of an extracted task, with MetaSchedule's default design-space generator."""
    from tvm.s_tir import meta_schedule as ms

    import_tensor_intrinsics(target)  # a TuneContext imports them, 20-100 s the slow way
    return ms.TuneContext(mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                          task_name=task.task_name, **options)


def compile_model(mod: "tvm.IRModule", target: "tvm.target.Target", database: Any) -> Any:
    """The model compiled with the best schedule of each task in `database`; a task without
    records is compiled unscheduled (on CPU, Relax applies no default schedule)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.relax_integration.compile_relax(database, mod, target, params=None)
