"""The suite's way of running the CLI (`run_metatune`: forked from a server that has imported metatune)
gives what a fresh `python -m metatune` gives: exit status, stdout and stderr, environment, directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import run_metatune


def fresh(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metatune", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.mark.parametrize("args", [
    ["--version"],
    ["bench", "--no-such-option"],  # click's usage error names the program as `python -m metatune`
    ["tune", "--workload", "dense:m=16,n=16,k=16", "--checkpoint", "/nonexistent"],  # metatune's one-line error
    ["workloads", "list"],
])
def test_a_command_gives_what_a_fresh_interpreter_gives(args):
    preloaded, real = run_metatune(args), fresh(args)
    assert (preloaded.returncode, preloaded.stdout, preloaded.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_environment_and_directory_are_the_requests(tmp_path):
    (tmp_path / "zoo").mkdir()
    env = {"METATUNE_ZOO": "zoo"}  # relative: found from the working directory given, not from the server's
    for cwd, status in ((tmp_path, 0), (tmp_path / "zoo", 2)):
        preloaded, real = run_metatune(["zoo", "list"], env=env, cwd=cwd), fresh(["zoo", "list"], env=env, cwd=cwd)
        assert preloaded.returncode == real.returncode == status, preloaded.stderr
        assert (preloaded.stdout, preloaded.stderr) == (real.stdout, real.stderr)
    assert "METATUNE_ZOO" not in os.environ  # the test process's own environment is left alone


def test_a_command_that_runs_past_its_timeout_is_killed(tmp_path):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_metatune(["tune", "--workload", "dense:m=64,n=64,k=64", "--trials", "512", "--db", str(tmp_path / "db")],
                     timeout=3)
    assert time.monotonic() - started < 60
    assert run_metatune(["--version"]).returncode == 0  # the server goes on serving


def test_a_ctrl_c_ends_the_command_as_in_a_fresh_interpreter(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("def build():\n    raise KeyboardInterrupt\n")
    args = ["tune", "--model", f"{script}:build", "--trials", "1"]
    preloaded, real = run_metatune([*args, "--db", str(tmp_path / "a")]), fresh([*args, "--db", str(tmp_path / "b")])
    assert preloaded.returncode == real.returncode != 0
