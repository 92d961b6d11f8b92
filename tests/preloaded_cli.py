"""A process that has imported metatune and its libraries once, and forks one child per command.

`python -m metatune` spends 4-5 s importing TVM, PyTorch, PyG, BoTorch and XGBoost before it reads its
first argument, and the test suite runs the CLI about a hundred times. This server imports them once;
for each request (one JSON line on stdin: argv, environment, working directory, and files for stdout and
stderr) it forks a child that becomes `python -m metatune ARGS`: its own process, with the requested
environment and directory, stdin on /dev/null and stdout/stderr on pipes at the descriptor level (what
TVM's C++ code prints is caught too). As `subprocess.run(capture_output=True)` does, the server copies
the pipes into the files until every process holding them (the child, and workers it left behind) has
closed them, then reaps the child. The child runs metatune's `__main__` as `-m` does and ends as the
interpreter ends (SystemExit, uncaught tracebacks, joining threads, atexit handlers, C stdio flushed).

What a fork cannot give: a fresh hash seed, imports in the order the command would make them, and
variables read when a library loads (OMP_*, locale); C++ static destructors do not run at exit. A test
of those runs `sys.executable -m metatune` itself.

The protocol on stdout: `{"ready": true}` once imported, then per request `{"pid": ...}` when forked and
`{"returncode": ...}` (as `subprocess` gives it: negative for a signal) when done.
Run as `python -m tests.preloaded_cli`; `tests.processes.run_metatune` is the client.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import pkgutil
import random
import runpy
import select
import signal
import sys
import threading
import traceback
from typing import Any, TextIO

# What metatune's commands import on their way; the child inherits them instead of importing them again.
LIBRARIES = ("numpy", "tvm", "torch", "torch_geometric", "botorch", "xgboost", "safetensors", "typer")
LIBC = ctypes.CDLL(None)


def preload() -> None:
    for name in LIBRARIES:
        importlib.import_module(name)
    import metatune

    for module in pkgutil.walk_packages(metatune.__path__, "metatune."):
        if module.name != "metatune.__main__":  # that one runs the CLI when imported
            importlib.import_module(module.name)
    from metatune.env.tvm_setup import import_tensor_intrinsics

    # what every tuning command does first (3 s); tests/tune/test_tune.py checks in a fresh interpreter
    # that the CLI never imports them the slow way, which this would hide
    import_tensor_intrinsics()


def flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    LIBC.fflush(None)  # C and C++ buffers too: the descriptors are about to change hands


def copy_until_closed(pipes: dict[int, str]) -> None:
    """Copy each pipe (read end -> file path) into its file until no process holds its write end."""
    files = {fd: open(path, "wb") for fd, path in pipes.items()}
    try:
        while files:
            for fd in select.select(list(files), [], [])[0]:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    files[fd].write(chunk)
                else:
                    files.pop(fd).close()
                    os.close(fd)
    finally:
        for f in files.values():
            f.close()


def serve() -> dict[str, Any]:
    """Answer requests until stdin closes; returns only in a forked child, with the command it is to run."""
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # nothing but the replies may reach the client's pipe, nor read its requests
    os.dup2(devnull, 1)
    os.close(devnull)
    print(json.dumps({"ready": True}), file=replies, flush=True)
    for line in requests:
        request = json.loads(line)
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        flush_all()
        pid = os.fork()
        if pid == 0:
            for fd in (out_r, err_r):
                os.close(fd)
            requests.close()
            replies.close()
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.close(out_w)
            os.close(err_w)
            return request
        os.close(out_w)
        os.close(err_w)
        print(json.dumps({"pid": pid}), file=replies, flush=True)
        copy_until_closed({out_r: request["stdout"], err_r: request["stderr"]})
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=replies, flush=True)
    sys.exit(0)


def become(request: dict[str, Any]) -> None:
    """Turn this forked child into `python -m metatune ARGS` run as the request says."""
    try:
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # -m puts the working directory first
        os.environ.clear()
        os.environ.update(request["env"])
        reseed()
        sys.argv = ["", *request["args"]]  # run_module puts metatune/__main__.py first, as -m does
        runpy.run_module("metatune", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as end:
        status = exit_status(end.code, sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        status = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    leave(status)


def reseed() -> None:
    """Fresh global random states, as a new interpreter has (the server's were drawn once for all)."""
    import numpy as np
    import torch

    random.seed()
    np.random.seed()
    torch.seed()


def exit_status(code: object, stderr: TextIO) -> int:
    """The status the interpreter gives `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=stderr)
    return 1


def leave(status: int) -> None:
    """End as the interpreter does: join threads, run atexit handlers, flush; but skip tearing down the
    modules (1.4 s with PyTorch and TVM loaded, and nothing a command relies on). An uncaught Ctrl-C
    ends the process by SIGINT, or with 130 where SIGINT is blocked, as CPython's own exit does."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    flush_all()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        status = 128 - status
    os._exit(status)


if __name__ == "__main__":
    preload()
    become(serve())
