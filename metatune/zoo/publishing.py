"""Publishing a training run as the next version of its device (see the package docstring)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from metatune import __version__
from metatune.env.device import DeviceFingerprint
from metatune.fileio import CARD_FILE, WEIGHTS_FILE, write_atomic
from metatune.zoo import index
from metatune.zoo.cards import metrics_summary, read_run_card, render_readme
from metatune.zoo.errors import TemplateVersionError, ZooError
from metatune.zoo.index import README_FILE, VERSION_RE, ZooEntry, index_lock, read_index, version_number, write_index
from metatune.zoo.weights import load_weights, sha256


def check_run(run_dir: Path, template_version: str | None = None) -> tuple[dict, DeviceFingerprint]:
    """A run's card and device, once its card is complete, its weights are there and its template
    version is the code's (`template_version` where given): what publishing needs of it."""
    card = read_run_card(run_dir)
    if not (run_dir / WEIGHTS_FILE).is_file():
        raise ZooError(f"{run_dir} has no {WEIGHTS_FILE}")
    fp = DeviceFingerprint.from_json(card["device"])
    code_version = template_version if template_version is not None else index.code_template_version(fp.arch)
    if card["template_version"] != code_version:
        raise TemplateVersionError(f"run {run_dir}", card["template_version"], code_version)
    return card, fp


def publish(run_dir: Path, root: Path | None = None, *, template_version: str | None = None) -> ZooEntry:
    """Copy a training run into the zoo under the next free version and index it; the entry that
    already holds the same weights for this device where there is one.

    The run is validated first (card fields, weights load with safetensors, template version
    equals the code's) so that a checkpoint that `verify` would reject never gets published.
    """
    run_dir, root = Path(run_dir), Path(root) if root is not None else index.default_zoo_dir()
    card, fp = check_run(run_dir, template_version)
    device_dir = root / fp.device_id
    device_dir.mkdir(parents=True, exist_ok=True)

    staging = Path(tempfile.mkdtemp(dir=device_dir, prefix=".staging-"))
    final: Path | None = None
    try:
        shutil.copyfile(run_dir / WEIGHTS_FILE, staging / WEIGHTS_FILE)
        for png in sorted(run_dir.glob("*.png")):
            shutil.copyfile(png, staging / png.name)
        data = (staging / WEIGHTS_FILE).read_bytes()  # validate the copy: it is what gets published
        tensors, metadata = load_weights(data, f"{run_dir / WEIGHTS_FILE}")
        digest = sha256(data)
        with index_lock(root):
            entries = read_index(root)
            if same := next((e for e in entries if (e.device_id, e.sha256, e.template_version)
                             == (fp.device_id, digest, card["template_version"])), None):
                return same  # these weights are published already: a re-run publishes nothing twice
            taken = [e.number for e in entries if e.device_id == fp.device_id]
            taken += [version_number(p.name) for p in device_dir.iterdir() if VERSION_RE.match(p.name)]
            version = f"v{max(taken, default=0) + 1}"
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            zoo_card = dict(card)
            zoo_card["device"] = {**fp.to_json(), **card["device"]}
            zoo_card["zoo"] = {
                "device_id": fp.device_id, "version": version, "weights_file": WEIGHTS_FILE,
                "weights_sha256": digest, "weights_size_bytes": len(data), "published": now,
                "source_run": run_dir.resolve().name, "images": sorted(p.name for p in staging.glob("*.png")),
                "tensors": len(tensors), "weights_metadata_keys": sorted(metadata),
                "published_with": {"metatune": __version__},
            }
            write_atomic(staging / CARD_FILE, (json.dumps(zoo_card, indent=2) + "\n").encode())  # synced to disk
            write_atomic(staging / README_FILE, render_readme(zoo_card).encode())  # before the index names them
            target = device_dir / version
            if target.exists():  # cannot happen under the lock; never overwrite regardless
                raise ZooError(f"{target} already exists; refusing to overwrite it")
            os.rename(staging, target)
            final = target
            entry = ZooEntry(
                device_id=fp.device_id, version=version, path=f"{fp.device_id}/{version}", sha256=digest,
                size_bytes=len(data), template_version=card["template_version"], created=str(card["created"]),
                published=now, arch=fp.arch, isa_family=fp.isa_family, isa_class=fp.isa_class,
                num_cores=fp.num_cores, flags=tuple(fp.flags), metrics=metrics_summary(card["metrics"]),
                root=root,
            )
            write_index(root, entries + [entry])
            final = None  # committed
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if final is not None:  # renamed but not indexed: roll back so the version number stays free
            shutil.rmtree(final, ignore_errors=True)
