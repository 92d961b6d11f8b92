"""Recorded encodings of fixed programs, one file per template version.

Encoding caches and checkpoints are keyed on the super-graph template version alone, so the encoder's
output must be a function of it: features computed differently under the same version would mix old
and new encodings in a cache, and feed a checkpoint features it was not trained on. The test beside
this module encodes fixed programs (fixed shapes, seeds and targets: no host CPU involved) and compares
them with what was recorded for the version. After a deliberate change of the features, bump
`TEMPLATE_FORMAT` (a new version: rebuild the templates, retrain) and record the new version with
`python -m tests.encode.golden --write`. Each program's hash is recorded too, so that programs changed
by something else (TVM's sampling, the operators' definitions) are told apart from a changed encoder;
only then may a version's file be recorded again (`--write --replace`).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import tvm
from safetensors import safe_open
from safetensors.numpy import save_file

from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.target import GPU_TARGET_CLASSES
from metatune.env.tvm_setup import import_tensor_intrinsics
from metatune.space.knob_space import DesignSpaces, SearchSpace
from metatune.workload.operators import Workload

GOLDEN_DIR = Path(__file__).parent / "golden"
SEEDS = (0, 1)
# Fixed targets: a CPU named by its -mcpu (the host's would change the programs), and the H100's class.
TARGETS = {
    "cpu": {"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": "skylake-avx512", "num-cores": 2},
    "cuda": "sm90",
}
# The recorded programs' shapes, fixed here: a change elsewhere must not change what was recorded.
SHAPES = {
    "conv1d": "conv1d:n=1,c=16,l=64,k=16,r=3,stride=1,pad=1",
    "conv1d_transpose": "conv1d_transpose:n=1,c=16,l=32,k=8,r=4,stride=2,pad=1",
    "conv2d": "conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=2,pad=1",
    "conv2d_bias": "conv2d_bias:n=1,c=8,h=14,w=14,k=16,r=1,s=1,stride=2,pad=0",
    "conv2d_bias_relu": "conv2d_bias_relu:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=1,pad=1",
    "conv2d_bias_add_relu": "conv2d_bias_add_relu:n=1,c=8,h=14,w=14,k=8,r=3,s=3,stride=1,pad=1",
    "conv2d_transpose": "conv2d_transpose:n=1,c=8,h=7,w=7,k=8,r=4,s=4,stride=2,pad=1",
    "conv2d_winograd": "conv2d_winograd:n=1,c=8,h=8,w=8,k=8,r=3,s=3,stride=1,pad=1",
    "depthwise_conv2d": "depthwise_conv2d:n=1,c=8,h=14,w=14,r=3,s=3,stride=1,pad=1",
    "dense": "dense:m=16,n=32,k=24",
    "dense_bias_relu": "dense_bias_relu:m=16,n=32,k=24",
    "dense_bias": "dense_bias:m=16,n=32,k=24",
    "batch_matmul": "batch_matmul:b=2,m=16,n=8,k=24",
}
FAMILIES = {"cpu": sorted(SHAPES), "cuda": sorted(f for f in SHAPES if f != "conv2d_winograd")}
PROGRAM_KEY = "program:"  # metadata prefix of each program's hash


def _target(kind: str) -> tvm.target.Target:
    spec = TARGETS[kind]
    return tvm.target.Target(GPU_TARGET_CLASSES[spec] if isinstance(spec, str) else spec)


def encodings(kind: str) -> tuple[str, dict[str, np.ndarray], dict[str, str]]:
    """The template version of a device kind and, per program, its features, slots and parents, and the
    sha256 of its TVMScript (the program the encoder was given)."""
    target = _target(kind)
    import_tensor_intrinsics(target)
    encoder = GraphEncoder(Template.for_target(target))
    out: dict[str, np.ndarray] = {}
    programs: dict[str, str] = {}
    for family in FAMILIES[kind]:
        space = SearchSpace(DesignSpaces(Workload.parse(SHAPES[family]), target))
        for seed in SEEDS:
            (candidate,) = space.sample_candidates(1, seed=seed)
            enc = encoder.analyse(candidate.sch)
            name = f"{family}/{seed}"
            programs[name] = hashlib.sha256(candidate.sch.mod.script().encode()).hexdigest()
            out[f"{name}/features"] = np.ascontiguousarray(enc.features, dtype=np.float32)
            out[f"{name}/slots"] = encoder.slots_of(enc).astype(np.int64)
            out[f"{name}/parents"] = np.array([lp.parent for lp in enc.program.loops], dtype=np.int64)
    return encoder.version, out, programs


def recorded_programs(path: Path) -> dict[str, str]:
    """The program hashes recorded with a version's encodings."""
    with safe_open(str(path), "np") as f:
        metadata = f.metadata() or {}
    return {k[len(PROGRAM_KEY):]: v for k, v in metadata.items() if k.startswith(PROGRAM_KEY)}


def golden_path(kind: str, version: str) -> Path:
    return GOLDEN_DIR / f"{kind}-{version}.safetensors"


def write(kind: str, replace: bool = False) -> Path:
    """Record a kind's encodings under its template version; a version already recorded is kept unless
    `replace` (its encodings define the version: replace them only for programs that changed)."""
    version, tensors, programs = encodings(kind)
    path = golden_path(kind, version)
    if path.exists() and not replace:
        raise SystemExit(f"{path} exists: template {version} is recorded. A changed encoder needs a new version "
                         "(bump TEMPLATE_FORMAT); pass --replace only where the programs changed, not the encoder")
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"template_version": version, **{PROGRAM_KEY + name: h for name, h in programs.items()}}
    save_file(tensors, str(path), metadata=metadata)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the current encodings of every device kind")
    parser.add_argument("--replace", action="store_true",
                        help="with --write: record again a version already recorded (its programs changed)")
    args = parser.parse_args()
    if args.write:
        for kind in TARGETS:
            print(write(kind, args.replace))


if __name__ == "__main__":
    main()
