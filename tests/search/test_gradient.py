"""Gradient search: differentiable super-graph features, Felix's constraints and rounding, tuning."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.encode.features import NUM_FEATURES
from metatune.encode.graphs import MIN_STD, FeatureStats, GraphBuilder, encode_programs
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.features import VariantFeatures
from metatune.search.gradient.program import build
from metatune.search.gradient.relax import TileRelaxation
from metatune.search.gradient.variants import VariantModel, variant_of
from metatune.space.knob_space import CATEGORICAL, TILE, Config, DesignSpaces, KnobSpace, SearchSpace
from metatune.workload.operators import Workload, resolve_workload
from tests.conftest import SMALL_SHAPES

C6 = "C6"  # ResNet-18 conv2d 128x28x28, 3x3: a padding stage with a compute location
DENSE = SMALL_SHAPES["dense"]
TINY_DENSE = "dense:m=4,n=4,k=4"  # small enough to enumerate every configuration


@functools.lru_cache(maxsize=None)
def search_space(text: str) -> SearchSpace:
    from metatune.env.device import local_fingerprint

    return SearchSpace(DesignSpaces(resolve_workload(text), local_fingerprint().tvm_target()))


@functools.lru_cache(maxsize=None)
def encoder() -> GraphEncoder:
    return GraphEncoder()


@functools.lru_cache(maxsize=None)
def builder() -> GraphBuilder:
    """Standardisation with arbitrary statistics: the layout, not the checkpoint, is under test. Two
    features are at the std's floor (never varied in training): both ways must give them 0."""
    std = torch.linspace(0.5, 3.0, NUM_FEATURES)
    std[[0, NUM_FEATURES - 1]] = MIN_STD
    stats = FeatureStats(torch.linspace(-1.0, 2.0, NUM_FEATURES), std)
    return GraphBuilder(Template.load(), "supergraph", stats)


_MODELS: dict = {}


def model_for(ks: KnobSpace, config: Config) -> VariantModel:
    variant = variant_of(ks, config)
    key = (str(ks.spaces.workload), variant)
    if key not in _MODELS:
        program = build(ks, config)
        _MODELS[key] = VariantModel(variant, ks, program, VariantFeatures(program, builder(), encoder()),
                                    TileRelaxation(program, ks))
    return _MODELS[key]


def unroll_index(model: VariantModel, config: Config) -> int:
    return int(config.decisions[model.program.unroll.position]) if model.program.unroll else 0  # type: ignore[arg-type]


def assert_features_match(model: VariantModel, configs: list[Config], schedules: list) -> None:
    """The differentiable node features of the configurations (one batch) are the encoder's."""
    y = torch.tensor([model.program.columns(c) for c in configs], dtype=torch.float64)
    u = torch.tensor([unroll_index(model, c) for c in configs])
    x, mask, _ = model.features.node_features(y, u)
    encoded = encode_programs(encoder(), schedules, "", "", "test", [0.0] * len(schedules))
    want = builder().batch(encoded, range(len(schedules)))
    assert torch.equal(mask, want.mask)
    err = (x - want.x).abs().amax(dim=(1, 2))
    worst = int(err.argmax())
    assert float(err[worst]) <= 1e-5, f"{configs[worst]}: features differ by {float(err[worst]):.2e}"


# ---------------------------------------------------------------------------------------------
# Exactness


@pytest.mark.parametrize("index", [0, 1, 2])
def test_features_equal_the_encoder_at_every_configuration_of_a_small_dense(index):
    ks = search_space(TINY_DENSE)[index]
    tile_knobs = [k for k in ks.knobs if k.kind == TILE]
    unroll = next(k for k in ks.knobs if k.kind == CATEGORICAL)
    configs, schedules = [], []
    for i, tiles in enumerate(itertools.product(*(k.choices for k in tile_knobs))):
        decisions = list(ks.default.decisions)
        for knob, tile in zip(tile_knobs, tiles):
            decisions[knob.position] = tile
        decisions[unroll.position] = i % len(unroll.choices)  # every unroll step, spread over the tilings
        cand = ks.schedule(Config(ks.index, tuple(decisions)), strict=True)
        assert cand is not None
        configs.append(cand.config)
        schedules.append(cand.sch)
    assert len(configs) == math.prod(len(k.choices) for k in tile_knobs) > 100
    assert_features_match(model_for(ks, configs[0]), configs, schedules)


