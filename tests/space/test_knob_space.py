"""Knob spaces: every family's design spaces as explicit, round-trippable search spaces, on
this machine's CPU and on an H100 (CUDA design spaces are generated and replayed anywhere; only
building and timing kernels needs the GPU, so the CUDA cases never do)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import tvm

from metatune.space.knob_space import (
    CATEGORICAL,
    COMPUTE_LOCATION,
    FACTOR_MOVE,
    TILE,
    Candidate,
    Config,
    DesignSpaces,
    KnobSpace,
    SearchSpace,
    error_tail,
    is_factor_move,
    perfect_tilings,
)
from metatune.workload.operators import FAMILIES, Workload
from tests.conftest import SMALL_SHAPES
from tests.conftest import local_target as target
from tests.conftest import small_search_space as search_space
from tests.space.cuda import H100, cuda_search_space

SMALL = {family: text.split(":", 1)[1] for family, text in SMALL_SHAPES.items()}
DEVICES = ["cpu", "cuda"]
# TVM 0.27 generates no CUDA design space for winograd (tests/space/test_gpu_space.py)
CUDA_FAMILIES = sorted(f for f in SMALL if f != "conv2d_winograd")


def space_on(device: str, family: str) -> SearchSpace:
    return search_space(family) if device == "cpu" else cuda_search_space(family)


def target_of(device: str) -> tvm.target.Target:
    return target() if device == "cpu" else tvm.target.Target(H100)


def test_small_shapes_cover_every_family():
    assert set(SMALL) == set(FAMILIES)


def test_design_spaces_are_the_same_in_every_generation():
    """TVM samples while it generates the spaces (winograd's input tile: computed at a sampled location or
    inlined, a different space); generated twice, they must be the same, decisions included, or a
    configuration recorded in one process would mean another schedule in the next."""
    workload = Workload.parse(SMALL_SHAPES["conv2d_winograd"])
    first, second = (DesignSpaces(workload, target()) for _ in range(2))
    assert [str(s.trace) for s in first.spaces] == [str(s.trace) for s in second.spaces]


def test_perfect_tilings_match_brute_force():
    for extent, n, max_inner in [(12, 2, -1), (24, 4, 64), (28, 4, 4), (1, 3, 64), (7, 2, 3)]:
        brute = sorted(
            t for t in itertools.product(range(1, extent + 1), repeat=n)
            if math.prod(t) == extent and (max_inner < 0 or t[-1] <= max_inner)
        )
        assert sorted(perfect_tilings(extent, n, max_inner)) == brute
    assert len(perfect_tilings(12, 2)) == 6


@pytest.mark.parametrize("device, family", [("cpu", f) for f in sorted(SMALL)] + [("cuda", f) for f in CUDA_FAMILIES])
def test_every_design_space_samples_round_trips(device, family):
    space = space_on(device, family)
    expected_spaces = 9 if family == "conv2d_winograd" else 3
    assert len(space) == expected_spaces
    rng = np.random.default_rng(7)
    for ks in space.knob_spaces:
        # one knob per sampling instruction of the design-space trace, none of an unknown kind
        sampling = [i for i in ks.insts if i.kind.name.startswith("Sample")]
        assert len(ks.knobs) == len(sampling) > 0
        assert {k.kind for k in ks.knobs} <= {TILE, CATEGORICAL, COMPUTE_LOCATION}
        assert bool(ks.limits) == (device == "cuda")  # a thread limit on every CUDA space, none on CPUs
        for knob in ks.knobs:
            if knob.kind == TILE:
                assert knob.choices and all(math.prod(c) == math.prod(knob.choices[0]) for c in knob.choices)
        for _ in range(3):
            cand = ks.sample(rng)
            assert cand is not None, f"{family} space {ks.index}: {dict(ks.rejected)}"
            config = cand.config
            assert ks.check(config) is None
            assert hash(config) == hash(Config.from_json(config.to_json()))
            assert space.embed(config).shape == (space.embedding_dim,)
            # schedule -> trace -> configuration, exactly, through either entry point
            assert ks.config_of(cand) == config
            assert space.config_of(cand.trace) == config
            again = ks.schedule(config, strict=True)
            assert again is not None and again.config == config
            tvm.ir.assert_structural_equal(again.sch.mod, cand.sch.mod)


def _quick(config: Config, ks: KnobSpace) -> Config:
    """The same configuration with the unroll step at 0/16 (LLVM is slow on 512)."""
    decisions = list(config.decisions)
    for knob in ks.knobs:
        if knob.kind == CATEGORICAL:
            decisions[knob.position] = min(int(decisions[knob.position]), 1)
    return config._replace(decisions=tuple(decisions))


@pytest.mark.parametrize("family", sorted(f for f in SMALL if f != "conv2d_winograd"))
def test_sampled_configurations_compile_and_compute_correctly(family):
    from metatune.measure.check import check_schedule

    space = search_space(family)
    rng = np.random.default_rng(11)
    spaces = [0, len(space) - 1] if family == "conv2d" else [int(rng.integers(len(space)))]
    for index in spaces:
        ks = space[index]
        cand = ks.sample(rng)
        assert cand is not None
        cand = ks.schedule(_quick(cand.config, ks))
        assert cand is not None
        assert check_schedule(space.spaces.workload, cand.sch, target()) <= 1e-3


def test_winograd_candidates_are_correct_or_typed_wrong_results_never_timed():
    """MetaSchedule miscompiles some winograd schedules, and which ones depends on the target's
    vector width: every candidate is either checked correct and timed, or reported as
    `wrong_result` without a time, whatever the machine."""
    from metatune.measure.measurer import FailureKind, Measurer, MeasureSettings

    space = search_space("conv2d_winograd")
    rng = np.random.default_rng(11)
    cands = []
    for index in (0, len(space) - 1):
        ks = space[index]
        cands += [ks.schedule(_quick(ks.sample(rng).config, ks)) for _ in range(2)]
    with Measurer(target(), MeasureSettings(repeat=1, min_repeat_ms=1)) as measurer:
        results = measurer.measure(space.spaces.workload, [c.measure_candidate() for c in cands])
    assert len(results) == len(cands)
    for result in results:
        if result.ok:
            assert result.latencies_s and result.failure is None
        else:
            assert result.failure == FailureKind.WRONG_RESULT and not result.latencies_s, result.message


@pytest.mark.parametrize("device", DEVICES)
def test_tuning_record_through_json_database_round_trips(device, tmp_path):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    space = space_on(device, "conv2d")
    rng = np.random.default_rng(3)
    cands = [space.sample(rng) for _ in range(4)]
    paths = dict(path_workload=str(tmp_path / "wl.json"), path_tuning_record=str(tmp_path / "rec.json"))
    db = ms.database.JSONDatabase(**paths)
    workload = db.commit_workload(space.spaces.mod)
    for i, cand in enumerate(cands):
        args = ArgInfo.from_entry_func(cand.sch.mod, remove_preproc=True)
        db.commit_tuning_record(ms.database.TuningRecord(cand.trace, workload, [1e-3 * (i + 1)], target_of(device), args))
    reread = ms.database.JSONDatabase(**paths).get_all_tuning_records()
    got = sorted((float(r.run_secs[0]), space.config_of(r)) for r in reread)
    assert [c for _, c in got] == [c.config for c in cands]


@pytest.mark.parametrize("device", DEVICES)
def test_configs_from_the_existing_random_sampler_round_trip(device):
    space = space_on(device, "depthwise_conv2d")
    for cand in space.spaces.random_candidates(4, seed=5):
        config = space.config_of(cand)
        assert config.space == cand.space_index
        rebuilt = space.schedule(config, strict=True)
        assert rebuilt is not None and rebuilt.trace_key == cand.trace_key
    assert Candidate(0, cand.sch).config is None  # the old constructor still works


@pytest.mark.parametrize("device", DEVICES)
def test_invalid_configurations_are_reported_not_raised(device):
    space = space_on(device, "conv2d")
    ks = space[0]
    good = ks.default
    tile = next(k for k in ks.knobs if k.kind == TILE and len(k.choices) > 1)
    bad_tile = list(good.decisions)
    bad_tile[tile.position] = (999,) + (1,) * (len(good.decisions[tile.position]) - 1)
    assert ks.schedule(good._replace(decisions=tuple(bad_tile))) is None
    assert ks.schedule(good._replace(decisions=good.decisions[:-1])) is None
    assert ks.schedule(good._replace(space=1)) is None
    assert space.schedule(Config(len(space), good.decisions)) is None


@pytest.mark.parametrize("device", DEVICES)
def test_decisions_taken_from_numpy_are_the_same_configuration(device):
    space = space_on(device, "conv2d")
    good = space.sample_candidates(1, seed=0)[0].config
    ks = space[good.space]
    from_numpy = good._replace(decisions=tuple(np.asarray(d, dtype=np.int64)[()] if isinstance(d, int)
                                               else tuple(np.int64(x) for x in d) for d in good.decisions))
    built = ks.schedule(from_numpy, strict=True)
    assert built is not None and built.config == good


def test_rejections_count_the_messages_last_line_or_the_type():
    assert error_tail(RuntimeError("Traceback:\n  frame 0\nValueError: bad split")) == "ValueError: bad split"
    assert error_tail(RuntimeError("  ")) == "RuntimeError"  # an empty message counts, never raises


def test_an_unusable_compute_location_is_snapped():
    """CPU only: CUDA's design spaces inline the padding, so they have no compute-location knob."""
    space = search_space("conv2d")
    ks = space[0]
    good = ks.default
    # a compute location TVM cannot use is snapped: strict refuses, lenient reports the snap
    loc = next(k for k in ks.knobs if k.kind == COMPUTE_LOCATION)
    valid = ks.valid_values(good, loc.position)
    assert -1 in valid and len(valid) >= 2
    invalid = next(v for v in range(max(valid)) if v not in valid)
    decisions = list(good.decisions)
    decisions[loc.position] = invalid
    asked = good._replace(decisions=tuple(decisions))
    assert ks.schedule(asked, strict=True) is None
    snapped = ks.schedule(asked)
    assert snapped is not None and snapped.config.decisions[loc.position] in valid
    assert snapped.config.decisions[loc.position] != invalid
    for value in valid:  # and every reported valid value is accepted as is
        decisions[loc.position] = value
        assert ks.schedule(good._replace(decisions=tuple(decisions)), postprocess=False, strict=True) is not None


