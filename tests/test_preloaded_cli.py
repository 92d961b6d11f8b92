"""The suite's way of running the CLI (`run_metatune`: forked from a server that has imported metatune)
gives what a fresh `python -m metatune` gives: exit status, stdout and stderr, environment, directory."""

from __future__ import annotations

import json
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
    args = ["tune", "--model", f"{script}:build", "--trials", "1", "--db", "db"]
    for cwd in (tmp_path / "a", tmp_path / "b"):
        cwd.mkdir()
    preloaded, real = run_metatune(args, cwd=tmp_path / "a"), fresh(args, cwd=tmp_path / "b")
    assert (preloaded.returncode, preloaded.stderr) == (real.returncode, real.stderr) and real.returncode != 0


def test_a_command_that_measures_gives_what_a_fresh_interpreter_gives(tmp_path):
    """Kernels built by TVM's worker processes, timed on every core and checked: the same configurations
    (same seed), all measured and verified, the same report but for the times."""
    def measure(run, name: str) -> dict:
        out = tmp_path / f"{name}.json"
        proc = run(["measure", "dense:m=16,n=16,k=16", "--random", "3", "--json", str(out)])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[0].startswith("dense:m=16,n=16,k=16: 3/3 measured in ")
        return json.loads(out.read_text())

    preloaded, real = measure(run_metatune, "preloaded"), measure(fresh, "fresh")
    assert preloaded["measured"] == real["measured"] == 3 and preloaded["failures"] == real["failures"] == {}
    assert [c["space"] for c in preloaded["candidates"]] == [c["space"] for c in real["candidates"]]
