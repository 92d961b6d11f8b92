"""Optional Hugging Face Hub mirror of the zoo (needs huggingface_hub)."""

from __future__ import annotations

import json
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from metatune.fileio import CARD_FILE, WEIGHTS_FILE
from metatune.zoo.errors import ChecksumError, TemplateVersionError, ZooError, ZooWarning
from metatune.zoo.index import ZooEntry, default_zoo_dir, read_index
from metatune.zoo.publishing import check_run, publish
from metatune.zoo.weights import load_weights, sha256

_HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def require_hf_hub() -> Any:
    """The huggingface_hub module, or a ZooError that says how to install it."""
    try:
        import huggingface_hub
    except ImportError as err:
        raise ZooError("--hf-repo needs the optional package huggingface_hub (pip install huggingface_hub)") from err
    return huggingface_hub


def check_hf_repo(repo_id: str) -> str:
    if not _HF_REPO_RE.match(repo_id):
        raise ZooError(f"bad Hugging Face repo id {repo_id!r}: expected OWNER/NAME")
    return repo_id


def push_to_hub(entry: ZooEntry, repo_id: str) -> str:
    """Upload one checkpoint directory to `<repo>/<device_id>/<version>/`; returns its URL."""
    check_hf_repo(repo_id)
    hub = require_hf_hub()
    api = hub.HfApi()
    api.create_repo(repo_id, repo_type="model", exist_ok=True)
    api.upload_folder(folder_path=str(entry.directory), path_in_repo=entry.path, repo_id=repo_id,
                      repo_type="model", commit_message=f"metatune zoo: add {entry.id}")
    return f"https://huggingface.co/{repo_id}/tree/main/{entry.path}"


def pull_from_hub(repo_id: str, root: Path | None = None, *, revision: str | None = None,
                  template_version: str | None = None) -> list[ZooEntry]:
    """Import every checkpoint of a Hub repo whose weights are not in the zoo yet (new local versions).
    Every downloaded checkpoint is checked before any is published: a bad one leaves the zoo as it was,
    and one of a template version this code cannot load is left out, with a warning."""
    check_hf_repo(repo_id)
    hub = require_hf_hub()
    root = Path(root) if root is not None else default_zoo_dir()
    root.mkdir(parents=True, exist_ok=True)
    known = {e.sha256 for e in read_index(root)}
    added: list[ZooEntry] = []
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(hub.snapshot_download(repo_id=repo_id, revision=revision, local_dir=tmp,
                                           allow_patterns=["*/v*/*"]))
        checked = []
        for card_path in sorted(local.glob(f"*/v*/{CARD_FILE}")):
            where = f"{repo_id}:{card_path.parent.relative_to(local)}"
            remote = json.loads(card_path.read_text())
            digest = remote.get("zoo", {}).get("weights_sha256")
            weights = card_path.parent / WEIGHTS_FILE
            if not weights.is_file():
                raise ZooError(f"{where}: no {WEIGHTS_FILE} beside its {CARD_FILE}")
            actual = sha256(weights.read_bytes())
            if digest != actual:
                raise ChecksumError(where, str(digest), actual)
            checked.append((card_path, remote, digest))
        fresh = []
        for card_path, remote, digest in checked:  # every new one checked as publishing checks it, before any is
            if digest in known:
                continue
            remote.pop("zoo")
            card_path.write_text(json.dumps(remote, indent=2))
            try:
                check_run(card_path.parent, template_version)
            except TemplateVersionError as stale:  # this code cannot load it; the others are still worth having
                warnings.warn(f"{repo_id}:{card_path.parent.relative_to(local)} left out: {stale}", ZooWarning,
                              stacklevel=2)
                continue
            load_weights((card_path.parent / WEIGHTS_FILE).read_bytes(), str(card_path.parent / WEIGHTS_FILE))
            fresh.append((card_path, digest))
        for card_path, digest in fresh:
            if digest not in known:
                added.append(publish(card_path.parent, root, template_version=template_version))
                known.add(digest)
    return added