@pytest.mark.parametrize("device", DEVICES)
def test_neighbours_change_one_knob(device):
    rng = np.random.default_rng(0)
    dense = space_on(device, "dense")
    cand = dense.sample(rng)
    for _ in range(5):
        nb = dense.neighbour(cand.config, rng)
        assert nb is not None and nb.config.space == cand.config.space
        assert sum(a != b for a, b in zip(nb.config.decisions, cand.config.decisions)) == 1
    conv = space_on(device, "conv2d")
    cand = conv.sample(rng)
    for _ in range(5):
        nb = conv.neighbour(cand.config, rng)
        changed = [k for k, a, b in zip(conv[cand.config.space].knobs, nb.config.decisions, cand.config.decisions)
                   if a != b]
        assert sum(not k.conditional for k in changed) <= 1 and changed  # plus snapped locations



def test_a_factor_move_moves_one_divisor_between_two_levels():
    assert is_factor_move((4, 2, 1, 3), (2, 2, 2, 3))  # a 2 from level 0 to level 2
    assert is_factor_move((4, 2, 1, 3), (1, 8, 1, 3))  # the whole 4 to level 1
    assert not is_factor_move((4, 6), (6, 4))  # same product, but 4 / 6 moves no divisor
    assert not is_factor_move((4, 2, 1, 3), (2, 1, 4, 3))  # three levels changed
    assert not is_factor_move((4, 2, 1, 3), (4, 2, 1, 3))  # nothing moved


