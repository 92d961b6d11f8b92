"""MetaSchedule design spaces of a workload, and random concrete schedules drawn from them.

A design space is the trace that MetaSchedule's PostOrderApply produces for the target's
default schedule rules. Replaying that trace without its decisions re-samples every sampling
instruction (tile sizes, unroll step, compute location); the postprocessors then make it a
concrete, buildable schedule or reject it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import MetatuneError
from .workloads import Workload

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import Schedule, Trace
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext


class SpaceError(MetatuneError):
    """No design space covers a workload, or a configuration does not fit its space."""


@dataclass
class Candidate:
    """A concrete schedule after postprocessing, and which design space it came from."""

    space_index: int
    sch: "Schedule"

    @property
    def trace(self) -> "Trace":
        return self.sch.trace

    @property
    def trace_key(self) -> str:
        """Identity of a configuration: the printed trace, decisions included."""
        return str(self.sch.trace)

    def measure_candidate(self) -> "MeasureCandidate":
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        return MeasureCandidate(self.sch, ArgInfo.from_entry_func(self.sch.mod, remove_preproc=True))


class DesignSpaces:
    """The design spaces of one workload on one target, with their postprocessors."""

    def __init__(self, workload: Workload, target: "tvm.target.Target") -> None:
        from tvm.s_tir import meta_schedule as ms

        from .tvm_setup import import_tensor_intrinsics

        import_tensor_intrinsics()
        self.workload = workload
        self.target = target
        self.mod = workload.irmodule()
        self.context: "TuneContext" = ms.TuneContext(
            mod=self.mod, target=target, space_generator="post-order-apply", task_name=workload.family
        )
        self.spaces: list["Schedule"] = list(self.context.space_generator.generate_design_space(self.mod))
        self.postprocs = list(self.context.space_generator.postprocs)
        self.rejected: collections.Counter[str] = collections.Counter()
        if not self.spaces:
            raise SpaceError(f"no MetaSchedule design space covers {workload}")

    def __len__(self) -> int:
        return len(self.spaces)

    def postprocess(self, sch: "Schedule") -> bool:
        """Apply the postprocessors in place; False when the schedule is invalid."""
        sch.enter_postproc()
        return all(p.apply(sch) for p in self.postprocs)

    def replay(self, space_index: int, trace: "Trace", seed: int) -> Candidate | None:
        """Replay a design-space trace (decisions it lacks are sampled) and postprocess it."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.mod, seed=seed)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
        except (ValueError, RuntimeError) as err:
            # Some sampled decisions make a later primitive invalid (e.g. a compute location that
            # inlines a block the trace still refers to): the configuration is not in the space.
            self.rejected[f"replay: {str(err).strip().splitlines()[-1][:80]}"] += 1
            return None
        if not self.postprocess(sch):
            self.rejected["postprocessor"] += 1
            return None
        return Candidate(space_index, sch)

    def random_candidate(self, rng: np.random.Generator) -> Candidate | None:
        """One random configuration of a random design space; None if postprocessing rejects it."""
        from tvm.s_tir import Trace

        index = int(rng.integers(len(self.spaces)))
        blank = Trace(self.spaces[index].trace.insts, {})
        return self.replay(index, blank, seed=int(rng.integers(1, 2**31 - 1)))

    def random_candidates(
        self, n: int, seed: int = 0, exclude: set[str] | None = None, max_attempts: int | None = None
    ) -> list[Candidate]:
        """Up to `n` distinct random valid configurations, skipping keys in `exclude`."""
        rng = np.random.default_rng(seed)
        seen = set(exclude or ())
        found: list[Candidate] = []
        for _ in range(max_attempts or 20 * n + 100):
            if len(found) >= n:
                break
            cand = self.random_candidate(rng)
            if cand is None or cand.trace_key in seen:
                continue
            seen.add(cand.trace_key)
            found.append(cand)
        return found
