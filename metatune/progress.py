"""One progress-bar style for every long-running command (rich, with ETA)."""

from __future__ import annotations

from rich.progress import (
    BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
)


def progress_bar(transient: bool = False) -> Progress:
    """A bar with count, elapsed time, ETA and a free-text status field."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        transient=transient,
    )
