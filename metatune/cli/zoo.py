"""`metatune zoo list | show | verify | publish | pull | resolve`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Optional

import typer

from metatune import zoo as z


def _root(zoo_dir: Optional[Path]) -> Path:
    return zoo_dir if zoo_dir is not None else z.default_zoo_dir()


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def _headline(metrics: dict[str, float], n: int = 3) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:n]) or "-"


def run_list(zoo_dir: Optional[Path], as_json: bool) -> None:
    root = _root(zoo_dir)
    entries = z.read_index(root)
    if as_json:
        _echo_json([e.to_json() for e in entries])
        return
    if not entries:
        typer.echo(f"no checkpoints in {root}; {z.TRAIN_HINT}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Model zoo {root}")
    table.add_column("checkpoint", no_wrap=True)  # the id names arch, ISA class and cores; keep it whole
    for col in ("template", "created", "headline metric"):
        table.add_column(col)
    for e in entries:
        table.add_row(e.id, e.template_version, e.created[:10], _headline(e.metrics, 1))
    Console().print(table)


def run_show(zoo_dir: Optional[Path], entry_id: str, as_json: bool) -> None:
    root = _root(zoo_dir)
    entry = z.get_entry(root, entry_id)
    card = z.read_zoo_card(entry)
    if as_json:
        _echo_json({"entry": entry.to_json(), "directory": str(entry.directory), "card": card})
        return
    ds = card["dataset"]
    for key, value in (
        ("checkpoint", entry.id), ("directory", entry.directory), ("cpu", card["device"].get("cpu_model")),
        ("isa class", f"{entry.isa_class} ({entry.arch}, {entry.num_cores} cores)"),
        ("template", entry.template_version), ("created", entry.created), ("published", entry.published),
        ("dataset", f"{ds['id']}: {ds['records']} records, {ds['workloads']} workloads"),
        ("sha256", entry.sha256), ("size", f"{entry.size_bytes} bytes"),
        ("versions", ", ".join(f"{k} {v}" for k, v in card["versions"].items())),
    ):
        typer.echo(f"{key:>10}: {value}")
    for key, value in entry.metrics.items():
        typer.echo(f"{'':>10}  {key} = {value:.4g}")
    typer.echo(f"{'card':>10}: {entry.directory / z.README_FILE}")


def run_verify(zoo_dir: Optional[Path], entry_id: Optional[str], as_json: bool) -> None:
    """Print one line per checkpoint and problem; a failed check raises (exit status 2)."""
    report = z.verify(_root(zoo_dir), entry_id)
    if as_json:
        _echo_json(report.to_json())
    else:
        for cid in report.checked:
            typer.echo(f"{'FAIL' if cid in report.failed else 'ok':>4}  {cid}")
        for p in report.problems:
            typer.echo(f"      {type(p).__name__}: {p}")
    if not report.ok:
        raise z.ZooError(f"zoo verify: {len(report.problems)} problem(s) in {report.root} (listed above)")
    if not as_json:
        typer.echo(f"{len(report.checked)} checkpoint(s) verified in {report.root}")


def run_publish(zoo_dir: Optional[Path], run_dir: Path, as_json: bool, hf_repo: Optional[str]) -> None:
    if hf_repo is not None:  # fail before publishing locally, not after
        z.check_hf_repo(hf_repo)
        z.require_hf_hub()
    entry = z.publish(run_dir, _root(zoo_dir))
    url = z.push_to_hub(entry, hf_repo) if hf_repo is not None else None
    if as_json:
        _echo_json({**entry.to_json(), "directory": str(entry.directory), "hub_url": url})
        return
    typer.echo(f"published {entry.id} -> {entry.directory} (sha256 {entry.sha256[:16]}...)")
    if url:
        typer.echo(f"uploaded to {url}")


def run_pull(zoo_dir: Optional[Path], hf_repo: str, revision: Optional[str], as_json: bool) -> None:
    added = z.pull_from_hub(hf_repo, _root(zoo_dir), revision=revision)
    if as_json:
        _echo_json([e.to_json() for e in added])
        return
    for e in added:
        typer.echo(f"pulled {e.id}")
    typer.echo(f"{len(added)} new checkpoint(s) from {hf_repo}")


def run_resolve(zoo_dir: Optional[Path], device_id: Optional[str], as_json: bool) -> None:
    """The fallback warning goes to stderr once (the ZooWarning itself is silenced here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", z.ZooWarning)
        res = z.resolve(device_id, _root(zoo_dir))
    if res.warning:
        typer.echo(f"warning: {res.warning}", err=True)
    if as_json:
        _echo_json(res.to_json())
    else:
        typer.echo(f"{res.entry.id}\t{res.entry.directory}")
