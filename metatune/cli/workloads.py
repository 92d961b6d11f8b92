"""`metatune workloads list`: the operator families and the named workload suites."""

from __future__ import annotations

import typer

from metatune.cli.common import echo_json

app = typer.Typer(help="Operator families and named workload suites.", no_args_is_help=True)


@app.command("list")
def workloads_list(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the operator families (parameter names, one example) and the suites `bench --suite` knows by
    name (it also takes your own suite file), each workload under the name bench's tables give it."""
    from metatune.bench.suites import load_suite, suite_names
    from metatune.workload.operators import FAMILIES

    data = {
        "families": {
            name: {"params": list(f.params), "description": f.description, "example": f.example}
            for name, f in FAMILIES.items()
        },
        # by the names bench gives them in its tables and --out folders
        "suites": {suite: {b.name: str(b.workload) for b in load_suite(suite)} for suite in suite_names()},
    }
    if as_json:
        echo_json(data)
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
    for name, workloads in data["suites"].items():
        suite = Table(title=f"Suite {name}")
        suite.add_column("name")
        suite.add_column("workload")
        for short, text in workloads.items():
            suite.add_row(short, text)
        console.print(suite)
