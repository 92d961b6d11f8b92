"""`metatune workloads list`: the operator families and the named workload suites."""

from __future__ import annotations

import typer

from metatune.cli.common import echo_json

app = typer.Typer(help="Operator families and named workload suites.", no_args_is_help=True)


@app.command("list")
def workloads_list(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the operator families (parameter names, one example) and the built-in suites (`bench --suite`
    also takes the suite files in bench/suites/ and your own)."""
    from metatune.workload.operators import FAMILIES, RESNET18_NAMES, SUITES, get_suite

    data = {
        "families": {
            name: {"params": list(f.params), "description": f.description, "example": f.example}
            for name, f in FAMILIES.items()
        },
        "suites": {name: [str(w) for w in get_suite(name)] for name in SUITES},
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
    for name in SUITES:
        suite = Table(title=f"Suite {name}")
        suite.add_column("name")
        suite.add_column("workload")
        for i, w in enumerate(get_suite(name)):
            suite.add_row(RESNET18_NAMES[i] if name == "resnet18" else str(i), str(w))
        console.print(suite)
