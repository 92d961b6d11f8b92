"""TVM start-up fixes that every entry point needs.

`import tvm.s_tir.tensor_intrin` (pulled in by `TuneContext` and by MetaSchedule's default
build function) takes 20-30 s: the TVMScript parser calls `inspect.stack()` for each of
~500 `@T.prim_func` intrinsics, and each call resolves the module of every frame.
The parser only needs each frame's code line, so while importing we swap in a frame walk
that reads lines from `linecache`; the import then takes ~3 s.
"""

from __future__ import annotations

import inspect
import linecache
import sys
import threading

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
