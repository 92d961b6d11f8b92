"""`metatune rpc status`: which devices (servers) a TVM RPC tracker has, per key."""

from __future__ import annotations

import typer

from metatune.cli.common import echo_json

app = typer.Typer(help="TVM RPC trackers and servers: measure on other machines.", no_args_is_help=True)


@app.command("status")
def rpc_status(
    tracker: str = typer.Option(..., help="Tracker address HOST:PORT, e.g. 127.0.0.1:9190."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    probe: bool = typer.Option(
        False, help="Also ask each free server for its device fingerprint (holds each server for a moment)."
    ),
) -> None:
    """List the servers (devices) registered at a TVM RPC tracker, per key, and the --runner URL of each key."""
    run_status(tracker, as_json, probe)


def status_data(tracker: str, probe: bool = False) -> dict:
    """The tracker's servers per key; with `probe`, each key's device fingerprints, asked from the servers."""
    from metatune.measure.runners import RpcSpec, parse_tracker, query_fingerprints, tracker_status

    addr = parse_tracker(tracker)  # a bad address fails here, before TVM is loaded
    keys = tracker_status(addr)
    data = {
        "tracker": str(addr),
        "keys": {
            k: {"servers": s.servers, "free": s.free, "pending": s.pending, "runner": f"rpc://{addr}/{k}"}
            for k, s in keys.items()
        },
    }
    if probe:
        # Takes every free server for a moment: a running build waits (briefly) for them.
        for k, s in keys.items():
            answers = query_fingerprints(RpcSpec(addr, k), s.free) if s.free else []
            data["keys"][k]["devices"] = [
                {"fingerprint": fp.to_json() if fp else None, "source": how} for fp, how in answers
            ]
    return data


def run_status(tracker: str, as_json: bool, probe: bool = False) -> None:
    """Print `status_data` as JSON or as a table with the --runner URL to use per key."""
    data = status_data(tracker, probe)
    if as_json:
        echo_json(data)
        return
    keys = data["keys"]
    total = sum(len(k["servers"]) for k in keys.values())
    typer.echo(f"tracker {data['tracker']}: {total} server{'s' * (total != 1)} under {len(keys)} key{'s' * (len(keys) != 1)}")
    if not keys:
        typer.echo("start one with: python -m metatune.measure.rpc_server --tracker HOST:PORT --key NAME")
        return
    typer.echo(f"{'key':<20}{'servers':>8}{'free':>6}{'pending':>9}  addresses")
    for key, k in keys.items():
        typer.echo(f"{key:<20}{len(k['servers']):>8}{k['free']:>6}{k['pending']:>9}  {', '.join(k['servers']) or '-'}")
        for device in k.get("devices", []):
            fp = device["fingerprint"]
            what = f"{fp['device_id']} ({fp['cpu_model']})" if fp else "unknown device"
            typer.echo(f"{'':<20}  device: {what} [via {device['source']}]")
    typer.echo(f"measure on a key with: --runner rpc://{data['tracker']}/KEY")
