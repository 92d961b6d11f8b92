"""Driving `python -m metatune` as a real process: start it in its own process group, wait for what it
writes, signal it as a terminal or a service manager would, and check that it left no process behind."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from metatune.fileio import REPO_ROOT
from metatune.measure.popen_worker import TVM_WORKER, WORKER


def start(*args: str) -> subprocess.Popen:
    """`python -m metatune ARGS` in a new session: its process group id is its pid, as for a shell job."""
    return subprocess.Popen([sys.executable, "-m", "metatune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=REPO_ROOT)


# Makes the slow import of TVM's tensor intrinsics (one `inspect.stack` per intrinsic) fail the script.
SLOW_IMPORT_TRIPWIRE = """
import inspect

def forbidden(*args, **kwargs):
    raise AssertionError("inspect.stack: TVM's tensor intrinsics imported the slow way")

inspect.stack = forbidden
"""

CPU_ONLY_INTRINSICS = "CUDA intrinsics imported: False"
_FRESH_CLI_SCRIPT = SLOW_IMPORT_TRIPWIRE + """
import atexit
import sys

from metatune.cli import main

atexit.register(lambda: print("CUDA intrinsics imported:", "tvm.s_tir.tensor_intrin.cuda" in sys.modules,
                              file=sys.stderr))

sys.argv = ["metatune", *sys.argv[1:]]
main()
"""


def run_metatune_fresh(args: list[object], timeout: float = 600) -> subprocess.CompletedProcess:
    """`metatune ARGS` in a fresh interpreter, which fails where TVM's tensor intrinsics are imported the slow
    way and ends its stderr with whether CUDA's were (`CPU_ONLY_INTRINSICS`): what the forked commands of
    `run_metatune` cannot show, their server having imported everything already."""
    return subprocess.run([sys.executable, "-c", _FRESH_CLI_SCRIPT, *[str(a) for a in args]], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO_ROOT)


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_metatune(list(args), timeout=timeout, cwd=REPO_ROOT)


class PreloadedCli:
    """The client of `tests.preloaded_cli`: a server that has imported metatune once and forks a child per
    command (4-5 s of imports saved each time). Started on first use, ended with the test session; a
    server that fails mid-exchange is killed, and the next command starts a new one."""

    START_S = 600.0  # imports on a busy 2-core machine
    REPLY_S = 60.0  # a fork, or a killed command's last output

    def __init__(self) -> None:
        self._log = tempfile.NamedTemporaryFile(prefix="preloaded-cli-", suffix=".log", delete=False)
        self._server = subprocess.Popen([sys.executable, "-m", "tests.preloaded_cli"], cwd=REPO_ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._buffer = b""
        atexit.register(self.close)
        self._expect("ready", self.START_S)

    def alive(self) -> bool:
        return self._server.poll() is None

    def close(self) -> None:
        if self.alive():
            self._server.stdin.close()
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def _reply(self, timeout: float) -> dict | None:
        """The server's next reply line, or None after `timeout` seconds without one."""
        deadline = time.monotonic() + timeout
        fd = self._server.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                log = Path(self._log.name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the preloaded CLI server ended (status {self._server.wait()}): {log}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _expect(self, key: str, timeout: float) -> object:
        reply = self._reply(timeout)
        if reply is None or key not in reply:
            raise RuntimeError(f"the preloaded CLI server gave {reply!r} where {key!r} was due")
        return reply[key]

    def run(self, args: list[str], env: dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="metatune-cli-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"args": args, "env": env, "cwd": cwd, "stdout": str(out), "stderr": str(err)}
            try:
                self._server.stdin.write(json.dumps(request).encode() + b"\n")
                self._server.stdin.flush()
                pid = self._expect("pid", self.REPLY_S)
                reply = self._reply(timeout)
                if reply is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    self._expect("returncode", self.REPLY_S)
                    raise subprocess.TimeoutExpired(["metatune", *args], timeout, _text(out), _text(err))
                returncode = reply["returncode"]
            except (OSError, RuntimeError, KeyError, ValueError):
                self._server.kill()  # out of step with its replies: the next command starts a new one
                raise
            return subprocess.CompletedProcess(["metatune", *args], returncode, _text(out), _text(err))


def _text(path: Path) -> str:
    """A child's output as `subprocess.run(text=True)` gives it: decoded, universal newlines."""
    return path.read_text() if path.exists() else ""


_preloaded: PreloadedCli | None = None


def run_metatune(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | str | None = None,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m metatune ARGS` as `subprocess.run(..., capture_output=True, text=True)` runs it, with
    `env` added to this process's environment: the same command in a process of its own, forked from a
    server that has imported metatune already (`tests.preloaded_cli`). A test of what a fresh interpreter
    does (its imports, its start-up time) runs `sys.executable -m metatune` itself."""
    global _preloaded
    if _preloaded is None or not _preloaded.alive():
        _preloaded = PreloadedCli()
    return _preloaded.run([str(a) for a in args], {**os.environ, **(env or {})}, str(cwd or os.getcwd()), timeout)


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, timeout_s: float) -> None:
    """Poll `condition` until it holds; fail if `proc` ends first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (status {proc.returncode}) first: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"nothing after {timeout_s} s")
        time.sleep(0.3)


def wait_for_output(proc: subprocess.Popen, fragment: str, timeout_s: float) -> str:
    """Read `proc`'s stderr until a line holds `fragment`; returns what was read."""
    seen, deadline = "", time.monotonic() + timeout_s
    while fragment not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stderr], [], [], left)[0]:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no {fragment!r} after {timeout_s} s: {seen}")
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"the process ended (status {proc.wait()}) first: {seen}")
        seen += line
    return seen


@dataclass
class Stopped:
    returncode: int
    stderr: str
    seconds: float  # from the signal to the exit


def stop(proc: subprocess.Popen, sig: int, group: bool, timeout_s: float = 150) -> Stopped:
    """Send `sig` to the process, or to its whole group as a terminal's Ctrl-C does, and wait for it."""
    t0 = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running {timeout_s} s after signal {sig}") from None
    return Stopped(proc.returncode, err, time.monotonic() - t0)


def group_members(pgid: int) -> list[str]:
    """The live processes (zombies aside) of process group `pgid`, as 'PID COMMAND'."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        state, _ppid, group = text.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(f"{stat.parent.name} {text[text.index('(') + 1:text.rindex(')')]}")
    return members


def tvm_workers() -> set[int]:
    """The pids of this process's TVM worker processes (build and run pools: TVM's worker, or metatune's
    `popen_worker` once a Measurer made the pools start that)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if {TVM_WORKER, WORKER} & set(p.cmdline())}


def json_lines(path: Path) -> list:
    """Every line of a JSON-lines file, parsed (fails on a line that is not JSON)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    """A loopback port nothing listens on (for a tracker that is not there, or one about to start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
