"""A checkpoint named on the command line: a weights file, a run or zoo version directory, or a zoo id.

Every command that takes a checkpoint (`tune --checkpoint`, `zoo adapt --from`, `evaluate
--transfer`) resolves it here, so that each accepts the same names and each knows what the card
beside the weights says: the device it was trained on, its dataset, whether it was adapted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metatune import MetatuneError
from metatune.fileio import CARD_FILE, WEIGHTS_FILE
from metatune.learn.checkpoint import CheckpointError, TrainedModel
from metatune.zoo import ChecksumError, ZooEntry, ZooError, default_zoo_dir, get_entry, load_checkpoint
from metatune.zoo.weights import load_weights, sha256


@dataclass(frozen=True)
class NamedCheckpoint:
    """The loaded model, the name it was given by, and its card ({} for a bare weights file)."""

    trained: TrainedModel
    id: str
    sha256: str
    card: dict[str, Any] = field(default_factory=dict)

    @property
    def device_id(self) -> str | None:
        device = self.card.get("device")
        return device.get("device_id") if isinstance(device, dict) else None

    @property
    def template_version(self) -> str:
        return self.trained.builder.template.version

    @property
    def adapted_from(self) -> str | None:
        """The source's id when `zoo adapt` made this checkpoint."""
        source = self.card.get("adapted_from")
        return source.get("id") if isinstance(source, dict) else None

    def provenance(self) -> dict[str, Any]:
        """What a derived card records about this checkpoint."""
        return {"id": self.id, "sha256": self.sha256, "device_id": self.device_id,
                "template_version": self.template_version}


def load_from_zoo(entry: ZooEntry) -> TrainedModel:
    """A zoo checkpoint, after the zoo has verified its sha256 and template version."""
    tensors, card = load_checkpoint(entry)
    metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in card["weights_metadata"].items()}
    return TrainedModel.from_state(tensors, metadata, f"zoo checkpoint {entry.id}")


def open_checkpoint(name: str | Path, zoo_root: Path | None = None) -> NamedCheckpoint:
    """A path (weights file, or a directory holding one) if it exists, else a zoo id (DEVICE_ID/vN,
    or DEVICE_ID for its newest version) in `zoo_root` (default: the shipped zoo)."""
    path = Path(name)
    if path.exists():
        weights = path / WEIGHTS_FILE if path.is_dir() else path
        if not weights.exists():
            raise MetatuneError(f"checkpoint not found: {weights}")
        return _open_file(weights, str(name))
    root = zoo_root if zoo_root is not None else default_zoo_dir()
    try:
        entry = get_entry(root, str(name))
    except ZooError as err:
        raise MetatuneError(f"checkpoint {str(name)!r} is neither a file or directory nor a zoo checkpoint: "
                            f"{err}") from None
    trained = load_from_zoo(entry)
    return NamedCheckpoint(trained, entry.id, entry.sha256, _card_beside(entry.weights_path))


def _open_file(weights: Path, name: str) -> NamedCheckpoint:
    """A checkpoint file, read once: a zoo version's weights (their card records a sha256) are checked
    against it, and the bytes checked are the bytes loaded."""
    card = _card_beside(weights)
    try:
        data = weights.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{weights} cannot be read ({err})") from None
    digest = sha256(data)
    zoo = card.get("zoo")
    published = zoo.get("weights_sha256") if isinstance(zoo, dict) else None
    if published is not None and published != digest:
        raise ChecksumError(str(weights), published, digest, recorded_in=str(weights.parent / CARD_FILE))
    try:
        tensors, metadata = load_weights(data, str(weights))
    except ZooError as err:
        raise CheckpointError(f"{weights} is not a safetensors checkpoint ({err})") from None
    return NamedCheckpoint(TrainedModel.from_state(tensors, metadata, str(weights)), name, digest, card)


def _card_beside(weights: Path) -> dict[str, Any]:
    path = weights.parent / CARD_FILE
    if not path.is_file():
        return {}
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise MetatuneError(f"{path} is not a readable model card ({err})") from None
    return card if isinstance(card, dict) else {}
