"""Torn-line repair and the one-writer lock of a directory (metatune/fileio.py)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import pytest

from metatune import MetatuneError
from metatune.fileio import LOCK_FILE, REPO_ROOT, DirectoryInUse, cut_torn_line, hold_directory, write_atomic


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


def test_write_atomic_syncs_the_file_then_the_rename(tmp_path, monkeypatch):
    synced: list[bool] = []  # whether each fsync was of a directory
    real_fsync = os.fsync

    def record(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    (tmp_path / "card.json").write_bytes(b"old")
    write_atomic(tmp_path / "card.json", b"new")
    assert synced == [False, True]
    assert [p.name for p in tmp_path.iterdir()] == ["card.json"] and (tmp_path / "card.json").read_bytes() == b"new"


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


def test_a_folder_that_cannot_be_made_is_a_user_error(tmp_path):
    """What the CLI's early checks cannot foresee (a read-only or special file system) is one line too."""
    (tmp_path / "afile").write_text("")
    with pytest.raises(MetatuneError, match="cannot create the folder .*afile/db for a test: Not a directory"):
        with hold_directory(tmp_path / "afile" / "db", "a test"):
            pass
