"""Files that several parts of metatune share: their names, how they are replaced on disk, how an
append-only line file is repaired, and how a directory is held by one writer at a time.

Nothing here imports the rest of the package (but its error class), so any module can use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from metatune import MetatuneError

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout: shipped datasets/, zoo/, train/ live here
CARD_FILE = "card.json"  # dataset card, training-run card, zoo-version card
WEIGHTS_FILE = "model.safetensors"  # a trained model, in a run or zoo version directory
INDEX_FILE = "index.json"  # the zoo's list of published versions
WORKLOAD_FILE = "database_workload.json"  # TVM JSONDatabase: one workload per line
RECORD_FILE = "database_tuning_record.json"  # TVM JSONDatabase: one tuning record per line
LOCK_FILE = ".metatune.lock"  # in a directory one process writes: the writer's PID and work, while it runs

_held: set[Path] = set()  # directories this process holds (`hold_directory`)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers, and a crash, see the old file or the new one,
    never a mix: write a unique temp file next to it, fsync it, and rename it over `path` (the folder
    synced too, so that the rename itself survives a power cut)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as open() gives it
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync a directory's entries; where the platform or file system cannot (Windows, some network
    file systems), the rename is still atomic, only not yet durable."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def cut_torn_line(path: Path) -> int:
    """Cut the bytes after the last newline off an append-only line file, so that every line parses
    again; returns how many were cut (0: the file was whole). A process killed in the middle of an
    append leaves a torn last line; every complete line ends with its newline."""
    with open(path, "r+b") as f:
        size = end = f.seek(0, os.SEEK_END)
        keep = 0
        while end > 0:  # backwards, a block at a time: the file may be large, the torn tail is short
            start = max(0, end - 65536)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        if keep < size:
            f.truncate(keep)
        return size - keep


class DirectoryInUse(MetatuneError):
    """Another process holds the directory (see `hold_directory`)."""


@contextlib.contextmanager
def hold_directory(directory: Path, what: str) -> Iterator[None]:
    """Be the only writer of `directory` (created if missing) while inside: two writers of one TVM
    database or dataset measure every configuration twice and seal shards with duplicates.

    The lock is an exclusive `flock` on `directory/LOCK_FILE`, which holds the writer's PID and `what`
    (its work, e.g. "a tuning run"): a second writer fails at once with `DirectoryInUse` naming both,
    and the lock of a killed process is free again (the kernel drops it with the process). The file
    is removed on the way out, so that no lock file stays in a directory that is committed (datasets/).
    Inside a block that holds it, holding the same directory again is a no-op: a command can take the
    lock before it prints anything, and the function it calls takes it as well."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a read-only or special file system, or no permission
        raise MetatuneError(f"cannot create the folder {directory} for {what}: {err.strerror}") from err
    key = directory.resolve()
    if key in _held:
        yield
        return
    path = directory / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            pid, _, work = os.read(fd, 200).decode(errors="replace").strip().partition(" ")
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            who = f"process {pid} ({work})" if pid.isdigit() else "another process"  # empty: it is writing them
            raise DirectoryInUse(f"{directory} is in use by {who}; wait for it to finish, "
                                 "or stop it (Ctrl-C) and run this again") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and lock: lock the new one
    _held.add(key)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {what}\n".encode())
        yield
    finally:
        _held.discard(key)
        with contextlib.suppress(FileNotFoundError):  # while still locked: nobody locks a removed file after us
            os.unlink(path)
        os.close(fd)
