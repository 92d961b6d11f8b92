"""The `metatune` command line: the root app, with each stage's commands from its own module.

Each command imports its stage (TVM, torch) when it runs, so that `--help` is instant.
"""

from __future__ import annotations

import sys
import warnings
from typing import TextIO

import typer

from metatune import __version__
from metatune.cli import bench, dataset, device, encode, measure, rpc, run, train, tune, workloads, zoo
from metatune.cli.common import one_line_errors

app = typer.Typer(
    help="metatune: a meta-learned cost model and batch-BO tuner for tensor programs on Apache TVM.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # help paragraphs reflow to the terminal; `code` in docstrings renders as code
)
# Added without a name, a module's commands are top-level (`metatune measure`); the help lists them in this order.
for module in (device, measure, encode, tune, run, train, bench):
    app.add_typer(module.app)
app.add_typer(workloads.app, name="workloads")
app.add_typer(dataset.app, name="dataset")
app.add_typer(rpc.app, name="rpc")
app.add_typer(zoo.app, name="zoo")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metatune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Build datasets, train, publish and tune with meta-learned cost models."""


_SHOWN: set[str] = set()


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """A `warnings.showwarning` printing "warning: MESSAGE" once per process: where in the code a warning
    was raised is no concern of the user, and a bench that resolves the same checkpoint for every run
    would otherwise repeat it."""
    text = f"warning: {message}"
    if text not in _SHOWN:
        _SHOWN.add(text)
        print(text, file=file or sys.stderr)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2, warnings one line each."""
    warnings.showwarning = show_warning
    with one_line_errors():
        app()
