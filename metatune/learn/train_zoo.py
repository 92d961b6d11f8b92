"""`make train-zoo`: for every device config in train/configs/ (or the devices named), make sure its
dataset exists (building it from the config's spec when it is missing), train, evaluate and publish."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from metatune import MetatuneError
from metatune.dataset.builder import build_dataset
from metatune.dataset.card import read_card
from metatune.env.device import local_fingerprint
from metatune.fileio import REPO_ROOT
from metatune.learn.config import TrainConfig, load_config
from metatune.learn.train import run_train
from metatune.zoo import publish


def train_all(configs_dir: Path = REPO_ROOT / "train" / "configs", runs_dir: Path = REPO_ROOT / "runs",
              zoo_dir: Path | None = None, devices: list[str] | None = None) -> list[str]:
    """Train and publish every config's device, or only `devices` (device ids) when given."""
    configs = [(path, load_config(path)) for path in sorted(configs_dir.glob("*.yaml"))]
    if not configs:
        raise MetatuneError(f"no training configs in {configs_dir}")
    if devices:
        known = {config.device_id for _, config in configs}
        unknown = [device for device in devices if device not in known]
        if unknown:
            raise MetatuneError(f"no training config in {configs_dir} for {', '.join(unknown)}; "
                                f"configs exist for {', '.join(sorted(known))}")
        configs = [(path, config) for path, config in configs if config.device_id in devices]
    to_measure = [dataset_to_measure(config) for _, config in configs]  # every refusal before any work
    published = []
    for (path, config), measure in zip(configs, to_measure):
        data = REPO_ROOT / config.dataset
        if measure:
            print(f"[train-zoo] {config.name}: {measure}; measuring it from {config.spec}", flush=True)
            build_dataset(REPO_ROOT / config.spec, data)
        run_dir = runs_dir / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        print(f"[train-zoo] {config.name}: training into {run_dir}", flush=True)
        run_train(data, path, run_dir)
        entry = publish(run_dir, zoo_dir)
        print(f"[train-zoo] published {entry.id}", flush=True)
        published.append(entry.id)
    return published


def dataset_to_measure(config: TrainConfig) -> str | None:
    """Why the config's dataset must be measured first (missing, or a build that stopped part way: a
    checkpoint from part of a dataset would be weaker than its card says), or None when it is complete.
    Raises when it cannot be measured on this machine."""
    data = REPO_ROOT / config.dataset
    card = read_card(data)
    if card is not None and card["totals"]["complete"] >= card["totals"]["workloads"]:
        return None
    state = (f"no dataset at {data}" if card is None else
             f"{data} holds {card['totals']['complete']} of {card['totals']['workloads']} workloads complete")
    if config.spec is None:
        raise MetatuneError(f"{config.name}: {state} and no spec to build it from; import its "
                            "measurements with `metatune dataset import SOURCE --out DIR`")
    here = local_fingerprint().device_id
    if config.device_id != here:
        raise MetatuneError(f"{config.name}: {state}, and it can only be measured on {config.device_id} "
                            f"(this machine is {here}): build it there with "
                            f"`metatune dataset build --spec {config.spec} --out {config.dataset}`")
    return state


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="make train-zoo", description=__doc__)
    parser.add_argument("devices", nargs="*", metavar="DEVICE_ID",
                        help="only these devices' configs (e.g. x86_64-znver5-2c); default: every config")
    args = parser.parse_args(argv)
    try:
        train_all(devices=args.devices)
    except MetatuneError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
