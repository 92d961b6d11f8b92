"""Ctrl-C and SIGTERM in a command that measures: stop at a batch boundary, with every file whole.

Python's default turns Ctrl-C into a KeyboardInterrupt wherever the main thread is. In the middle of
TVM's tuning loop (C++ calling back into Python) that is a RuntimeError traceback with a batch
half-built and its worker pools left behind; and a terminal's Ctrl-C reaches TVM's worker processes
too, whose deaths would be recorded as failed candidates. So, while `stop_on_signals` is active:

* inside `uninterrupted` (a batch being measured, TVM's whole tuning loop, TVM's pools starting
  their workers) a signal only requests a stop; `raise_if_stopped` at a batch boundary, or leaving
  the block, raises `Interrupted`, so that the results of a batch during which the signal came are
  never written;
* anywhere else `Interrupted` is raised at once: only atomic writes happen there;
* the processes started inside `uninterrupted` (TVM's build and run workers) do not get the
  terminal's Ctrl-C, which goes to the whole process group: a worker it killed would print a
  traceback and be started again for every remaining candidate. The main thread blocks SIGINT
  there, so the threads it starts, and the processes those start, have it blocked from their first
  instruction (a signal mask is inherited through thread creation, fork and exec); a thread of
  `stop_on_signals` receives the signal for the process meanwhile (Python runs the handler in the
  main thread all the same). Whichever child process is left when `Interrupted` leaves is ended.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker
from types import FrameType

import psutil

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FFI_ERROR_KIND = "metatune.Interrupted"  # the name under which TVM's FFI carries `Interrupted` through C++

_active = False  # within `stop_on_signals`
_requested: int | None = None  # the signal that asked to stop
_deferring = 0  # depth of `uninterrupted` blocks


class Interrupted(BaseException):
    """The user asked the command to stop (Ctrl-C or SIGTERM). Like KeyboardInterrupt it is no
    `Exception`, so that no `except Exception` (TVM's runners have some) takes it for a failure."""


def _interrupted(signum: int) -> Interrupted:
    """The exception for `signum`. It may be raised in a Python callback of TVM's C++: registered with
    TVM's FFI (when TVM is loaded) it comes out of the C++ as itself, not as a RuntimeError."""
    ffi = sys.modules.get("tvm_ffi")
    if ffi is not None:
        ffi.register_error(FFI_ERROR_KIND, Interrupted)
    return Interrupted(signal.Signals(signum).name)


def _handle(signum: int, _frame: FrameType | None) -> None:
    global _requested
    if _requested is not None:
        return  # already stopping: a second Ctrl-C must not break the clean-up under way
    _requested = signum
    if not _deferring:
        raise _interrupted(signum)
    # os.write: a handler may run in the middle of a buffered write to stderr
    os.write(2, f"\n{signal.Signals(signum).name}: stopping; the batch in flight ends first, not saved\n".encode())


def raise_if_stopped() -> None:
    """A batch boundary: stop here if a signal asked to."""
    if _requested is not None:
        raise _interrupted(_requested)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Work a signal must not cut in the middle: inside, a signal only requests the stop, and leaving
    raises `Interrupted` if one came, so that the caller never uses (writes) the work's results."""
    global _deferring
    block = _active and not _deferring and threading.current_thread() is threading.main_thread()
    # Blocked and unblocked while deferring: a signal that comes in between only requests the stop, and
    # cannot raise with SIGINT blocked (which would leave it blocked for the rest of the run).
    _deferring += 1
    try:
        if block:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _deferring -= 1
    raise_if_stopped()


def end_child_processes(timeout_s: float = 5.0) -> None:
    """Kill every process this one started, and wait for them (TVM's build and run workers, worker
    pools'), except Python's multiprocessing resource tracker: it ends by itself with this process,
    and one killed now would be relaunched to print a traceback per semaphore released later."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    children = [child for child in psutil.Process().children(recursive=True) if child.pid != tracker]
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=timeout_s)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM stop the work as the module docstring says; when `Interrupted` leaves,
    the child processes have been ended. Signal handlers belong to the main thread: elsewhere this
    changes nothing."""
    global _active, _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _handle) for sig in SIGNALS}
    done = threading.Event()
    receiver = threading.Thread(target=done.wait, name="signal receiver", daemon=True)  # SIGINT not blocked
    receiver.start()
    _active = True
    try:
        yield
    except Interrupted as stop:
        end_child_processes()
        # TVM's pools that the unwinding abandoned: collected now, in this thread, not by one of their
        # own threads whenever it next runs the collector (their shutdown cannot join itself)
        traceback.clear_frames(stop.__traceback__)
        gc.collect()
        raise
    finally:
        _active = False
        done.set()
        receiver.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested = None
