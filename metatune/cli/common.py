"""What the CLI's commands share: option help texts, JSON output, list parsing, one-line errors, Ctrl-C."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from metatune import MetatuneError
from metatune.env.interrupt import Interrupted, stop_on_signals
from metatune.fileio import write_atomic

RUNNER_HELP = (
    "Where to time candidates: 'local', or 'rpc://HOST:PORT/KEY' for the servers registered under KEY at a "
    "TVM RPC tracker (building stays on this machine; the target is the remote device's)."
)

TARGET_HELP = (
    "TVM target to compile for: JSON ('{\"kind\": \"llvm\", \"mcpu\": \"znver3\"}'), a tag ('nvidia/nvidia-h100') or "
    "the string form ('llvm -mcpu=znver3 -num-cores=2'). Default: this machine's (`metatune device`)."
)


REFERENCE_PASSES = 30  # reference_timing.MAX_PASSES, not imported from there: that module loads TVM and torch
REFERENCE_PASSES_HELP = (
    f"At most this many pass pairs per timing against a reference library (default {REFERENCE_PASSES}, "
    "at least 9): passes go on while the speed-up's 95% interval is wider than ±10%; fewer end a noisy "
    "(sub-millisecond) comparison sooner, and one still wider is marked unstable."
)

# The most random configurations `measure` and `encode` take: they hold them all in memory (a dataset build
# measures more, a workload at a time, and keeps what it measured).
MAX_RANDOM = 10_000


def echo_json(data: object) -> None:
    """Print `data` as indented JSON, for `--json` flags that print instead of writing a file."""
    typer.echo(json.dumps(data, indent=2))


def check_json_out(path: Path | None, dash_prints: bool = False, option: str = "--json") -> None:
    """Refuse a `--json FILE` (or another `option` naming a JSON file) that could not be written before
    the work starts, not after it. `dash_prints`: the command prints the JSON alone for `-` (others print
    a summary too)."""
    if path is None or (dash_prints and str(path) == "-"):
        return
    if str(path) == "-":
        raise MetatuneError(f"{option} -: this command prints a summary on stdout; give a file name")
    if path.is_dir():
        raise MetatuneError(f"{option} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise MetatuneError(f"{option} {path}: no such folder {path.parent}")


def check_output_dir(path: Path, option: str) -> None:
    """Refuse an output folder (`--db`, `--out`) that could not be made or written before the work starts,
    not at its first write: a file in its place or on its way, or a folder this user cannot write in."""
    folder = path.absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # the folder, or where it would be made
    if not existing.is_dir():
        raise MetatuneError(f"{option} {path}: " + ("is a file; give a new or existing folder" if existing == folder
                                                      else f"{existing} is a file, not a folder"))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise MetatuneError(f"{option} {path}: this user cannot write in {existing}")


def write_json(data: object, path: Path) -> None:
    """Write `data` as indented JSON, for `--json FILE` options: atomically (a crash leaves the old
    file), or straight into a FILE that is no regular file (/dev/stdout, a shell's pipe) or is a
    symbolic link (/dev/stdout redirected to a file is one: a rename would replace the link, and the
    shell's file would never get the JSON)."""
    text = json.dumps(data, indent=2) + "\n"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        path.write_text(text)
    else:
        write_atomic(path, text.encode())


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Report user errors (MetatuneError) as one line on stderr with exit status 2, not as a traceback
    (a message quoting a multi-line text, such as a library's error, is joined onto that line)."""
    try:
        yield
    except MetatuneError as err:
        typer.echo("error: " + " ".join(line.strip() for line in str(err).splitlines() if line.strip()), err=True)
        sys.exit(2)


INTERRUPTED_EXIT = 130  # the shell's status for a command ended by Ctrl-C (128 + SIGINT)


@contextmanager
def stop_cleanly(resumes: bool = True, kept: str = "") -> Iterator[None]:
    """Ctrl-C or SIGTERM stops the command at a batch boundary (metatune/env/interrupt.py) with its
    files consistent and its worker processes ended; then say how to go on and exit with status 130.
    `resumes`: whether running the same command again continues the work (else it starts over, with
    `kept`, if given, reused)."""
    try:
        with stop_on_signals():
            yield
    except Interrupted as stop:
        command = shlex.join(["metatune", *sys.argv[1:]])
        then = "resume" if resumes else f"start over ({kept} kept)" if kept else "start over (nothing was saved)"
        typer.echo(f"interrupted ({stop}); to {then}, run the same command again: {command}", err=True)
        sys.exit(INTERRUPTED_EXIT)


def parse_list(text: str, what: str) -> list[str]:
    """Split a comma-separated option value; an empty list is a user error naming the option `what`."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise MetatuneError(f"{what}: expected a comma-separated list, got {text!r}")
    return items


def parse_ints(text: str, what: str, example: str) -> list[int]:
    return _parse_numbers(text, what, example, int)


def parse_floats(text: str, what: str, example: str) -> list[float]:
    return _parse_numbers(text, what, example, float)


def _parse_numbers(text: str, what: str, example: str, kind: type) -> list:
    try:
        return [kind(b) for b in parse_list(text, what)]
    except ValueError:
        raise MetatuneError(f"{what}: expected numbers such as {example}, got {text!r}") from None
