"""A checkpoint named by path: a zoo version's weights are checked against the sha256 on its card."""

import json
import shutil

import pytest

from metatune.fileio import CARD_FILE, REPO_ROOT, WEIGHTS_FILE
from metatune.learn.named_checkpoint import open_checkpoint
from metatune.zoo import ChecksumError

ZOO = REPO_ROOT / "zoo"


def newest_version() -> tuple[dict, str]:
    entry = json.loads((ZOO / "index.json").read_text())[-1]
    return entry, entry["path"]


def test_a_zoo_version_by_path_loads_with_the_sha256_its_index_records(tmp_path):
    entry, path = newest_version()
    copy = tmp_path / "v"
    shutil.copytree(ZOO / path, copy)
    named = open_checkpoint(copy)
    assert named.sha256 == entry["sha256"] and named.device_id == entry["device_id"]


def test_a_zoo_version_by_path_whose_weights_changed_is_refused(tmp_path):
    _, path = newest_version()
    copy = tmp_path / "v"
    shutil.copytree(ZOO / path, copy)
    weights = copy / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # still loads with safetensors: only the checksum tells
    weights.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=CARD_FILE):
        open_checkpoint(copy)
    (copy / CARD_FILE).unlink()  # a bare weights file (a run's, say) has no sha256 to be checked against
    assert open_checkpoint(weights).card == {}
