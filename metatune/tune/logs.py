"""Where tuning's logs go.

MetaSchedule logs its task table after every batch, libraries warn about deprecations, and
TVM's C++ writes its warnings (unknown schedule rules, topi's notes) straight to file
descriptor 2; on the console all of them bury the progress line. Quiet (the default) keeps them
with the run, in the database folder's `logs/`; verbose leaves them on the console, as TVM and
Python print them.
"""

from __future__ import annotations

import logging
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

from metatune.env.tvm_setup import native_stderr_to

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"
WARNINGS_FILE = "python-warnings.log"
NATIVE_LOG_FILE = "tvm-native.log"


def log_dir(db_dir: Path) -> Path:
    """The folder MetaSchedule writes its logs to for a database folder (`get_loggers_from_work_dir`)."""
    return db_dir / "logs"


def set_meta_schedule_console(verbose: bool) -> None:
    """Show MetaSchedule's logs on the console only when verbose, in its log files always.

    When `tune_tir`/`tune_tasks` configure logging, its console handler takes the level of the
    `tvm.s_tir.meta_schedule` logger, which they then leave at DEBUG: set it before every run.
    """
    logging.getLogger(META_SCHEDULE_LOGGER).setLevel(logging.DEBUG if verbose else logging.WARNING)


def _append_to(path: Path) -> Callable[..., None]:
    """A `warnings.showwarning` that appends to `path` (created at the first warning)."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as log:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

    return show


@contextmanager
def warnings_to_file(path: Path) -> Iterator[None]:
    """Append the Python warnings raised inside the block to `path` instead of printing them."""
    with warnings.catch_warnings():
        warnings.showwarning = _append_to(path)
        yield


@contextmanager
def native_output_to(path: Path) -> Iterator[None]:
    """Inside the block, what native code writes to file descriptor 2 (TVM's C++ `LOG(WARNING)`, and
    the output of worker processes started here) is appended to `path`, while Python's `sys.stderr`
    (progress lines, notes, errors) still reaches the console through a copy of the descriptor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    python_stderr = sys.stderr
    swapped = _writes_to_fd(python_stderr, 2)
    with path.open("ab") as log, native_stderr_to(log.fileno()) as console:
        if swapped:
            sys.stderr = open(console, "w", buffering=1, closefd=False, encoding=python_stderr.encoding,
                              errors="backslashreplace")
        try:
            yield
        finally:
            if swapped:
                sys.stderr.close()
                sys.stderr = python_stderr


def _writes_to_fd(stream: TextIO, fd: int) -> bool:
    """Whether `stream` is the file descriptor `fd` (not, e.g., a test runner's buffer)."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False
