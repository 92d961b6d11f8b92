"""The `metatune` command line: one sub-command per pipeline stage.

Heavy imports (TVM, torch) happen inside the commands so that `--help` is instant. Errors
caused by the user's input are printed as one line and exit with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from . import MetatuneError, __version__

app = typer.Typer(
    help="metatune: a meta-learned cost model and batch-BO tuner for tensor programs on Apache TVM.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workloads_app = typer.Typer(help="Operator families and named workload suites.", no_args_is_help=True)
app.add_typer(workloads_app, name="workloads")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metatune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Build datasets, train, publish and tune with meta-learned cost models."""


def _write_json(data: object, path: Optional[Path]) -> None:
    text = json.dumps(data, indent=2)
    if path is None or str(path) == "-":
        typer.echo(text)
    else:
        path.write_text(text + "\n")


@workloads_app.command("list")
def workloads_list(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the operator families (parameter names, one example) and the suites."""
    from .workloads import FAMILIES, RESNET18_NAMES, SUITES, get_suite

    data = {
        "families": {
            name: {"params": list(f.params), "description": f.description, "example": f.example}
            for name, f in FAMILIES.items()
        },
        "suites": {name: [str(w) for w in get_suite(name)] for name in SUITES},
    }
    if as_json:
        _write_json(data, None)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Operator families")
    for col in ("family", "parameters", "example"):
        table.add_column(col)
    for name, f in FAMILIES.items():
        table.add_row(name, ",".join(f.params), f.example)
    console.print(table)
    for name in SUITES:
        suite = Table(title=f"Suite {name}")
        suite.add_column("name")
        suite.add_column("workload")
        for i, w in enumerate(get_suite(name)):
            suite.add_row(RESNET18_NAMES[i] if name == "resnet18" else str(i), str(w))
        console.print(suite)


@app.command()
def device(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show this machine's device fingerprint (CPU, ISA flags, TVM target, device id)."""
    from .device import local_fingerprint

    fp = local_fingerprint()
    if as_json:
        _write_json(fp.to_json(), None)
        return
    for key, value in fp.to_json().items():
        typer.echo(f"{key:>14}: {value}")


@app.command()
def measure(
    workload: str = typer.Argument(..., help="Workload text (e.g. 'dense:m=64,n=64,k=64') or a ResNet-18 layer C1..C12."),
    random: int = typer.Option(32, "--random", min=1, help="How many distinct random configurations to measure."),
    seed: int = typer.Option(0, help="Seed for sampling configurations."),
    batch: int = typer.Option(32, min=1, help="Candidates per builder call (each call pays a worker start-up)."),
    verify: bool = typer.Option(True, help="Check each build against the NumPy reference before timing it."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-candidate results to this file."),
) -> None:
    """Measure random schedules of one workload on this CPU and report throughput and failures."""
    from .commands.measure import run_measure

    run_measure(workload, random, seed, batch, verify, json_out)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    try:
        app()
    except MetatuneError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
