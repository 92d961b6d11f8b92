"""`make train-zoo` never measures one device's dataset on another machine, nor publishes a checkpoint
from part of a dataset."""

from __future__ import annotations

import json
import re

import pytest

from metatune import MetatuneError
from metatune.fileio import REPO_ROOT
from metatune.learn.train_zoo import train_all

CONFIG = REPO_ROOT / "train" / "configs" / "x86_64-sapphirerapids-2c.yaml"


def with_dataset(text: str, dataset: object) -> str:
    """The config text with its `dataset:` line pointing at `dataset`."""
    return re.sub(r"^dataset: .*$", f"dataset: {dataset}", text, count=1, flags=re.M)


def test_a_missing_dataset_of_another_device_is_not_measured_here(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    text = CONFIG.read_text().replace("device_id: x86_64-sapphirerapids-2c", "device_id: x86_64-elsewhere-64c")
    text = with_dataset(text, tmp_path / "missing")
    (configs / "elsewhere.yaml").write_text(text)
    with pytest.raises(MetatuneError, match="can only be measured on x86_64-elsewhere-64c"):
        train_all(configs, tmp_path / "runs", tmp_path / "zoo")
    assert not (tmp_path / "missing").exists()


def test_naming_a_device_without_a_config_is_an_error_before_anything_runs(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "x86_64-sapphirerapids-2c.yaml").write_text(CONFIG.read_text())
    with pytest.raises(MetatuneError, match="no training config .* for x86_64-nowhere-2c; configs exist for "
                                            "x86_64-sapphirerapids-2c"):
        train_all(configs, tmp_path / "runs", tmp_path / "zoo", devices=["x86_64-nowhere-2c"])
    assert not (tmp_path / "runs").exists()


def test_only_the_named_devices_are_trained(tmp_path):
    """The other device's config points at a dataset that is missing and cannot be measured here: were it
    not skipped, train_all would raise."""
    configs = tmp_path / "configs"
    configs.mkdir()
    text = CONFIG.read_text().replace("device_id: x86_64-sapphirerapids-2c", "device_id: x86_64-elsewhere-64c")
    (configs / "elsewhere.yaml").write_text(with_dataset(text, tmp_path / "missing"))
    (configs / "other.yaml").write_text(with_dataset(text.replace("x86_64-elsewhere-64c", "x86_64-other-64c"),
                                                     tmp_path / "missing-too"))
    with pytest.raises(MetatuneError, match="can only be measured on x86_64-other-64c"):
        train_all(configs, tmp_path / "runs", tmp_path / "zoo", devices=["x86_64-other-64c"])
    assert not (tmp_path / "missing").exists()


def test_a_partial_dataset_is_refused_before_any_config_is_trained(tmp_path):
    """A build that stopped part way (here: 23 of 79 workloads, the shipped partial Zen 4 dataset's card)
    is finished on its device first; elsewhere `make train-zoo` refuses, and refuses before it
    trains the configs sorted ahead of it, whose datasets are complete."""
    configs = tmp_path / "configs"
    configs.mkdir()
    partial = tmp_path / "partial"
    partial.mkdir()
    card = json.loads((REPO_ROOT / "datasets" / "x86_64-znver4-2c" / "card.json").read_text())
    card["totals"].update(complete=23, workloads=79)  # as it reads today, whether or not it is finished later
    (partial / "card.json").write_text(json.dumps(card))
    (configs / "a-complete.yaml").write_text(CONFIG.read_text())
    text = CONFIG.read_text().replace("device_id: x86_64-sapphirerapids-2c", "device_id: x86_64-elsewhere-64c")
    (configs / "b-partial.yaml").write_text(with_dataset(text, partial))
    with pytest.raises(MetatuneError, match=r"holds 23 of 79 workloads complete, and it can only be measured on "
                                            r"x86_64-elsewhere-64c"):
        train_all(configs, tmp_path / "runs", tmp_path / "zoo")
    assert not (tmp_path / "runs").exists()
    assert sorted(p.name for p in partial.iterdir()) == ["card.json"]