@pytest.mark.parametrize("device", DEVICES)
def test_factor_moves_stay_one_tile_step_away(device):
    """`tile_moves="factor"`: a moved tile knob keeps all but two of its levels and moves one divisor
    between them (TVM's MutateTileSize), while the default may jump to any other tiling; the
    neighbours are still valid configurations of the same space."""
    rng = np.random.default_rng(3)
    conv = space_on(device, "conv2d")
    cand = conv.sample(rng)
    knobs = conv[cand.config.space].knobs
    tile_moved = 0
    for nb in conv.neighbours([(cand.config, 1)] * 24, rng, tile_moves=FACTOR_MOVE):
        assert nb is not None and conv[nb.config.space].check(nb.config) is None
        for knob, new, old in zip(knobs, nb.config.decisions, cand.config.decisions):
            if knob.kind == TILE and new != old:
                assert is_factor_move(old, new), (knob.name, old, new)
                tile_moved += 1
    assert tile_moved >= 8  # most knobs are tiles: most of the 24 moves changed one
    anywhere = [nb for nb in conv.neighbours([(cand.config, 1)] * 48, rng)]
    jumps = [(old, new) for nb in anywhere for k, new, old in zip(knobs, nb.config.decisions, cand.config.decisions)
             if k.kind == TILE and new != old and not is_factor_move(old, new)]
    assert jumps  # the default reaches tilings no single factor move does
    with pytest.raises(ValueError, match="tile_moves"):
        conv.neighbours([(cand.config, 1)], rng, tile_moves="far")


