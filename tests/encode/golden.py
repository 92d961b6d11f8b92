"""Recorded encodings of fixed programs, one file per template version.

Encoding caches and checkpoints are keyed on the super-graph template version alone, so the encoder's
output must be a function of it: features computed differently under the same version would mix old
and new encodings in a cache, and feed a checkpoint features it was not trained on. The test beside
this module encodes fixed programs (fixed shapes, seeds and targets: no host CPU involved) and compares
them with what was recorded for the version. After a deliberate change of the features, bump
`TEMPLATE_FORMAT` (a new version: rebuild the templates, retrain) and record the new version with
`python -m tests.encode.golden --write`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import tvm
from safetensors.numpy import save_file

from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.target import GPU_TARGET_CLASSES
from metatune.env.tvm_setup import import_tensor_intrinsics
from metatune.space.knob_space import DesignSpaces, SearchSpace
from metatune.workload.operators import Workload
from tests.conftest import SMALL_SHAPES

GOLDEN_DIR = Path(__file__).parent / "golden"
SEEDS = (0, 1)
# Fixed targets: a CPU named by its -mcpu (the host's would change the programs), and the H100's class.
TARGETS = {
    "cpu": {"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": "skylake-avx512", "num-cores": 2},
    "cuda": "sm90",
}
FAMILIES = {"cpu": sorted(SMALL_SHAPES), "cuda": sorted(f for f in SMALL_SHAPES if f != "conv2d_winograd")}


def _target(kind: str) -> tvm.target.Target:
    spec = TARGETS[kind]
    return tvm.target.Target(GPU_TARGET_CLASSES[spec] if isinstance(spec, str) else spec)


def encodings(kind: str) -> tuple[str, dict[str, np.ndarray]]:
    """The template version of a device kind and, per program, its features, slots and parents."""
    target = _target(kind)
    import_tensor_intrinsics(target)
    encoder = GraphEncoder(Template.for_target(target))
    out: dict[str, np.ndarray] = {}
    for family in FAMILIES[kind]:
        space = SearchSpace(DesignSpaces(Workload.parse(SMALL_SHAPES[family]), target))
        for seed in SEEDS:
            (candidate,) = space.sample_candidates(1, seed=seed)
            enc = encoder.analyse(candidate.sch)
            name = f"{family}/{seed}"
            out[f"{name}/features"] = np.ascontiguousarray(enc.features, dtype=np.float32)
            out[f"{name}/slots"] = encoder.slots_of(enc).astype(np.int64)
            out[f"{name}/parents"] = np.array([lp.parent for lp in enc.program.loops], dtype=np.int64)
    return encoder.version, out


def golden_path(kind: str, version: str) -> Path:
    return GOLDEN_DIR / f"{kind}-{version}.safetensors"


def write(kind: str) -> Path:
    version, tensors = encodings(kind)
    path = golden_path(kind, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"template_version": version})
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the current encodings of every device kind")
    if parser.parse_args().write:
        for kind in TARGETS:
            print(write(kind))


if __name__ == "__main__":
    main()
