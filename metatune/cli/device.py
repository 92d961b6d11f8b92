"""`metatune device`: the device fingerprint of this machine or of a target."""

from __future__ import annotations

from typing import Optional

import typer

from metatune.cli.common import echo_json

app = typer.Typer()


@app.command()
def device(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    target: Optional[str] = typer.Option(None, help="A TVM target whose device to show instead of this machine's: "
                                         "JSON, a tag ('nvidia/nvidia-h100') or the string form ('llvm -mcpu=haswell')."),
) -> None:
    """Show the device fingerprint (CPU class, ISA flags, TVM target, device id) of this machine or a target."""
    from metatune.env.device import fingerprint_for_target

    fp = fingerprint_for_target(target)
    if as_json:
        echo_json(fp.to_json())
        return
    for key, value in fp.to_json().items():
        typer.echo(f"{key:>14}: {value}")
