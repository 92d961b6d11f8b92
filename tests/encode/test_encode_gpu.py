"""CUDA programs on the GPU super-graph template: every family, the GPU features, and the CPU
template left as it was.

Design spaces and schedules for CUDA targets are generated and inspected on any machine; only
building and timing kernels needs a GPU, so nothing here does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from metatune.encode.features import ALL_FEATURE_NAMES, FEATURE_NAMES, GPU_FEATURE_NAMES, loop_features
from metatune.encode.layout import width
from metatune.encode.supergraph import DEVICE_KINDS, GraphEncoder, Template, TemplateMismatch, device_kind
from metatune.env.target import GPU_TARGET_CLASSES
from tests.conftest import SMALL_SHAPES, small_search_space

GPU_FAMILIES = sorted(f for f in SMALL_SHAPES if f != "conv2d_winograd")  # no CUDA design space in TVM 0.27


@pytest.fixture(scope="module")
def gpu_encoder():
    return GraphEncoder(Template.for_target("cuda"))


def _space(family: str, target_class: str = "sm90"):
    import tvm

    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import Workload

    return SearchSpace(DesignSpaces(Workload.parse(SMALL_SHAPES[family]), tvm.target.Target(GPU_TARGET_CLASSES[target_class])))


def _first_program(space, seed: int = 0):
    rng = np.random.default_rng(seed)
    for ks in space.knob_spaces:
        for _ in range(8):
            cand = ks.sample(rng)
            if cand is not None:
                return cand
    raise AssertionError("no valid configuration in 8 draws per design space")


@pytest.mark.parametrize("target_class", sorted(GPU_TARGET_CLASSES))
@pytest.mark.parametrize("family", GPU_FAMILIES)
def test_random_cuda_programs_of_every_family_encode(family, target_class, gpu_encoder):
    space = _space(family, target_class)
    rng = np.random.default_rng(5)
    encoded = 0
    for ks in space.knob_spaces:
        cands = [c for c in (ks.sample(rng) for _ in range(6)) if c is not None][:2]
        for cand in cands:
            graph = gpu_encoder.augmented(cand, workload=family, knobs=space.embed(cand.config))
            assert graph.x.shape == (gpu_encoder.template.num_nodes, width(len(ALL_FEATURE_NAMES)))
            assert int(graph.mask.sum()) > 1
            encoded += 1
    assert encoded >= len(space), f"{family}: fewer than one valid program per design space"


def test_gpu_features_describe_the_launch_and_shared_memory():
    """Dense on the H100: thread-bound loops carry their axis, the launch shape is the product of
    the bound extents, and shared memory is the two staged tiles."""
    from metatune.encode.features import owners
    from metatune.encode.loopgraph import extract

    cand = _first_program(_space("dense"))
    program = extract(cand.sch.mod["main"])
    owner = owners(program)
    feats = loop_features(program, owner, ALL_FEATURE_NAMES)
    col = {n: i for i, n in enumerate(ALL_FEATURE_NAMES)}
    main = next(b for b in program.blocks if b.tiled and not b.is_init)
    threads = math.prod(program.loops[i].extent for i in main.chain if program.loops[i].thread.startswith("threadIdx"))
    blocks = math.prod(program.loops[i].extent for i in main.chain if program.loops[i].thread.startswith("blockIdx"))
    shared = [b for b in program.blocks if b.write is not None and b.write.scope == "shared"]
    assert len(shared) == 2  # data and weight staged through shared memory
    tile_bytes = sum(4 * math.prod(program.loops[i].extent for i in b.chain if owner[i] == b.index) for b in shared)
    for lp in program.loops:
        row = feats[lp.index]
        axis = lp.thread.split(".")[0]
        assert [row[col[a]] for a in ("blockIdx", "vthread", "threadIdx")] == [float(axis == a) for a in
                                                                               ("blockIdx", "vthread", "threadIdx")]
        assert row[col["shared_bytes"]] == pytest.approx(math.log2(1 + tile_bytes))
        if owner[lp.index] == main.index:
            assert row[col["threads_per_block"]] == pytest.approx(math.log2(1 + threads))
            assert row[col["blocks_per_grid"]] == pytest.approx(math.log2(1 + blocks))
    assert threads > 1 and tile_bytes > 0
    # The CPU columns are the CPU encoder's, unchanged.
    assert np.array_equal(feats[:, : len(FEATURE_NAMES)], loop_features(program, owner))


def test_shared_memory_grows_with_the_staged_tile():
    """Two configurations of one space that stage different tile sizes get different shared_bytes."""
    space = _space("dense")
    seen = set()
    rng = np.random.default_rng(11)
    encoder = GraphEncoder(Template.for_target("cuda"))
    column = len(FEATURE_NAMES) + GPU_FEATURE_NAMES.index("shared_bytes")
    for ks in space.knob_spaces:
        for _ in range(12):
            cand = ks.sample(rng)
            if cand is not None:
                seen.add(round(float(encoder.analyse(cand).features[0, column]), 4))
    assert len(seen) > 1


def test_device_kinds_have_their_own_templates():
    import tvm

    cpu, gpu = Template.for_target("cpu"), Template.for_target(tvm.target.Target("nvidia/nvidia-h100"))
    assert cpu.version == Template.load().version != gpu.version
    assert cpu.features == FEATURE_NAMES and gpu.features == ALL_FEATURE_NAMES
    assert device_kind(tvm.target.Target("llvm")).name == "cpu"
    assert Template.by_version(gpu.version) == gpu and Template.by_version(cpu.version) == cpu
    with pytest.raises(TemplateMismatch, match="not one this code ships"):
        Template.by_version("000000000000")
    with pytest.raises(TemplateMismatch, match="no super-graph template for vulkan"):
        device_kind(tvm.target.Target("vulkan"))
    assert any(s.startswith("main.read1.shared/") for s in gpu.slots)
    assert not any("shared" in s for s in cpu.slots)


def test_a_cpu_program_is_not_a_gpu_program(gpu_encoder):
    """Encoding a CPU schedule with the GPU template names the slot it lacks instead of guessing."""
    cand = _first_program(small_search_space("dense"))
    with pytest.raises(TemplateMismatch, match="not in super-graph template"):
        gpu_encoder.augmented(cand)


def test_cuda_template_ships_as_package_data():
    import tomllib

    from metatune.fileio import REPO_ROOT

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert DEVICE_KINDS["cuda"].template_path.name in pyproject["tool"]["setuptools"]["package-data"]["metatune.encode"]
