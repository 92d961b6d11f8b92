"""Torn-line repair and the one-writer lock of a directory (metatune/fileio.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from metatune.fileio import LOCK_FILE, REPO_ROOT, DirectoryInUse, cut_torn_line, hold_directory


@pytest.mark.parametrize("content, kept", [
    (b"", b""),
    (b"[1]\n[2]\n", b"[1]\n[2]\n"),
    (b"[1]\n[2]\n[3, 4", b"[1]\n[2]\n"),
    (b"[1, 2", b""),
    (b"[1]\n" + b"x" * 200_000, b"[1]\n"),  # the torn tail spans several read blocks
])
def test_cut_torn_line_keeps_the_complete_lines(tmp_path, content, kept):
    path = tmp_path / "lines.json"
    path.write_bytes(content)
    assert cut_torn_line(path) == len(content) - len(kept)
    assert path.read_bytes() == kept


def holder(directory) -> subprocess.Popen:
    """Another process holding `directory` until it is killed."""
    code = ("import sys, time\nfrom metatune.fileio import hold_directory\n"
            "with hold_directory(sys.argv[1], 'a test'):\n    print('held', flush=True)\n    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_second_writer_is_refused_and_a_dead_writers_lock_taken_over(tmp_path):
    proc = holder(tmp_path)
    try:
        with pytest.raises(DirectoryInUse, match=f"in use by process {proc.pid} \\(a test\\)"):
            with hold_directory(tmp_path, "a second"):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # dies holding it: its lock file stays, its lock does not
        proc.wait()
    assert (tmp_path / LOCK_FILE).exists()
    with hold_directory(tmp_path, "a test"):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()} a test\n"
        with hold_directory(tmp_path, "a test"):  # held by this process already: nested, not refused
            pass
        assert (tmp_path / LOCK_FILE).exists()
    assert not (tmp_path / LOCK_FILE).exists(), "a lock file would be committed with a dataset"