@pytest.mark.parametrize("device", DEVICES)
def test_mutants_change_up_to_the_asked_number_of_knobs(device):
    """`changes=3` moves three knobs in one build where the space offers them (snapped locations aside)."""
    rng = np.random.default_rng(1)
    conv = space_on(device, "conv2d")
    cand = conv.sample(rng)
    knobs = conv[cand.config.space].knobs
    counts = []
    for _ in range(8):
        nb = conv.neighbour(cand.config, rng, changes=3)
        assert nb is not None and conv[nb.config.space].check(nb.config) is None
        counts.append(sum(not k.conditional and a != b for k, a, b in zip(knobs, nb.config.decisions,
                                                                          cand.config.decisions)))
    assert max(counts) <= 3 and max(counts) >= 2, counts

# dense 16x32x24: on CPUs 16 = 2^4 and 32 = 2^5 into 4 factors, the 8 divisors of 24, 4 unroll
# steps; on CUDA 16 and 32 into 5 factors, 24 = 2^3 * 3 into 3, two cooperative-fetch widths of
# 4 and 8 unroll steps (thread-limit breakers are counted too: `size` is an upper bound there)
DENSE_SIZES = {"cpu": 35 * 56 * 8 * 4, "cuda": 70 * 126 * 30 * 4 * 4 * 8}


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_and_size(device):
    dense = space_on(device, "dense")
    ks = dense[0]
    config = ks.default
    emb = ks.embed(config)
    assert emb.shape == (ks.embedding_dim,) == (len(ks.embedding_names()),)
    first = len(config.decisions[0])
    assert list(emb[:first]) == [math.log2(f) for f in config.decisions[0]]
    unroll = ks.knobs[-1]
    assert unroll.kind == CATEGORICAL and unroll.name == "unroll_explicit"
    width = unroll.embedding_width
    assert emb[-width:].sum() == 1.0 and emb[-width + config.decisions[-1]] == 1.0
    assert ks.size == math.prod(len(k.choices) for k in ks.knobs) == DENSE_SIZES[device]
    assert dense.size == 3 * ks.size
    widths = {dense.embed(c.config).shape for c in dense.sample_candidates(6, seed=1)}
    assert widths == {(dense.embedding_dim,)}


def test_a_compute_location_counts_its_valid_locations():
    conv = search_space("conv2d")
    assert conv[0].size > math.prod(len(k.choices) for k in conv[0].knobs if not k.conditional)


@pytest.mark.parametrize("device", DEVICES)
def test_sample_candidates_are_distinct_and_respect_exclude(device):
    space = space_on(device, "batch_matmul")
    first = space.sample_candidates(6, seed=2)
    assert len({c.config for c in first}) == 6
    more = space.sample_candidates(6, seed=2, exclude={c.config for c in first})
    assert not {c.config for c in first} & {c.config for c in more}


@pytest.mark.parametrize("device", DEVICES)
def test_parallel_builds_give_what_one_thread_gives(device, monkeypatch):
    """Candidates are built on every core, yet a seed decides them: the same samples, neighbours
    and mutants come out of one build thread as out of several."""
    from concurrent.futures import ThreadPoolExecutor

    from metatune.space import parallel

    space = space_on(device, "conv2d")

    def draw_all() -> list[Config | None]:
        rng = np.random.default_rng(7)
        samples = space.sample_candidates(12, seed=3)
        moves = [(c.config, 1 + i % 3) for i, c in enumerate(samples)]
        return [c.config for c in samples] + [c and c.config for c in space.neighbours(moves, rng)]

    with ThreadPoolExecutor(max_workers=4) as four, ThreadPoolExecutor(max_workers=1) as single:
        monkeypatch.setattr(parallel, "_executor", lambda: four)
        several = draw_all()
        monkeypatch.setattr(parallel, "_executor", lambda: single)
        one = draw_all()
    assert several == one and len(set(several)) == len(several) and None not in several
