"""A PyTorch model as a Relax module, its MetaSchedule tasks, and its compiled form.

BatchNorm is folded into the preceding convolution in PyTorch before export: Relax keeps an
inference BatchNorm as its own elementwise tasks, and tuning time would go to them.
Tasks are extracted after the passes `compile_relax` runs before it consults the database
(library dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR): on
the frontend's module `extract_tasks` finds no task at all, and only functions fused the
same way at compile time find their tuning records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metatune import MetatuneError

if TYPE_CHECKING:
    import torch
    import tvm
    from tvm.s_tir.meta_schedule import ExtractedTask, TuneContext

    from metatune.workload.networks import ModelSpec


@dataclass
class ImportedModel:
    """A model ready to tune: the PyTorch reference and its Relax form (weights as constants)."""

    name: str
    module: "torch.nn.Module"  # eval mode, BatchNorm not folded: the reference output
    folded: "torch.nn.Module"  # BatchNorm folded: the network that is compiled
    example: "torch.Tensor"
    mod: "tvm.IRModule"  # Relax, BatchNorm folded
    folded_batchnorms: int
    left_batchnorms: int  # BatchNorm layers not directly after a convolution


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


def import_model(spec: "ModelSpec", seed: int = 0) -> ImportedModel:
    """Build the model, fold BatchNorm, export it with torch.export and translate it to Relax."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    module = spec.build(seed)
    example = spec.example_input(seed)
    folded, n_folded, n_left = fold_batchnorm(module)
    mod = from_exported_program(torch.export.export(folded, (example,)), keep_params_as_input=False)
    return ImportedModel(spec.name, module, folded, example, mod, n_folded, n_left)


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

    return ms.TuneContext(mod=task.dispatched[0], target=target, space_generator="post-order-apply",
                          task_name=task.task_name, **options)


def compile_model(mod: "tvm.IRModule", target: "tvm.target.Target", database: Any) -> Any:
    """The model compiled with the best schedule of each task in `database`; a task without
    records is compiled unscheduled (on CPU, Relax applies no default schedule)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.relax_integration.compile_relax(database, mod, target, params=None)
