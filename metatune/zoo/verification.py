"""Loading a checkpoint and verifying the zoo: both check files, checksums, cards and template version."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metatune.env.device import DeviceFingerprint
from metatune.fileio import CARD_FILE, INDEX_FILE, WEIGHTS_FILE
from metatune.zoo import index
from metatune.zoo.cards import read_zoo_card
from metatune.zoo.errors import ChecksumError, TemplateVersionError, ZooError
from metatune.zoo.index import README_FILE, VERSION_RE, ZooEntry, get_entry, read_index
from metatune.zoo.weights import load_weights, sha256

if TYPE_CHECKING:
    import torch


def _check_consistency(entry: ZooEntry, card: dict[str, Any]) -> list[ZooError]:
    problems: list[ZooError] = []
    if entry.path != f"{entry.device_id}/{entry.version}":
        problems.append(ZooError(f"{entry.id}: index path {entry.path!r} should be {entry.device_id}/{entry.version}"))
    zoo = card["zoo"]
    if zoo["weights_sha256"] != entry.sha256:
        problems.append(ChecksumError(f"{entry.id}: {CARD_FILE}", entry.sha256, zoo["weights_sha256"]))
    card_device = DeviceFingerprint.from_json(card["device"]).device_id
    if card_device != entry.device_id or zoo.get("version") != entry.version:
        problems.append(ZooError(f"{entry.id}: card describes {card_device}/{zoo.get('version')}"))
    if card["template_version"] != entry.template_version:
        problems.append(ZooError(f"{entry.id}: card template version {card['template_version']!r} disagrees "
                                 f"with index.json ({entry.template_version!r})"))
    return problems


def load_checkpoint(
    entry: ZooEntry, *, template_version: str | None = None
) -> tuple[dict[str, "torch.Tensor"], dict[str, Any]]:
    """Weights and zoo card of a checkpoint, after checking sha256 and template version.

    The sha256 is computed on the bytes that are then deserialised. The returned card carries
    the safetensors metadata under "weights_metadata" (model_config/normalization parsed).
    """
    card = read_zoo_card(entry)
    problems = _check_consistency(entry, card)
    if problems:
        raise problems[0]
    try:
        data = entry.weights_path.read_bytes()
    except OSError as err:
        raise ZooError(f"{entry.id}: cannot read {entry.weights_path}: {err}") from err
    actual = sha256(data)
    if actual != entry.sha256:
        raise ChecksumError(str(entry.weights_path), entry.sha256, actual)
    code_version = template_version if template_version is not None else index.code_template_version(entry.arch)
    if card["template_version"] != code_version:
        raise TemplateVersionError(f"checkpoint {entry.id}", card["template_version"], code_version)
    tensors, metadata = load_weights(data, str(entry.weights_path))
    card["weights_metadata"] = {k: json.loads(v) if k in ("model_config", "normalization") else v
                                for k, v in metadata.items()}
    return tensors, card


@dataclass
class VerifyReport:
    """Per-checkpoint verification results; `problems` holds the exceptions themselves."""

    root: Path
    checked: list[str] = field(default_factory=list)
    problems: list[ZooError] = field(default_factory=list)
    failed: dict[str, list[ZooError]] = field(default_factory=dict)  # checkpoint id -> its problems

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_failed(self) -> None:
        if self.problems:
            raise ZooError(f"zoo verify failed for {self.root}: {len(self.problems)} problem(s): "
                           + "; ".join(str(p) for p in self.problems))

    def to_json(self) -> dict[str, Any]:
        ids = {id(p): cid for cid, ps in self.failed.items() for p in ps}
        return {"zoo": str(self.root), "ok": self.ok, "checked": self.checked,
                "problems": [{"checkpoint": ids.get(id(p)), "kind": type(p).__name__, "message": str(p)}
                             for p in self.problems]}


def verify(root: Path | None = None, entry_id: str | None = None, *,
           template_version: str | None = None) -> VerifyReport:
    """Check every checkpoint (or one): files, checksums, card fields, template version, loading."""
    root = Path(root) if root is not None else index.default_zoo_dir()
    report = VerifyReport(root)
    try:
        entries = [get_entry(root, entry_id)] if entry_id else read_index(root)
    except ZooError as err:
        report.problems.append(err)
        return report
    seen: set[str] = set()
    for entry in entries:
        report.checked.append(entry.id)
        if entry.id in seen:
            report.problems.append(ZooError(f"{entry.id} appears twice in {INDEX_FILE}"))
        seen.add(entry.id)
        found = _verify_entry(entry, template_version or index.code_template_version(entry.arch))
        if found:
            report.failed.setdefault(entry.id, []).extend(found)
        report.problems += found
    if not entry_id:
        report.problems += _unindexed(root, seen)
    return report


def _verify_entry(entry: ZooEntry, code_version: str) -> list[ZooError]:
    if not entry.directory.is_dir():
        return [ZooError(f"{entry.id}: directory {entry.directory} is missing")]
    problems: list[ZooError] = [ZooError(f"{entry.id}: {name} is missing")
                                for name in (WEIGHTS_FILE, README_FILE) if not (entry.directory / name).is_file()]
    try:
        card = read_zoo_card(entry)
    except ZooError as err:
        return problems + [err]
    problems += _check_consistency(entry, card)
    if card["template_version"] != code_version:
        problems.append(TemplateVersionError(f"checkpoint {entry.id}", card["template_version"], code_version))
    if not entry.weights_path.is_file():
        return problems
    data = entry.weights_path.read_bytes()
    actual = sha256(data)
    if actual != entry.sha256:
        problems.append(ChecksumError(str(entry.weights_path), entry.sha256, actual))
    elif len(data) != entry.size_bytes:
        problems.append(ZooError(f"{entry.id}: weights are {len(data)} bytes, index says {entry.size_bytes}"))
    try:
        load_weights(data, str(entry.weights_path))
    except ZooError as err:
        problems.append(err)
    return problems


def _unindexed(root: Path, indexed: set[str]) -> list[ZooError]:
    """Version directories that index.json does not know about, and staging directories a publish
    killed mid-copy left behind (an interrupted publish)."""
    if not root.is_dir():
        return []
    out = []
    for device_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for v in sorted(p for p in device_dir.iterdir() if p.is_dir() and VERSION_RE.match(p.name)):
            if f"{device_dir.name}/{v.name}" not in indexed:
                out.append(ZooError(f"{device_dir.name}/{v.name} is not in {INDEX_FILE} (interrupted publish?); "
                                    "delete the directory or publish its run again"))
        for staging in sorted(device_dir.glob(".staging-*")):
            out.append(ZooError(f"{device_dir.name}/{staging.name} is what an interrupted publish left; delete it "
                                "(no publish of this zoo is running) and publish its run again"))
    return out
