"""A process that has imported metatune and its libraries once, and forks one child per command.

`python -m metatune` spends 4-5 s importing TVM, PyTorch, PyG, BoTorch and XGBoost before it reads its
first argument, and the test suite runs the CLI about a hundred times. This server imports them once;
for each request (one JSON line on stdin: argv, environment, working directory, and files for stdout and
stderr) it forks a child that becomes `python -m metatune ARGS`: its own process, with the requested
environment and directory, stdin on /dev/null and stdout/stderr in the files at the descriptor level, so
that what TVM's C++ code prints is caught too. The child runs metatune's `__main__` as `-m` does and
ends as the interpreter ends (SystemExit, uncaught tracebacks, joining threads, atexit handlers, an
uncaught Ctrl-C), so its exit status is what the real command's would be. The server answers with the
child's pid, then with its exit status as `subprocess` gives it (negative: the signal that ended it).

Run as `python -m tests.preloaded_cli`; `tests.processes.run_metatune` is the client.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import pkgutil
import runpy
import signal
import sys
import threading
from typing import Any

# What metatune's commands import on their way; the child inherits them instead of importing them again.
LIBRARIES = ("numpy", "tvm", "torch", "torch_geometric", "botorch", "xgboost", "safetensors", "typer")


def preload() -> None:
    for name in LIBRARIES:
        importlib.import_module(name)
    import metatune

    for module in pkgutil.walk_packages(metatune.__path__, "metatune."):
        if module.name != "metatune.__main__":  # that one runs the CLI when imported
            importlib.import_module(module.name)
    from metatune.env.tvm_setup import import_tensor_intrinsics

    import_tensor_intrinsics()  # what every tuning command does first (3 s)


def serve() -> dict[str, Any]:
    """Answer requests until stdin closes; returns only in a forked child, with the command it is to run."""
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # nothing but the replies may reach the client's pipe, nor read its requests
    os.dup2(devnull, 1)
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            return request
        print(json.dumps({"pid": pid}), file=replies, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=replies, flush=True)
    sys.exit(0)


def become(request: dict[str, Any]) -> None:
    """Turn this forked child into `python -m metatune ARGS` run as the request says."""
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # -m puts the working directory first
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["", *request["args"]]  # run_module puts metatune/__main__.py first, as -m does
    try:
        runpy.run_module("metatune", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as end:
        status = exit_status(end.code)
    except KeyboardInterrupt:
        status = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    leave(status)


def exit_status(code: object) -> int:
    """The status the interpreter gives `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def leave(status: int) -> None:
    """End as the interpreter does: join threads, run atexit handlers, flush; but skip tearing down the
    modules (1.4 s with PyTorch and TVM loaded, and nothing a command relies on). An uncaught Ctrl-C
    ends the process by SIGINT, as Python's own exit does."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


if __name__ == "__main__":
    preload()
    become(serve())
