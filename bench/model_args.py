"""The arguments every checkpoint-scoring bench tool shares: which bench target and which checkpoint."""

from __future__ import annotations

import argparse
from typing import Any


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--target` (the target the bench tuned for) and `--checkpoint` (as `metatune tune`)."""
    parser.add_argument("--target", default=None, help="the target the bench tuned for (default: this machine)")
    parser.add_argument("--checkpoint", default="auto", help="as `metatune tune --checkpoint`")


def resolve_model(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The TVM target, the trained model and the checkpoint's name that `args` select."""
    from metatune.env.device import fingerprint_for_target, local_fingerprint
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.tune.tuner import resolve_checkpoint

    import_tensor_intrinsics()
    fingerprint = fingerprint_for_target(args.target) if args.target else local_fingerprint()
    trained, checkpoint, _ = resolve_checkpoint(args.checkpoint, fingerprint)
    return fingerprint.tvm_target(), trained, checkpoint
