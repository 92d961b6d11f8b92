"""Model zoo: device-specific cost-model checkpoints with model cards.

Layout (everything a tuner needs is in the index, so resolving never opens a card)::

    zoo/index.json                      list of entries, sorted by device id and version
    zoo/<device_id>/<version>/          model.safetensors, card.json, README.md, *.png

A version is never overwritten: `publish` copies a run into a hidden staging directory,
validates the *copy*, then, holding a lock on the zoo directory, renames it to the next free
`v<n>` and replaces index.json atomically. A crash leaves either the old zoo or the new one
(at worst an unindexed staging or version directory, which `verify` reports).

Weights are only ever read with safetensors (no pickle), and the sha256 is checked on the
very bytes that are then deserialised, so a file swapped after the check cannot be loaded.
"""

from metatune.fileio import CARD_FILE, INDEX_FILE, WEIGHTS_FILE
from metatune.zoo.cards import read_run_card, read_zoo_card, render_readme
from metatune.zoo.errors import ChecksumError, NoCheckpointError, TemplateVersionError, ZooError, ZooWarning
from metatune.zoo.hub import check_hf_repo, pull_from_hub, push_to_hub, require_hf_hub
from metatune.zoo.index import (
    README_FILE,
    TRAIN_HINT,
    ZOO_ENV,
    ZooEntry,
    default_zoo_dir,
    describe,
    get_entry,
    parse_id,
    read_index,
)
from metatune.zoo.publishing import publish
from metatune.zoo.resolution import Resolution, fingerprint_from_id, resolve
from metatune.zoo.verification import VerifyReport, load_checkpoint, verify
from metatune.zoo.weights import load_weights

__all__ = [
    "CARD_FILE", "INDEX_FILE", "README_FILE", "TRAIN_HINT", "WEIGHTS_FILE", "ZOO_ENV",
    "ChecksumError", "NoCheckpointError", "Resolution", "TemplateVersionError", "VerifyReport", "ZooEntry",
    "ZooError", "ZooWarning", "check_hf_repo", "default_zoo_dir", "describe", "fingerprint_from_id", "get_entry",
    "load_checkpoint", "load_weights", "parse_id", "publish", "pull_from_hub", "push_to_hub", "read_index",
    "read_run_card", "read_zoo_card", "render_readme", "require_hf_hub", "resolve", "verify",
]
