"""`metatune dataset build | import | info | encode | export`: datasets of measured programs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from metatune import MetatuneError
from metatune.cli.common import RUNNER_HELP, TARGET_HELP, check_output_dir, echo_json, stop_cleanly

app = typer.Typer(help="Build, inspect and export datasets of measured programs.", no_args_is_help=True)


@app.command("build")
def dataset_build(
    spec: Path = typer.Option(..., help="Dataset spec (YAML), e.g. datasets/specs/default-cpu.yaml."),
    out: Path = typer.Option(..., help="Dataset directory; re-running with the same directory resumes."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    workers: Optional[int] = typer.Option(None, min=1, help="Parallel build workers (default and most: one per core)."),
    batch: int = typer.Option(32, min=1, help="Candidates built and timed per batch."),
    verify: bool = typer.Option(True, help="Check each timed build against NumPy (after the batch is timed, so the check never runs beside the timing)."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    retries_under_load: int = typer.Option(
        2, min=0, help="Times a batch is timed again when other processes kept cores busy meanwhile (local "
                       "runner); after that it is kept and its records are marked disturbed in the store."),
) -> None:
    """Sample workloads from a spec and measure random configurations into a TVM JSON database.

    Resumable: a re-run continues where it stopped and never re-measures a recorded
    configuration; killing it at any moment loses at most the batch in flight, and Ctrl-C
    stops it cleanly. One build at a time writes a directory. Build on an idle machine: other
    work slows the timings, so batches timed beside it are timed again.
    """
    from metatune.dataset.builder import build_dataset, summarize

    check_output_dir(out, "--out")
    check_build_workers(workers)
    with stop_cleanly():
        typer.echo(summarize(build_dataset(spec, out, runner, workers, batch, verify, target,
                                           retries_under_load=retries_under_load)))


def check_build_workers(workers: int | None) -> None:
    """No more build workers than cores: the build's pool starts them all ahead, they only compete, and a slip
    such as --workers 100000 started hundreds of processes until memory ran out."""
    from metatune.env.device import usable_cores

    if workers is not None and workers > (cores := usable_cores()):
        raise MetatuneError(f"--workers {workers}: more than this machine's {cores} cores, and each build worker "
                            "keeps one busy compiling")


@app.command("import")
def dataset_import(
    sources: list[Path] = typer.Argument(
        ..., help="TVM JSON databases: a folder with database_workload.json + database_tuning_record.json (and "
                  "optionally a meta.json naming its workload and split), a .tar.gz of one, or a folder of those."),
    out: Path = typer.Option(..., help="Dataset directory (created, or added to: only records of its own device)."),
    target: Optional[str] = typer.Option(
        None, help="The device the records were measured on, as a TVM target (a tag such as 'nvidia/nvidia-h100', "
                   "JSON or the string form). Default: the target the records name."),
    workload: Optional[str] = typer.Option(
        None, help="The workload of a source without meta.json, e.g. 'dense:m=1024,n=1024,k=1024' (one source only)."),
    split: Optional[str] = typer.Option(None, help="train or heldout, with --workload (default train)."),
    note: Optional[str] = typer.Option(None, help="Provenance kept in the card: where and how they were measured."),
) -> None:
    """Turn TVM JSON databases of plain MetaSchedule runs into a dataset (one sealed store per workload).

    Each database must hold the program metatune generates for its workload; failed candidates
    (run_secs 1e10) become failures, a configuration already in the dataset is skipped, so importing
    the same sources again changes nothing. A dataset holds one device.
    """
    from metatune.dataset.builder import summarize
    from metatune.dataset.importer import import_databases

    check_output_dir(out, "--out")
    with stop_cleanly():
        result = import_databases(sources, out, target, workload, split, note)
    typer.echo(f"imported {result.records} records and {result.failures} failures from {result.sources} sources "
               f"into {out} ({result.duplicates} already there or given twice)")
    typer.echo(summarize(result.card))


@app.command("info")
def dataset_info(
    directory: Path = typer.Argument(..., help="Dataset directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the dataset card as JSON."),
) -> None:
    """Summarise a dataset: counts per family and split (recounted from the records), failures by kind, provenance."""
    from metatune.dataset.builder import summarize
    from metatune.dataset.card import current_card

    card = current_card(directory)
    if card is None:
        raise MetatuneError(f"{directory} is not a dataset (no card.json); build one with 'metatune dataset build'")
    if as_json:
        echo_json(card)
    else:
        typer.echo(summarize(card))


@app.command("encode")
def dataset_encode(directory: Path = typer.Argument(..., help="Dataset directory.")) -> None:
    """Encode every complete workload as super-graph programs into DIR/cache/TEMPLATE_VERSION/.

    Training reads this cache; an entry whose record count or template version no longer matches
    is re-encoded, so re-running after the dataset grew or the template changed is always safe."""
    from metatune.dataset.card import dataset_card
    from metatune.encode.graphs import dataset_template, load_encoded
    from metatune.encode.supergraph import GraphEncoder

    dataset_card(directory)
    encoder = GraphEncoder(dataset_template(directory))
    with stop_cleanly():  # each workload's programs are cached once encoded
        encoded = load_encoded(directory, encoder)
    programs = sum(len(e) for e in encoded)
    typer.echo(f"{len(encoded)} complete workloads, {programs} programs encoded with template {encoder.version} "
               f"in {directory / 'cache' / encoder.version}")


@app.command("export")
def dataset_export(
    directory: Path = typer.Argument(..., help="Dataset directory."),
    out: Path = typer.Option(..., help="Directory for database_workload.json + database_tuning_record.json."),
) -> None:
    """Write all measured records as one MetaSchedule JSONDatabase (usable by TVM directly)."""
    from metatune.dataset.card import dataset_card
    from metatune.dataset.store import DatasetStore

    dataset_card(directory)
    check_output_dir(out, "--out")
    wl, rec = DatasetStore(directory, repair=False).export_tvm_database(out)
    typer.echo(f"wrote {wl} and {rec}")