@pytest.mark.parametrize("workload", [C6, DENSE])
def test_features_equal_the_encoder_at_random_configurations(workload):
    space = search_space(workload)
    rng = np.random.default_rng(7)
    groups: dict = {}
    for i in range(60):
        ks = space[i % len(space)]
        cand = ks.sample(rng)
        assert cand is not None and cand.config is not None
        model = model_for(ks, cand.config)
        groups.setdefault(model.variant, (model, [], []))
        groups[model.variant][1].append(cand.config)
        groups[model.variant][2].append(cand.sch)
    if workload == C6:  # the padding stage at the root, inlined, and computed at a tile loop
        locations = {loc for variant in groups for _, loc in variant.locations}
        assert -1 in locations and any(loc >= 0 for loc in locations)
    for model, configs, schedules in groups.values():
        assert_features_match(model, configs, schedules)


def test_a_design_space_outside_the_model_is_named():
    space = search_space(SMALL_SHAPES["conv2d_winograd"])
    ks = space[0]
    cand = ks.sample(np.random.default_rng(0))
    with pytest.raises(NotDifferentiable, match=r"conv2d_winograd.*design space 0.*non-affine"):
        build(ks, cand.config)


def test_a_structure_outside_the_template_drops_its_variant_not_the_search(monkeypatch):
    """A point whose postprocessed program has a loop without a template slot (reached only while
    descending) is NotDifferentiable, which drops its variant; the template's own error ended tuning."""
    from metatune.encode.supergraph import TemplateMismatch

    space = search_space(DENSE)
    cand = space[0].sample(np.random.default_rng(3))
    model = model_for(space[0], cand.config)
    y = torch.tensor([model.program.columns(cand.config)], dtype=torch.float64)
    u = torch.tensor([unroll_index(model, cand.config)])
    model.features.plans.clear()  # plans are cached per structure: make this one again

    def outside(enc):
        raise TemplateMismatch("slot 'x/i9' is not in super-graph template")

    monkeypatch.setattr(model.features.encoder, "slots_of", outside)
    with pytest.raises(NotDifferentiable, match="slot 'x/i9' is not in super-graph template"):
        model.features.node_features(y, u)


# ---------------------------------------------------------------------------------------------
# Gradients


def _points(workload: str, n: int, seed: int) -> list[tuple[VariantModel, Config, object]]:
    """(variant model, configuration, postprocessed schedule) of n random configurations."""
    space = search_space(workload)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ks = space[i % len(space)]
        cand = ks.sample(rng)
        out.append((model_for(ks, cand.config), cand.config, cand.sch))
    return out


@pytest.mark.parametrize("workload", [C6, DENSE])
def test_gradients_through_the_gcn_are_finite_and_nonzero(workload):
    torch.manual_seed(0)
    gcn = CostModel(ModelConfig(in_dim=builder().width, num_positions=builder().template.num_nodes))
    for model, config, sch in _points(workload, 4, seed=3):
        edges = builder().batch(encode_programs(encoder(), [sch], "", "", "test", [0.0]), [0]).edge_index
        y0 = torch.tensor([model.program.columns(config)], dtype=torch.float64)
        z = model.relax.free(y0).requires_grad_(True)
        x, mask, _ = model.features.node_features(model.relax.columns(z), torch.tensor([unroll_index(model, config)]))
        gcn(x, edges, mask).sum().backward()
        assert z.grad is not None and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0, config


def test_features_have_the_derivatives_finite_differences_give():
    """Inside a loop structure the features are smooth functions of the log factors."""
    noise = torch.Generator().manual_seed(1)
    for model, config, _ in _points(C6, 3, seed=11) + _points(DENSE, 3, seed=12):
        features = model.features
        u = torch.tensor([unroll_index(model, config)])
        y0 = torch.tensor([model.program.columns(config)], dtype=torch.float64)
        y0 = y0 + 0.01 * torch.rand(y0.shape, generator=noise, dtype=torch.float64)  # off the grid, factors > 1
        key = features.structures(y0, u)[0].key
        plan = features.plan(features.structures(y0, u)[0])

        def f(y: torch.Tensor) -> torch.Tensor:
            return features.loop_features(plan, y, features.log_extents(y), u)

        for _ in range(3):
            v = torch.randn(y0.shape, generator=noise, dtype=torch.float64)
            _, analytic = torch.autograd.functional.jvp(f, y0, v)
            eps = 1e-6
            assert features.structures(y0 + eps * v, u)[0].key == key == features.structures(y0 - eps * v, u)[0].key
            numeric = (f(y0 + eps * v) - f(y0 - eps * v)) / (2 * eps)
            torch.testing.assert_close(analytic, numeric, atol=1e-6, rtol=1e-5)
            assert analytic.abs().sum() > 0


