"""TVM start-up fixes that every entry point needs, and a filter for its VM's debugging lines.

`import tvm.s_tir.tensor_intrin` (pulled in by `TuneContext` and by MetaSchedule's default
build function) takes 20-30 s: the TVMScript parser calls `inspect.stack()` for each of
~500 `@T.prim_func` intrinsics, and each call resolves the module of every frame.
The parser only needs each frame's code line, so while importing we swap in a frame walk
that reads lines from `linecache`; the import then takes ~3 s.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_done = False


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


def import_tensor_intrinsics() -> None:
    """Register TVM's tensor intrinsics (needed before any `TuneContext`), quickly, once."""
    global _done
    with _lock:
        if _done:
            return
        original = inspect.stack
        inspect.stack = _cheap_stack
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401
        finally:
            inspect.stack = original
        _done = True


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
