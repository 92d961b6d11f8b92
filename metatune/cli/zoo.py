"""`metatune zoo list | show | verify | publish | pull | resolve | adapt`: the device-specific checkpoints."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from metatune import MetatuneError
from metatune.cli.common import TARGET_HELP, check_output_dir, echo_json, stop_cleanly
from metatune.fileio import REPO_ROOT

if TYPE_CHECKING:
    from metatune.env.device import DeviceFingerprint

app = typer.Typer(help="Device-specific cost-model checkpoints: list, show, verify, publish, pull, resolve, adapt.",
                  no_args_is_help=True)

ZOO_OPTION = typer.Option(None, "--zoo", help="Zoo directory (default: $METATUNE_ZOO, else the shipped zoo/).")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON.")


@app.command("list")
def zoo_list(zoo: Optional[Path] = ZOO_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List the published checkpoints (device, version, template version, headline metrics)."""
    from metatune import zoo as z

    root = _root(zoo)
    entries = z.read_index(root)
    if as_json:
        echo_json([e.to_json() for e in entries])
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


@app.command("show")
def zoo_show(
    checkpoint: str = typer.Argument(..., help="DEVICE_ID/VERSION, or DEVICE_ID for its newest version."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show one checkpoint's card: device, dataset, metrics, checksum, versions."""
    from metatune import zoo as z

    entry = z.get_entry(_root(zoo), checkpoint)
    card = z.read_zoo_card(entry)
    if as_json:
        echo_json({"entry": entry.to_json(), "directory": str(entry.directory), "card": card})
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


@app.command("verify")
def zoo_verify(
    checkpoint: Optional[str] = typer.Argument(None, help="Only this checkpoint (default: all)."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check files, sha256, card fields, template version and loading; exit 2 listing every problem."""
    from metatune import zoo as z

    report = z.verify(_root(zoo), checkpoint)
    if as_json:
        echo_json(report.to_json())
    else:
        for cid in report.checked:
            typer.echo(f"{'FAIL' if cid in report.failed else 'ok':>4}  {cid}")
        for p in report.problems:
            typer.echo(f"      {type(p).__name__}: {p}")
    if not report.ok:
        raise z.ZooError(f"zoo verify: {len(report.problems)} problem(s) in {report.root} (listed above)")
    if not as_json:
        typer.echo(f"{len(report.checked)} checkpoint(s) verified in {report.root}")


@app.command("publish")
def zoo_publish(
    run_dir: Path = typer.Argument(..., help="Training run directory (model.safetensors + card.json)."),
    zoo: Optional[Path] = ZOO_OPTION,
    hf_repo: Optional[str] = typer.Option(None, "--hf-repo", help="Also upload to this Hugging Face repo OWNER/NAME."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a run and add it under a new version (v1, v2, ...); never overwrites. A run whose weights are
    published already for its device is not published again: its entry is named."""
    from metatune import zoo as z

    if hf_repo is not None:  # fail before publishing locally, not after
        z.check_hf_repo(hf_repo)
        z.require_hf_hub()
    root = _root(zoo)
    before = {e.id for e in z.read_index(root)} if root.is_dir() else set()  # publish makes a new zoo's folder
    entry = z.publish(run_dir, root)
    url = z.push_to_hub(entry, hf_repo) if hf_repo is not None else None
    if as_json:
        echo_json({**entry.to_json(), "directory": str(entry.directory), "hub_url": url,
                   "already_published": entry.id in before})
        return
    if entry.id in before:
        typer.echo(f"{run_dir} is already published as {entry.id} (same weights, sha256 {entry.sha256[:16]}...)")
    else:
        typer.echo(f"published {entry.id} -> {entry.directory} (sha256 {entry.sha256[:16]}...)")
    if url:
        typer.echo(f"uploaded to {url}")


@app.command("pull")
def zoo_pull(
    hf_repo: str = typer.Option(..., "--hf-repo", help="Hugging Face repo (OWNER/NAME) to import checkpoints from."),
    revision: Optional[str] = typer.Option(None, help="Branch, tag or commit of the repo."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Import a Hub repo's checkpoints that are not in the zoo yet (needs huggingface_hub)."""
    from metatune import zoo as z

    added = z.pull_from_hub(hf_repo, _root(zoo), revision=revision)
    if as_json:
        echo_json([e.to_json() for e in added])
        return
    for e in added:
        typer.echo(f"pulled {e.id}")
    typer.echo(f"{len(added)} new checkpoint(s) from {hf_repo}")


@app.command("resolve")
def zoo_resolve(
    device_id: Optional[str] = typer.Option(None, "--device-id", help="Device id (default: this machine)."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the checkpoint a device would use: exact match, else the nearest device (with a warning)."""
    from metatune import zoo as z

    # The fallback warning goes to stderr once: the ZooWarning itself is silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", z.ZooWarning)
        res = z.resolve(device_id, _root(zoo))
    if res.warning:
        typer.echo(f"warning: {res.warning}", err=True)
    if as_json:
        echo_json(res.to_json())
    else:
        typer.echo(f"{res.entry.id}\t{res.entry.directory}")


SPECS = REPO_ROOT / "datasets" / "specs"


def default_adapt_spec(device: "DeviceFingerprint") -> Path:
    """adapt-cpu.yaml for a CPU, adapt-cuda.yaml (no winograd: TVM has no CUDA space for it) for a GPU."""
    return SPECS / ("adapt-cuda.yaml" if device.tvm_target().kind.name == "cuda" else "adapt-cpu.yaml")


@app.command("adapt")
def zoo_adapt(
    source: str = typer.Option(..., "--from", help="The checkpoint to adapt: a zoo id (DEVICE_ID, or DEVICE_ID/vN), "
                                                   "or a checkpoint file or run directory."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
    samples: int = typer.Option(48, min=32, help="Random configurations measured per workload: 32 at least, so that "
                                                "each validation workload still ranks after 16 support samples."),
    spec: Optional[Path] = typer.Option(None, help="The workloads to measure (a dataset spec; its held-out workloads "
                                                   "choose the adaptation). Default: datasets/specs/adapt-cpu.yaml, "
                                                   "adapt-cuda.yaml for a GPU."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/adapt-DEVICE_ID in the current directory)."),
    data: Optional[Path] = typer.Option(None, help="Where the measurements go (default datasets/DEVICE_ID-SPEC_NAME, "
                                                   "beside the shipped datasets: keep its sealed shards with the "
                                                   "published checkpoint); running again resumes the measuring. "
                                                   "A complete one (e.g. `dataset build` on a GPU machine) is "
                                                   "adapted from on any machine, for its device: no --target."),
    publish: bool = typer.Option(True, help="Publish the adapted checkpoint as the device's next zoo version."),
    zoo: Optional[Path] = ZOO_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """A checkpoint for this device from another device's, without a full dataset or training.

    Measures one workload of every family (default 12 workloads x 48 configurations, about 10 min
    on 2 cores; resumable), continues the source checkpoint on them (unchanged, fine-tuned, or
    fine-tuned and meta-trained again: whichever ranks the held-out workloads best) and publishes
    it, so that `tune` resolves it for this device from then on. With --data of a complete build
    (measured on a GPU machine, say), nothing is measured: the checkpoint is for the data's device.
    """
    from metatune import zoo as z
    from metatune.dataset.spec import load_spec
    from metatune.encode.supergraph import Template
    from metatune.env.device import fingerprint_for_target, require_runnable
    from metatune.learn.adapt import run_adapt
    from metatune.learn.named_checkpoint import open_checkpoint

    if out is not None:
        check_output_dir(out, "--out")
    device = measured_device(data, spec, samples) if data is not None else None
    if device is None:  # measuring (or resuming it) here
        device = fingerprint_for_target(target)
        require_runnable(device)
    elif target is not None and fingerprint_for_target(target).device_id != device.device_id:
        raise MetatuneError(f"--data {data} was measured on {device.device_id}, not on --target {target}")
    spec = spec if spec is not None else default_adapt_spec(device)
    root = _root(zoo)
    named = open_checkpoint(source, root)
    info = named.provenance()
    expected = Template.for_target(device.tvm_target()).version
    if info["template_version"] != expected:
        raise MetatuneError(f"checkpoint {info['id']} encodes programs with super-graph template "
                            f"{info['template_version']}, {device.device_id}'s programs use template {expected}: "
                            "adapt from a checkpoint of the same kind of device (CPU to CPU, GPU to GPU)")
    if info.get("device_id") == device.device_id:
        raise MetatuneError(f"{info['id']} is already a checkpoint of {device.device_id}: nothing to adapt "
                            "(fine-tuning on new data is `metatune train`'s job)")
    out = out if out is not None else Path("runs") / f"adapt-{device.device_id}"
    if data is None:
        data = REPO_ROOT / "datasets" / f"{device.device_id}-{load_spec(spec).name}"
    with stop_cleanly():
        card = run_adapt(named.trained, info, spec, samples, out, target, echo=lambda line: typer.echo(line, err=as_json),
                         data_dir=data)
    entry = z.publish(out, root) if publish else None
    if as_json:
        echo_json({"run_dir": str(out), "adaptation": card["adaptation"], "metrics": card["metrics"]["metatune"],
                   "published": None if entry is None else entry.id})
    elif entry is not None:
        typer.echo(f"published {entry.id} -> {entry.directory} (adapted from {info['id']})")


def measured_device(data: Path, spec: Optional[Path], samples: int) -> "DeviceFingerprint | None":
    """The device a complete `--data` build was measured on (its spec: --spec, else the default
    for that device), else None: adapting from it needs neither measuring nor that device here."""
    from metatune.dataset.builder import complete_build
    from metatune.dataset.card import read_card
    from metatune.env.device import DeviceFingerprint

    card = read_card(data)
    if card is None:
        return None
    spec = spec if spec is not None else default_adapt_spec(DeviceFingerprint.from_json(card["device"]))
    return complete_build(spec, data, samples)


def _root(zoo_dir: Optional[Path]) -> Path:
    """The zoo to use: --zoo, else $METATUNE_ZOO, else the shipped one."""
    from metatune import zoo as z

    return zoo_dir if zoo_dir is not None else z.default_zoo_dir()


def _headline(metrics: dict[str, float], n: int = 3) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:n]) or "-"
