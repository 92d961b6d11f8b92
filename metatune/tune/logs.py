"""Where tuning's logs go.

MetaSchedule logs its task table after every batch, and libraries warn about deprecations;
on the console both bury the progress line. Quiet (the default) keeps them with the run, in
the database folder's `logs/`; verbose leaves them on the console, as TVM and Python print them.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"
WARNINGS_FILE = "python-warnings.log"


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
