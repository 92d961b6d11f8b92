"""TVM start-up fixes that every entry point needs, and a filter for its VM's debugging lines.

`import tvm.s_tir.tensor_intrin` (pulled in by `TuneContext` and by MetaSchedule's default
build function) takes 20-30 s: the TVMScript parser calls `inspect.stack()` for each of
~500 `@T.prim_func` intrinsics, and each call resolves the module of every frame.
The parser only needs each frame's code line, so while importing we swap in a frame walk
that reads lines from `linecache`; the import then takes ~4 s, of which CUDA's intrinsics
take ~3.5 s: a CPU target's run registers the CPU kinds' only.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import linecache
import os
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import tvm

_lock = threading.Lock()
_imported: set[str] = set()  # submodules of INTRINSICS registered in this process

INTRINSICS = "tvm.s_tir.tensor_intrin"
CPU_INTRINSICS = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")  # what the package imports in an LLVM build
GPU_INTRINSICS = ("cuda",)  # what it imports in any build


def _cheap_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """Same frames and code lines as `inspect.stack()`, without module resolution."""
    frame = sys._getframe(1)
    frames: list[inspect.FrameInfo] = []
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno)
        frames.append(
            inspect.FrameInfo(
                frame, code.co_filename, frame.f_lineno, code.co_name,
                [line] if line else None, 0 if line else None,
            )
        )
        frame = frame.f_back
    return frames


def import_tensor_intrinsics(target: "tvm.target.Target | str | dict | None" = None) -> None:
    """Register the TVM tensor intrinsics `target`'s schedules may name (needed before any `TuneContext`);
    without a target, every kind's. Quickly (see above), and each kind once.

    The package is entered in `sys.modules` without running its `__init__` (which imports every kind's),
    so the `import tvm.s_tir.tensor_intrin` in TuneContext finds it done, and a `from
    tvm.s_tir.tensor_intrin.cuda import ...` still loads and registers that kind. Hence the rule: every
    path to a TuneContext or a trace replay calls this with its target first (a CUDA one would otherwise
    run without CUDA's intrinsics once a CPU run entered the package)."""
    import tvm
    from tvm.runtime import enabled

    if target is not None and not isinstance(target, tvm.target.Target):
        target = tvm.target.Target(target)
    cpu = CPU_INTRINSICS if enabled("llvm") else ()
    wanted = cpu if target is not None and target.kind.name == "llvm" else cpu + GPU_INTRINSICS
    with _lock:
        missing = [name for name in wanted if name not in _imported]
        if not missing:
            return
        entered = _enter_package_without_init()
        original = inspect.stack
        inspect.stack = _cheap_stack
        try:
            for name in missing:
                importlib.import_module(f"{INTRINSICS}.{name}")
                _imported.add(name)
        except BaseException:
            if entered:  # leave no half-filled package for TVM's own import to take as done
                sys.modules.pop(INTRINSICS, None)
            raise
        finally:
            inspect.stack = original


def _enter_package_without_init() -> bool:
    """Whether the package was entered now (not before, nor imported whole by TVM, the slow way)."""
    if INTRINSICS in sys.modules:
        return False
    import tvm.s_tir

    spec = importlib.util.find_spec(INTRINSICS)
    assert spec is not None, f"TVM has no {INTRINSICS}"
    package = importlib.util.module_from_spec(spec)  # __path__ set, __init__ not run
    sys.modules[INTRINSICS] = package
    tvm.s_tir.tensor_intrin = package
    return True


def use_threads(num_threads: int) -> int:
    """Make TVM kernels in this process and in the workers it starts use `num_threads` threads.

    TVM's runtime sizes its thread pool from its own guess of the physical core count, which
    on some VMs is 1 for 2 cores (seen here: `runtime.NumThreads()` == 1), so parallel loops
    would run on one core while PyTorch uses both. An explicit TVM_NUM_THREADS set by the
    user wins; the value in force is returned so it can be recorded with the measurements.
    """
    os.environ.setdefault("TVM_NUM_THREADS", str(num_threads))
    return int(os.environ["TVM_NUM_THREADS"])


def detach_unnamed_meta_schedule_log_handlers() -> None:
    """Detach unnamed handlers from MetaSchedule's logger before TVM sets up its task loggers.

    `tune_tir`/`tune_tasks` re-run `logging.config.dictConfig` with the `tvm.s_tir.meta_schedule`
    logger's handlers listed by name (`logging.py:create_loggers`): an unnamed handler crashes
    it with `'NoneType' object has no attribute 'format'`, and dictConfig would remove it from
    the logger anyway. Code that attaches handlers to every non-propagating logger (pytest's log
    capture does) leaves such unnamed handlers behind.
    """
    import logging

    tvm_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(tvm_logger.handlers):
        if handler.get_name() is None:
            tvm_logger.removeHandler(handler)


VM_SCOPE_LOG = "Warning: Scope "


@contextmanager
def native_stderr_to(fileno: int) -> Iterator[int]:
    """Inside the block, file descriptor 2 (where C++ code writes) points at `fileno`; yields a copy of
    what it pointed at before, which is where it points again afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fileno, 2)
    try:
        yield saved
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def without_vm_scope_logs() -> Iterator[None]:
    """TVM 0.27's VM executable logs one C++ WARNING line per function ("Scope Saving:", "Scope
    Loaded:") each time it is exported or loaded: debugging output, not a warning to the user.
    The C++ stderr is collected meanwhile and every other line passed on to file descriptor 2
    (wherever it points: the console, or a run's log under `native_output_to`)."""
    with tempfile.TemporaryFile() as collected:
        try:
            with native_stderr_to(collected.fileno()):
                yield
        finally:
            collected.seek(0)
            kept = [line for line in collected.read().splitlines(keepends=True) if VM_SCOPE_LOG.encode() not in line]
            with os.fdopen(os.dup(2), "wb") as native_stderr:  # writes all of it, even to a full pipe
                native_stderr.write(b"".join(kept))
