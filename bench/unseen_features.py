"""Features a checkpoint never saw vary: how its zero-shot scores rank ResNet-18's residual tasks.

    .venv/bin/python -m bench.unseen_features --configs 48 --json docs/bench/unseen-features/znver3.json

No training program of the shipped datasets has a block with four buffers, so every checkpoint's
`buf3.*` statistics are constant (std at the floor 1e-3). ResNet-18's residual blocks
(`fused_conv2d*_add*_add*_relu*`: convolution, bias, shortcut, output) have one, and standardised
by that floor their `buf3` features reached the model at ~15,000. The model now gets 0 there
(`FeatureStats.normalize`). For every task of the model whose programs have a feature the checkpoint
never saw vary, random
configurations are measured (the same ones for both), and the checkpoint's scores are compared with the
measured speeds both ways: zero-shot (BatchBO's prior before a task's first measurement) and adapted by
MAML's inner loop on the first 8 configurations, as `tune` adapts it (then ranking the others): the
rank correlation, and how fast the best-scored configuration is against the best measured one.
With `--encode-only` (for a `--target` this machine cannot run: a GPU's, here without one) the programs are
encoded, not measured, and the two ways' zero-shot scores are compared with each other; on the GPU's
machine, `--target cuda` measures. A target that cannot be measured here without `--encode-only` is an error.
"""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from metatune import MetatuneError


SUPPORT = (0, 8)  # zero-shot (BatchBO's prior before any measurement), and adapted on 8 measurements


class DividedByTheFloor:
    """The normalisation before: (x - mean) / std everywhere, a never-varying feature divided by 1e-3."""

    def __init__(self, stats) -> None:
        self.mean, self.std = stats.mean, stats.std

    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        return (feats - self.mean) / self.std


def scores(trained, builder, encoded, support: int) -> np.ndarray:
    """The checkpoint's scores of `encoded`'s programs after `support`: zero-shot when 0, else adapted by
    MAML's inner loop on the first `support` programs as `tune` adapts it (those are scored too)."""
    from metatune.learn.checkpoint import TrainedModel
    from metatune.search.online_model import _MetaTuneCostModelLogic

    online = _MetaTuneCostModelLogic(TrainedModel(trained.model, builder, trained.maml))
    params = online._base if support == 0 else online._adapt(encoded.subset(range(support)))
    with torch.no_grad():
        batch = builder.batch(encoded, range(len(encoded)))
        return torch.func.functional_call(trained.model, params, batch.inputs()).numpy()


def study(model: str, checkpoint: str | None, configs: int, seed: int, target_text: str | None,
          encode_only: bool = False) -> dict:
    from metatune.encode.graphs import MIN_STD, GraphBuilder, encode_programs
    from metatune.encode.supergraph import GraphEncoder
    from metatune.env.device import fingerprint_for_target, require_runnable
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.measure.measurer import Measurer, MeasureSettings, median_latency
    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model, task_context

    import_tensor_intrinsics()
    device = fingerprint_for_target(target_text)
    measured = not encode_only
    if measured:
        require_runnable(device)  # measured where asked to be, never quietly encoded only
    target = device.tvm_target()
    trained, checkpoint_id, _ = resolve_checkpoint(checkpoint or "auto", device)  # also: its template fits
    encoder = GraphEncoder(trained.builder.template)
    unseen = np.flatnonzero((trained.builder.stats.std <= MIN_STD).numpy())
    before = GraphBuilder(trained.builder.template, trained.builder.mode, DividedByTheFloor(trained.builder.stats))
    ways = (("divided by the floor", before), ("zero", trained.builder))
    rng = np.random.default_rng(seed)
    out = {"device": device.device_id, "checkpoint": checkpoint_id, "model": model, "configs": configs,
           "measured": measured, "tasks": {}}
    with Measurer(target, MeasureSettings(verify=False)) if measured else nullcontext() as measurer:
        for task in extract_tasks(import_model(ModelSource.parse(model)).mod, target):
            space = SearchSpace(DesignSpaces.from_context(task_context(task, target)))
            drawn = [c for c in (space.sample(rng) for _ in range(configs)) if c is not None]
            if not drawn or not any(np.abs(encoder.analyse(c).features[:, unseen]).max() > 0 for c in drawn[:4]):
                continue
            if not measured:  # how far apart the two ways' zero-shot scores rank
                encoded = encode_programs(encoder, [c.sch for c in drawn], "", "", "study", [0.0] * len(drawn))
                first, second = (scores(trained, builder, encoded, 0) for _, builder in ways)
                top = set(np.argsort(-first)[:8]) & set(np.argsort(-second)[:8])
                agreement = float(spearmanr(first, second).statistic)
                row = {"drawn": len(drawn), "spearman_between_ways": round(agreement, 3), "top8_shared": len(top)}
            else:
                results = measurer.measure(None, [c.measure_candidate() for c in drawn])
                timed = [(c, r) for c, r in zip(drawn, results) if r.failure is None]
                speed = np.array([1.0 / median_latency(r.latencies_s) for _, r in timed])
                encoded = encode_programs(encoder, [c.sch for c, _ in timed], "", "", "study", list(np.log2(speed)))
                row = {"measured": len(timed)}
                for name, builder in ways:
                    for support in SUPPORT:
                        score, rest = scores(trained, builder, encoded, support)[support:], speed[support:]
                        row[f"{name}, k={support}"] = {
                            "spearman": round(float(spearmanr(score, rest).statistic), 3),
                            "top1_of_best": round(float(rest[int(np.argmax(score))] / rest.max()), 3)}
            out["tasks"][task.task_name] = row
            print(task.task_name, json.dumps(row), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--checkpoint", default=None, help="zoo id or path (default: the zoo's for the device)")
    parser.add_argument("--configs", type=int, default=48, help="random configurations measured per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default=None,
                        help="the device's target (default: this machine; `cuda`: its GPU)")
    parser.add_argument("--encode-only", action="store_true",
                        help="encode the programs without measuring them (a --target this machine cannot run, e.g. "
                        "nvidia/nvidia-h100 on a CPU) and compare the two ways' zero-shot scores")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    try:
        result = study(args.model, args.checkpoint, args.configs, args.seed, args.target, args.encode_only)
    except MetatuneError as err:
        raise SystemExit(f"error: {err}") from None
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
