"""`metatune dataset build | info | encode | export`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from metatune import MetatuneError
from metatune.dataset.card import read_card


def run_build(spec_path: Path, out: Path, runner: str, workers: int | None, batch: int, verify: bool,
              target: str | None = None) -> None:
    from metatune.dataset.builder import build_dataset, summarize

    typer.echo(summarize(build_dataset(spec_path, out, runner, workers, batch, verify, target)))


def run_info(directory: Path, as_json: bool) -> None:
    from metatune.dataset.builder import summarize

    card = read_card(directory)
    if card is None:
        raise MetatuneError(f"{directory} is not a dataset (no card.json); build one with 'metatune dataset build'")
    if as_json:
        typer.echo(json.dumps(card, indent=2))
    else:
        typer.echo(summarize(card))


def run_encode(directory: Path) -> None:
    """Materialise the super-graph encodings of every complete workload (the training cache)."""
    from metatune.encode.graphs import load_encoded
    from metatune.encode.supergraph import GraphEncoder

    if read_card(directory) is None:
        raise MetatuneError(f"{directory} is not a dataset (no card.json)")
    encoder = GraphEncoder()
    encoded = load_encoded(directory, encoder)
    programs = sum(len(e) for e in encoded)
    typer.echo(f"{len(encoded)} complete workloads, {programs} programs encoded with template {encoder.version} "
               f"in {directory / 'cache' / encoder.version}")


def run_export(directory: Path, out: Path) -> None:
    from metatune.dataset.store import DatasetStore

    if read_card(directory) is None:
        raise MetatuneError(f"{directory} is not a dataset (no card.json)")
    wl, rec = DatasetStore(directory).export_tvm_database(out)
    typer.echo(f"wrote {wl} and {rec}")