# ---------------------------------------------------------------------------------------------
# Constraints and rounding


def test_free_log_factors_multiply_to_the_extent_and_penalties_mark_violations():
    model, _, _ = _points(C6, 1, seed=5)[0]
    relax = model.relax
    z = torch.randn(16, relax.num_free, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = relax.columns(z)
    for knob, k in zip(model.program.knobs, relax.knobs):
        torch.testing.assert_close(y[:, list(k.columns)].sum(-1), torch.full((16,), math.log(knob.extent),
                                                                            dtype=torch.float64))
    torch.testing.assert_close(relax.free(y), z)
    valid = torch.tensor(relax.log_columns(relax.round(y.numpy())))
    assert (relax.penalty(valid) == 0).all()
    bad = valid.clone()
    k = next(k for k in relax.knobs if k.free)
    bad[:, k.columns[-1]] = -1.0  # innermost factor below 1
    assert (relax.penalty(bad) > 0).all()


@pytest.mark.parametrize("workload", [C6, DENSE])
def test_rounding_always_gives_a_valid_configuration(workload):
    rng = np.random.default_rng(2)
    seen_location = False
    for model, config, _ in _points(workload, 12, seed=21):
        y = np.asarray([model.program.columns(config)]) + rng.normal(0.0, 0.8, (2, model.program.num_columns))
        for tiles in model.relax.round(y):
            rounded = model.config(tiles, unroll_index(model, config))
            assert model.ks.check(rounded) is None
            cand = model.ks.schedule(rounded, strict=True)  # strict: TVM kept the compute location
            assert cand is not None, rounded
        seen_location |= bool(model.program.nonunit_loops)
    assert seen_location or workload != C6


# ---------------------------------------------------------------------------------------------
# Tuning


def test_gradient_strategy_tunes_and_verifies(tmp_path):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from metatune.dataset.store import config_key
    from metatune.tune.tuner import tune_workload

    workload = Workload.parse("dense:m=64,n=64,k=64")
    result = tune_workload(workload, 16, "gradient", tmp_path / "db", trials_per_iter=8)
    assert result.strategy == "gradient" and result.trials == 16
    assert result.verified and result.max_rel_error < 1e-3 and result.best_gflops > 0
    keys = [config_key(r.trace) for r in JSONDatabase(work_dir=str(tmp_path / "db")).get_all_tuning_records()]
    assert len(keys) == len(set(keys)) == 16, "a configuration was measured twice"


def test_a_batch_spreads_over_descents_and_keeps_an_exploration_share(target):
    """Seeds that descend into one basin must not fill a batch with near-copies of one tiling."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.device import local_fingerprint
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.search.gradient.search import GradientSearch
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.tune.tuner import resolve_checkpoint

    import_tensor_intrinsics()
    trained, _, _ = resolve_checkpoint("auto", local_fingerprint())
    q = 8
    strategy = GradientSearch(MetaTuneCostModel(trained), seed=0, explore_share=0.25)
    ctx = ms.TuneContext(mod=resolve_workload(C6).irmodule(), target=target, space_generator="post-order-apply",
                         search_strategy=strategy, task_name="main")
    ctx.pre_tuning(max_trials=q, num_trials_per_iter=q, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=None)
    batch = ctx.generate_measure_candidates()
    assert len(batch) == q
    assert strategy.stats.explored + strategy.stats.random_fill == 2, "a quarter of the batch is random"
    space = search_space(C6)
    tilings = set()
    for cand in batch:
        config = space.config_of(cand.sch.trace)
        knobs = space.knob_spaces[config.space].knobs
        tilings.add((config.space, tuple(d for k, d in zip(knobs, config.decisions) if k.kind == TILE)))
    assert len(tilings) >= q - 1, f"{q} picks share {len(tilings)} tilings"
