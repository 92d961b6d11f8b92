"""The arguments every checkpoint-scoring bench tool shares: which bench target and which checkpoint."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--target` (the target the bench tuned for) and `--checkpoint` (as `metatune tune`)."""
    parser.add_argument("--target", default=None, help="the target the bench tuned for (default: this machine)")
    parser.add_argument("--checkpoint", default=None, help="as `metatune tune --checkpoint` (default: the one the runs in "
                        "the bench directory were tuned with, `auto` where none recorded one)")


def runs_checkpoint(out: Path, strategy: str | None = None) -> str:
    """The checkpoint the bench's runs (of `strategy`, or of every strategy) were tuned with: `auto` today
    may name a newer version than theirs."""
    pattern = f"runs/*/{strategy}-r*.json" if strategy else "runs/*/*.json"
    names = {json.loads(p.read_text()).get("checkpoint") for p in Path(out).glob(pattern)} - {None}
    if len(names) > 1:
        raise SystemExit(f"the runs in {out} were tuned with several checkpoints ({', '.join(sorted(names))}): "
                         "name one with --checkpoint")
    return names.pop() if names else "auto"


def resolve_model(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The TVM target, the trained model and the checkpoint's name that `args` select (`args.out`: the bench
    directory whose runs' checkpoint is the default)."""
    from metatune.env.device import fingerprint_for_target, local_fingerprint
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.tune.tuner import resolve_checkpoint

    import_tensor_intrinsics()
    fingerprint = fingerprint_for_target(args.target) if args.target else local_fingerprint()
    runs_of = getattr(args, "strategy", None)  # a study of one strategy's runs takes their checkpoint
    trained, checkpoint, _ = resolve_checkpoint(args.checkpoint or runs_checkpoint(args.out, runs_of), fingerprint)
    return fingerprint.tvm_target(), trained, checkpoint
