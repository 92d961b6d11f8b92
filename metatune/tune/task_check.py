"""Which task's kernel makes a compiled network wrong.

A whole network is checked against its source library, which says that the network is wrong but not
where. Each task's deployed schedule (what `compile_relax` takes from the database: the lowest mean)
is run here against the task's own function compiled unscheduled for this machine's CPU, on the same
random arguments: schedules never change what a function computes, so where the two disagree the
deployed kernel is wrong (some schedules trip code-generation bugs), as a single operator's kernel is
found wrong against NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from metatune.env.device import local_fingerprint
from metatune.measure.check import DEFAULT_RTOL, device_type, output_error
from metatune.measure.database import best_so_far, record_of, trial_lines

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir.meta_schedule import ExtractedTask


@dataclass
class WrongTask:
    """A task whose deployed kernel (`trial`: an index into `trial_lines`) disagrees with its function."""

    name: str
    mod: Any
    trial: int
    error: float


def random_arguments(func: Any, seed: int = 0) -> list[np.ndarray]:
    """Arguments for every parameter of a PrimFunc (inputs and outputs alike), so that both runs start
    from the same memory: floats standard normal, integers 0 (indices: random ones would read out of
    bounds, as the runners' do, README)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(seed)
    out = []
    for info in ArgInfo.from_prim_func(func):
        shape, dtype = tuple(int(x) for x in info.shape), str(info.dtype)
        if dtype.startswith("float"):
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def _run(rt_mod: Any, args: Sequence[np.ndarray], device: str) -> list[np.ndarray]:
    import tvm

    dev = tvm.device(device, 0)
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    rt_mod["main"](*tensors)
    return [t.numpy() for t in tensors]


def kernel_error(task_mod: "tvm.IRModule", scheduled: "tvm.IRModule", target: "tvm.target.Target") -> float:
    """Largest error, relative to the reference's largest magnitude, over every argument after one run of
    the scheduled function on `target` and of the unscheduled one on this CPU; NaN where one run made a
    value non-finite that the other did not."""
    import tvm

    args = random_arguments(task_mod["main"])
    expected = _run(tvm.compile(task_mod, target=local_fingerprint().tvm_target()), args, "cpu")
    got = _run(tvm.compile(scheduled, target=target), args, device_type(target))
    errors = [output_error(*_finite_alike(g, e)) for g, e in zip(got, expected)]
    return float(np.max(errors)) if errors else 0.0  # NaN (a value only one run made non-finite) stays NaN


def _finite_alike(got: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both with 0 where both are non-finite: a task that takes the log of a negative input gives NaN
    scheduled or not, which is agreement."""
    both = ~np.isfinite(got) & ~np.isfinite(expected)
    return np.where(both, 0, got), np.where(both, 0, expected)


def wrong_tasks(tasks: Sequence["ExtractedTask"], db_dir: Path, target: "tvm.target.Target",
                rtol: float = DEFAULT_RTOL) -> list[WrongTask]:
    """The tasks whose deployed kernel computes other results than the task's function."""
    from tvm.s_tir import Schedule

    wrong = []
    for task in tasks:
        mod = task.dispatched[0]
        lines = trial_lines(db_dir, mod)
        deployed = best_so_far(lines, [len(lines)])
        if not deployed:
            continue  # no successful trial: compiled unscheduled, as the reference is
        record = record_of(lines[deployed[0].trial])
        sch = Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        error = kernel_error(mod, sch.mod, target)
        if not (np.isfinite(error) and error <= rtol):
            wrong.append(WrongTask(task.task_name, mod, deployed[0].trial, error))
    return wrong
