"""One progress display for every long-running command.

On a terminal: a rich bar with count, elapsed time and ETA. Otherwise (logs, CI, a build
running under nohup): one plain line at most every `interval_s`, so a log shows progress.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class PlainProgress:
    """The subset of rich.progress.Progress the commands use, as periodic log lines."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self.tasks: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """Print each task's final state, unless its last line already showed it, or an error ended
        the command before the task's work began (its one-line error is then all there is to say)."""
        for task_id, t in self.tasks.items():
            if exc_type is not None and "rate_from" not in t:
                continue
            if t.get("shown") != (t["completed"], t.get("status")):
                self._print(task_id)

    def add_task(self, description: str, total: float, completed: float = 0, **fields: Any) -> int:
        task_id = len(self.tasks)
        self.tasks[task_id] = {"description": description, "total": total, "completed": completed,
                               "start": time.monotonic(), "last": 0.0, **fields}
        return task_id

    def update(self, task_id: int, advance: float = 0, completed: float | None = None, **fields: Any) -> None:
        task = self.tasks[task_id]
        task["completed"] = completed if completed is not None else task["completed"] + advance
        task.update(fields)
        # The rate counts from the first update: what it reports may be work found done (a resumed run
        # skips it at once), which would make the remaining work look far quicker than it is.
        task.setdefault("rate_from", (time.monotonic(), task["completed"]))
        if time.monotonic() - task["last"] >= self.interval_s:
            self._print(task_id)

    def _print(self, task_id: int) -> None:
        t = self.tasks[task_id]
        t["last"] = time.monotonic()
        t["shown"] = (t["completed"], t.get("status"))
        elapsed = t["last"] - t["start"]
        since, done_then = t.get("rate_from", (t["start"], t["completed"]))
        rate = (t["completed"] - done_then) / (t["last"] - since) if t["last"] > since else 0.0
        left = max(t["total"] - t["completed"], 0)
        eta = f"{left / rate / 60:.1f} min" if rate > 0 else ("0.0 min" if left == 0 else "unknown")
        print(
            f"{time.strftime('%H:%M:%S')} {t['description']}: {t['completed']:.0f}/{t['total']:.0f} "
            f"elapsed {elapsed / 60:.1f} min, eta {eta} {t.get('status', '')}".rstrip(),
            file=sys.stderr, flush=True,
        )


def progress_bar(transient: bool = False) -> Any:
    """A rich bar where stderr is a terminal, periodic log lines otherwise, both on stderr (so that
    `metatune ... > out.txt` keeps the bar on the console and out of the file); both take a `status` field."""
    if not sys.stderr.isatty():
        return PlainProgress()
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=Console(file=sys.stderr),  # beside the plain lines: stdout stays the command's output
        transient=transient,
    )
