"""A task's deployed kernel against the task's own function run unscheduled (tune_model's search for the
kernel that makes a network wrong)."""

from __future__ import annotations


def _log_task():
    import tvm
    from tvm import te

    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: te.log(a[i]), name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def test_nan_in_both_runs_is_agreement_and_a_changed_result_is_not(target):
    """log of a standard-normal input is NaN in half the places, scheduled or not: no false alarm. Storing
    the log in an int32 intermediate changes the result (NaN becomes a number, the rest is truncated)."""
    from tvm.s_tir import Schedule

    from metatune.tune.task_check import kernel_error

    mod = _log_task()
    assert kernel_error(mod, mod, target) == 0.0
    sch = Schedule(mod)
    sch.cache_write(sch.get_sblock("B"), 0, "global")
    sch.unsafe_set_dtype(sch.get_sblock("B"), 0, "int32")
    error = kernel_error(mod, sch.mod, target)
    assert not error <= 1e-2  # NaN or large: wrong either way
