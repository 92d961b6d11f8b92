"""BatchBO: greedy batch acquisition on a toy GP, and the strategy inside MetaSchedule."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import torch

from bench.search_time import synthetic_latency
from metatune.search import bo

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# Acquisition and selection on a toy problem (no TVM)


def _toy(seed: int = 0):
    """A GP fitted to 12 points of a smooth 2-D bump, and a 300-point pool (flat cost-model column)."""
    rng = np.random.default_rng(seed)
    f = lambda x: -4.0 * ((x[:, 0] - 0.7) ** 2 + (x[:, 1] - 0.3) ** 2)  # noqa: E731
    x_obs, pool = rng.random((12, 2)), rng.random((300, 2))
    surrogate = bo.fit_surrogate(x_obs, np.full(12, 0.5), f(x_obs))
    return surrogate, pool, rng


def test_acquisition_matches_botorch_log_ei_and_batch_is_distinct_and_high():
    from botorch.acquisition.analytic import LogExpectedImprovement

    sur, pool, _ = _toy()
    score = np.full(len(pool), 0.5)
    mean, cov = bo.pool_posterior(sur, pool, score)
    acq = bo.acquisition_values(mean, torch.diagonal(cov), sur.best_f)
    x = torch.as_tensor(np.column_stack([pool, score])).unsqueeze(1)
    with torch.no_grad():
        reference = LogExpectedImprovement(sur.model, best_f=sur.best_f)(x)
    assert torch.allclose(acq, reference, atol=1e-4)

    picks = bo.greedy_batch(mean, cov, 8, sur.best_f)
    assert len(picks) == len(set(picks)) == 8
    assert picks[0] == int(torch.argmax(acq))
    percentile = [(acq < acq[p]).double().mean().item() for p in picks]
    assert min(percentile) >= 0.5, percentile  # every pick is in the better half of the pool


def test_kriging_believer_update_equals_conditioning_the_gp():
    sur, pool, _ = _toy()
    score = np.full(len(pool), 0.5)
    mean, cov = bo.pool_posterior(sur, pool, score)
    j = int(torch.argmax(bo.acquisition_values(mean, torch.diagonal(cov), sur.best_f)))
    x = torch.as_tensor(np.column_stack([pool, score]))
    conditioned = sur.model.condition_on_observations(x[j : j + 1], mean[j].reshape(1, 1))
    with torch.no_grad():
        post = conditioned.posterior(x)
    col = cov[:, j]
    believed = torch.diagonal(cov) - col**2 / (col[j] + sur.noise)
    assert torch.allclose(post.variance.squeeze(-1), believed, atol=1e-8)
    assert torch.allclose(post.mean.squeeze(-1), mean, atol=1e-8)  # believing the mean keeps the mean


def test_fantasies_spread_the_batch_over_near_copies():
    sur, pool, rng = _toy()
    mean, cov = bo.pool_posterior(sur, pool, np.full(len(pool), 0.5))
    best = pool[int(torch.argmax(bo.acquisition_values(mean, torch.diagonal(cov), sur.best_f)))]
    copies = best + 1e-4 * rng.standard_normal((8, 2))  # 8 near-copies of the best point
    crowded = np.vstack([pool, copies])
    mean, cov = bo.pool_posterior(sur, crowded, np.full(len(crowded), 0.5))
    near = set(range(len(pool), len(crowded))) | {int(np.argmin(np.abs(pool - best).sum(1)))}
    greedy_top = torch.argsort(bo.acquisition_values(mean, torch.diagonal(cov), sur.best_f), descending=True)[:4]
    assert sum(int(i) in near for i in greedy_top) == 4  # without fantasies: four copies
    picks = bo.greedy_batch(mean, cov, 4, sur.best_f)
    assert sum(p in near for p in picks) <= 2, picks


def test_chosen_picks_come_first_and_their_fantasies_shape_the_rest():
    sur, pool, _ = _toy()
    mean, cov = bo.pool_posterior(sur, pool, np.full(len(pool), 0.5))
    acq = bo.acquisition_values(mean, torch.diagonal(cov), sur.best_f)
    best, worst = int(torch.argmax(acq)), int(torch.argmin(acq))
    picks = bo.greedy_batch(mean, cov, 4, sur.best_f, chosen=[worst, best])
    assert picks[:2] == [worst, best] and len(set(picks)) == 4
    assert picks[2:] == bo.greedy_batch(mean, cov, 4, sur.best_f)[1:3]  # as after picking the best first
    assert bo.greedy_batch(mean, cov, 3, sur.best_f, exclude=[best], chosen=[best])[0] != best


def test_prior_weight_tracks_an_informative_cost_model():
    rng = np.random.default_rng(1)
    x = rng.random((24, 2))
    y = -4.0 * ((x[:, 0] - 0.7) ** 2 + (x[:, 1] - 0.3) ** 2) + 0.3 * np.sin(9 * x[:, 0])
    informative = bo.fit_surrogate(x, bo.score_column(bo.normal_scores(y)), y)
    useless = bo.fit_surrogate(x, rng.random(24), y)
    assert informative.prior_weight > 0.5 > 0.05 > useless.prior_weight


def test_two_score_columns_get_a_weight_each():
    """The meta-model's and the task model's scores side by side: the informative one carries the mean."""
    rng = np.random.default_rng(1)
    x = rng.random((24, 2))
    y = -4.0 * ((x[:, 0] - 0.7) ** 2 + (x[:, 1] - 0.3) ** 2) + 0.3 * np.sin(9 * x[:, 0])
    good, noise = bo.score_column(bo.normal_scores(y)), rng.random(24)
    task_knows = bo.fit_surrogate(x, np.column_stack([noise, good]), y)
    meta_knows = bo.fit_surrogate(x, np.column_stack([good, noise]), y)
    assert len(task_knows.weights) == 2 and task_knows.weights[1] > 0.3 > 0.05 > task_knows.weights[0]
    assert meta_knows.weights[0] > 0.3 > 0.05 > meta_knows.weights[1]
    assert meta_knows.prior_weight == meta_knows.weights[0]
    mean, cov = bo.pool_posterior(task_knows, x[:5], np.column_stack([noise, good])[:5])
    assert mean.shape == (5,) and cov.shape == (5, 5)

def test_diverse_top_spreads_over_groups_and_fills_up():
    scores = np.array([9, 8, 7, 6, 5, 4, 3.0])
    assert bo.diverse_top(scores, [0, 0, 0, 0, 1, 1, 2], 4) == [0, 1, 4, 5]  # quota ceil(4/3) = 2
    assert bo.diverse_top(scores, [0] * 7, 3) == [0, 1, 2]  # one group: no quota gaps
    assert sorted(bo.diverse_top(scores, [0, 0, 0, 0, 0, 0, 1], 3, per_group=1)) == [0, 1, 6]  # topped up


# ---------------------------------------------------------------------------------------------
# The strategy driven directly (no builds): failures, fallback, time per batch


def _driven(workload: str, target, cost_model, q: int, trials: int, **settings):
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.search.batch_bo import BatchBO
    from metatune.workload.operators import resolve_workload

    import_tensor_intrinsics()
    strategy = BatchBO(seed=0, **settings)
    ctx = ms.TuneContext(mod=resolve_workload(workload).irmodule(), target=target,
                         space_generator="post-order-apply", search_strategy=strategy, task_name="main")
    ctx.pre_tuning(max_trials=trials, num_trials_per_iter=q, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=cost_model)
    return strategy, ctx


def _run_batch(ctx, fail=lambda i: False, cost_model=None):
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    mcs = ctx.generate_measure_candidates()
    if mcs is None:
        return None
    results = [RunnerResult(run_secs=None, error_msg="synthetic failure") if fail(i)
               else RunnerResult(run_secs=[synthetic_latency(m)], error_msg=None) for i, m in enumerate(mcs)]
    ctx.notify_runner_results(mcs, results)
    if cost_model is not None:
        cost_model.update(ctx, mcs, results)
    return mcs


TINY = "dense:m=1,n=2,k=1"  # 48 configurations over 3 design spaces: collisions are certain


def test_tiny_space_is_exhausted_without_repeats_and_failures_stay_out(target):
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven(TINY, target, ms.cost_model.RandomModel(seed=0), q=8, trials=64)
    seen, failed = [], set()
    while (mcs := _run_batch(ctx, fail=lambda i: i % 3 == 0)) is not None:
        keys = [str(m.sch.trace) for m in mcs]
        seen += keys
        failed |= {strategy.space.config_of(m.sch.trace) for i, m in enumerate(mcs) if i % 3 == 0}
    assert len(seen) == len(set(seen)) == 48  # every configuration once, then None before max_trials
    assert strategy.failures == failed and not failed & set(strategy.observations)
    s = strategy.stats
    assert s.proposed == 48 and s.failed == len(failed) and s.measured == 48 - len(failed)
    assert s.gp_batches >= 3 and s.fallbacks == 0
    assert len(s.batch_s) == s.batches  # the last call, which proposed nothing, is not a batch


def test_a_zero_or_nan_time_is_a_failure_not_an_observation(target):
    """A broken timer's 0 s (or NaN) would make an infinite log-throughput: every later GP fit
    failed and fell back to the cost model for the rest of the task."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    strategy, ctx = _driven(TINY, target, ms.cost_model.RandomModel(seed=0), q=8, trials=32)
    mcs = ctx.generate_measure_candidates()
    broken = {0: [0.0], 1: [1e-5, float("nan")]}
    ctx.notify_runner_results(mcs, [RunnerResult(run_secs=broken.get(i, [synthetic_latency(m)]), error_msg=None)
                                    for i, m in enumerate(mcs)])
    assert strategy.stats.failed == 2 and strategy.stats.measured == len(mcs) - 2
    while _run_batch(ctx) is not None:
        pass
    assert strategy.stats.gp_batches >= 2 and strategy.stats.fallbacks == 0


@pytest.mark.parametrize("task_model", [False, True])
def test_resume_from_database_proposes_only_unmeasured_configurations(target, task_model):
    """40 of the 48 configurations are in the database (some as failures): exactly the other 8 follow
    (and a task model learns the 40 records, failures too, before the first proposal)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import TuningRecord

    first, ctx = _driven(TINY, target, None, q=40, trials=40)
    recorded = ctx.generate_measure_candidates()
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(ctx.mod)
    for i, m in enumerate(recorded):
        secs = [1e10] if i % 5 == 0 else [synthetic_latency(m)]  # MetaSchedule's record of a failed run
        database.commit_tuning_record(TuningRecord(m.sch.trace, workload, secs, target, m.args_info))

    from metatune.search.batch_bo import BatchBO

    strategy = BatchBO(seed=1, task_model=task_model)
    ctx2 = ms.TuneContext(mod=ctx.mod, target=target, space_generator="post-order-apply",
                          search_strategy=strategy, task_name="main")
    ctx2.pre_tuning(max_trials=64, num_trials_per_iter=16, design_spaces=ctx2.generate_design_space(),
                    database=database, cost_model=ms.cost_model.RandomModel(seed=0))
    assert strategy.stats.resumed == 40 and len(strategy.failures) == 8 and len(strategy.observations) == 32
    assert (strategy.task_model.samples == 40) if task_model else strategy.task_model is None
    before = {str(m.sch.trace) for m in recorded}
    proposed = []
    while (mcs := _run_batch(ctx2)) is not None:
        proposed += [str(m.sch.trace) for m in mcs]
    assert len(proposed) == len(set(proposed)) == 8 and not set(proposed) & before
    assert strategy.stats.gp_batches == strategy.stats.batches == 1  # the records seeded the GP


def test_resumed_records_are_scored_before_the_cost_model_learns_them(target):
    """As a proposal is scored before it is measured, a resumed run's records get the cost model's
    scores before BatchBO hands them to it: scores their own latencies did not shape."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from metatune.env.device import local_fingerprint
    from metatune.search.batch_bo import BatchBO
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.tune.tuner import resolve_checkpoint, warms_cost_model

    trained = resolve_checkpoint("auto", local_fingerprint())[0]
    _, ctx = _driven(TINY, target, None, q=24, trials=24)
    recorded = ctx.generate_measure_candidates()
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(ctx.mod)
    for m in recorded:
        database.commit_tuning_record(TuningRecord(m.sch.trace, workload, [synthetic_latency(m)], target, m.args_info))
    cost_model, strategy = MetaTuneCostModel(trained), BatchBO(seed=1, task_model=False)
    assert warms_cost_model(strategy)  # so the tuner leaves the cost model cold for it
    ctx2 = ms.TuneContext(mod=ctx.mod, target=target, space_generator="post-order-apply",
                          search_strategy=strategy, task_name="main")
    ctx2.pre_tuning(max_trials=48, num_trials_per_iter=8, design_spaces=ctx2.generate_design_space(),
                    database=database, cost_model=cost_model)
    raw = np.array([strategy.observations[strategy.space.config_of(m.sch.trace)].raw for m in recorded])
    assert np.allclose(raw, MetaTuneCostModel(trained).predict(ctx2, recorded))  # the meta-learned scores
    assert not np.allclose(raw, cost_model.predict(ctx2, recorded)), "the cost model did not learn the records"
    # ranked, as a proposal is, against the pool as the meta-learned model scored it (not as the adapted one does)
    reference = MetaTuneCostModel(trained).predict(ctx2, [e.measure for e in strategy.pool.entries.values()])
    scores = [strategy.observations[strategy.space.config_of(m.sch.trace)].score for m in recorded]
    assert len(reference) and np.allclose(scores, bo.normal_scores(raw, reference))


def test_cost_model_failures_are_counted(target, caplog):
    from metatune.env.plugin import COST_MODEL, plugin_class

    class Broken:
        def update(self, context, candidates, results):
            pass

        def predict(self, context, candidates):
            raise RuntimeError("no prediction today")

    broken = plugin_class(COST_MODEL, Broken, "BrokenCostModel")()
    strategy, ctx = _driven(TINY, target, broken, q=8, trials=16)
    with caplog.at_level(logging.WARNING):
        assert _run_batch(ctx) is not None  # a flat prior: the batch is still proposed
    assert strategy.stats.prior_failures >= 1 and "no prediction today" in caplog.text


def test_a_candidate_the_cost_model_fails_on_ranks_last_and_the_others_keep_their_scores(target, caplog):
    """One program the model cannot score (e.g. cannot encode) must not flatten the prior of the pool it is in."""
    import zlib

    from metatune.env.plugin import COST_MODEL, plugin_class

    bad: set[str] = set()

    def score(m) -> float:
        return float(zlib.crc32(str(m.sch.trace).encode()) % 1000)

    class OneBad:
        def update(self, context, candidates, results):
            pass

        def predict(self, context, candidates):
            if any(str(m.sch.trace) in bad for m in candidates):
                raise RuntimeError("cannot encode this one")
            return np.array([score(m) for m in candidates])

    strategy, _ = _driven("dense:m=64,n=64,k=64", target, plugin_class(COST_MODEL, OneBad, "OneBadCostModel")(),
                          q=8, trials=16)
    measures = [c.measure_candidate() for c in strategy.space.sample_candidates(9, seed=3)]
    bad.update(str(measures[i].sch.trace) for i in (1, 7))  # one in each half
    with caplog.at_level(logging.WARNING, logger="metatune.search.batch_bo"):
        out = strategy._predict(measures)
    good = [i for i in range(9) if i not in (1, 7)]
    assert np.isnan(out[[1, 7]]).all() and np.array_equal(out[good], [score(measures[i]) for i in good])
    assert strategy.stats.prior_failures == 1 and "failed on 2 of 9 candidates" in caplog.text
    assert "cannot encode this one" in caplog.text
    assert (bo.normal_scores(out)[[1, 7]] == bo.normal_scores(out).min()).all()


def test_a_thorough_look_retries_exhausted_incumbents(target):
    """Before the search concludes the space is used up, it looks again around incumbents an earlier
    round gave up on (a few unlucky draws mark one exhausted)."""
    strategy, _ = _driven("dense:m=64,n=64,k=64", target, None, q=8, trials=48, pool_random=16)
    pool = strategy.pool
    incumbent = strategy.space.sample_candidates(1, seed=0, exclude=set())[0].config
    pool.exhausted.add(incumbent)
    pool.update(1, [incumbent], set())
    assert not any(e.origin == incumbent for e in pool.entries.values())
    pool.update(1, [incumbent], set(), thorough=True)
    assert any(e.origin == incumbent for e in pool.entries.values())


def test_gp_failure_falls_back_to_the_cost_model_with_a_warning(target, monkeypatch, caplog):
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=24)
    _run_batch(ctx)

    def broken(*args, **kwargs):
        raise RuntimeError("degenerate data")

    monkeypatch.setattr(bo, "fit_surrogate", broken)
    with caplog.at_level(logging.WARNING, logger="metatune.search.batch_bo"):
        mcs = _run_batch(ctx)
    assert len({str(m.sch.trace) for m in mcs}) == 8
    assert strategy.stats.fallbacks == 1 and strategy.stats.prior_batches == 2
    assert any("GP step failed" in r.getMessage() and "degenerate data" in r.getMessage() for r in caplog.records)


def test_proposing_a_batch_stays_under_the_time_bound(target):
    """dense 512^3 with a trained XGB model (so predictions pay for feature extraction),
    default pool: a steady-state batch of 16 must cost well under 1 s per trial."""
    from tvm.s_tir import meta_schedule as ms

    xgb = ms.cost_model.XGBModel(num_warmup_samples=0)
    strategy, ctx = _driven("dense:m=512,n=512,k=512", target, xgb, q=16, trials=64)
    for _ in range(4):
        _run_batch(ctx, cost_model=xgb)
    s = strategy.stats
    assert s.gp_batches == 3 and s.predictions > 0
    steady = s.batch_s[1:]
    assert max(steady) / 16 < 0.4, s.batch_s  # measured ~0.05-0.15 s/trial on the loaded 2-core VM



def test_mutation_chains_keep_the_best_scored_mutants(target):
    """With `evolve_*`, each batch builds mutants of the best-scored entries; the pool keeps the
    `evolve_keep` best-scored of them, and they never include a measured configuration."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            evolve_children=24, evolve_generations=2, evolve_keep=20, chains_before_gp=True)
    _run_batch(ctx)
    pool = strategy.pool
    mutants = {c: e.raw for c, e in pool.entries.items() if e.mutant}
    assert strategy.stats.mutants >= 24 and 5 < len(mutants) <= 20  # minus those the batch took
    assert all(e.raw is not None for e in pool.entries.values())
    by_score = sorted(mutants, key=lambda c: -mutants[c])
    pool.entries[by_score[0]].raw = float("nan")  # a diverged model's output ranks last, not where it was
    pool.keep_best_mutants(5)
    assert {c for c, e in pool.entries.items() if e.mutant} == set(by_score[1:6])
    _run_batch(ctx)
    kept = {c for c, e in pool.entries.items() if e.mutant}
    assert 5 < len(kept) <= 20 and not kept & set(strategy.observations)
    assert any(not e.mutant for e in pool.entries.values()) and strategy.stats.gp_batches == 1


@pytest.mark.parametrize("tile_moves", ["any", "factor"])
def test_pool_neighbours_and_mutants_move_tiles_as_asked(target, tile_moves):
    """`tile_moves="factor"`: the incumbents' neighbours change a tile knob by one divisor moved between
    two levels (the chains' mutants are drawn by the same call); the default lets them jump to any tiling."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.space.knob_space import TILE, is_factor_move

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            evolve_children=24, evolve_keep=24, max_changes=1, tile_moves=tile_moves)
    _run_batch(ctx)
    _run_batch(ctx)
    pool, jumps, steps = strategy.pool, 0, 0
    for entry in pool.entries.values():
        if entry.origin is None:
            continue
        knobs = strategy.space[entry.origin.space].knobs
        for knob, new, old in zip(knobs, entry.cand.config.decisions, entry.origin.decisions):
            if knob.kind == TILE and new != old:
                steps += is_factor_move(old, new)
                jumps += not is_factor_move(old, new)
    assert steps > 0 and strategy.stats.mutants > 0
    assert (jumps == 0) if tile_moves == "factor" else (jumps > 0)


def test_recent_gp_learns_from_the_incumbents_and_the_latest_measurements(target):
    """`gp_recent`: once the run has more, the GP's training set is the `incumbents` best measurements
    plus the last `gp_recent` ones (the default keeps the whole run)."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=40,
                            incumbents=2, gp_recent=8, evolve_children=0)
    for _ in range(4):
        _run_batch(ctx)
    observations = list(strategy.observations.values())
    assert len(observations) == 32
    best = sorted(observations, key=lambda o: o.latency_s)[:2]
    expected = {id(o) for o in observations[-8:]} | {id(o) for o in best}
    _, _, y = strategy._training_set()
    assert sorted(y) == sorted(-np.log([o.latency_s for o in observations if id(o) in expected]))
    assert 8 <= len(y) <= 10
    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=40,
                            incumbents=2, evolve_children=0)
    for _ in range(4):
        _run_batch(ctx)
    assert len(strategy._training_set()[2]) == len(strategy.observations) == 32


def test_unknown_tile_moves_are_rejected():
    from metatune.search.batch_bo import BatchBOSettings

    with pytest.raises(ValueError, match="tile_moves must be one of any, factor"):
        BatchBOSettings(tile_moves="far")
    with pytest.raises(ValueError, match="gp_recent must be >= 0"):
        BatchBOSettings(gp_recent=-1)
    with pytest.raises(ValueError, match="pool_random >= 1"):
        BatchBOSettings(pool_random=0)  # a fresh task's first pool would be empty: 0 trials
    with pytest.raises(ValueError, match="max_gp_points"):
        BatchBOSettings(max_gp_points=1)  # the GP could never be fitted


def test_a_nan_prediction_ranks_last_among_values_and_against_a_reference():
    from metatune.search.bo import normal_scores

    z = normal_scores(np.array([np.nan, 0.5]), reference=np.array([0.1, 0.2, 0.3, 0.4]))
    lowest = normal_scores(np.array([0.1]), reference=np.array([0.1, 0.2, 0.3, 0.4]))[0]
    assert z[0] <= lowest < z[1]  # as low as the lowest quantile goes, not the batch's own minimum (0.5)
    alone = normal_scores(np.array([3.0, np.nan, 1.0, 2.0]))
    assert alone[1] == alone.min() and list(np.argsort(alone)) == [1, 2, 3, 0]


def test_task_model_steers_a_share_of_the_chains(target):
    """`evolve_task_share`: once the task model is trained, it picks that share of the kept mutants
    (the cost model the rest), so the task's own measurements decide where part of the chains go."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            evolve_children=24, evolve_keep=20, evolve_task_share=0.5)
    _run_batch(ctx)
    assert strategy.task_model.ready and strategy.stats.mutants == 0
    _run_batch(ctx)
    assert strategy.stats.mutants >= 24
    pool = strategy.pool
    mutants = [c for c, e in pool.entries.items() if e.mutant]
    assert len(mutants) > 8
    entries = list(pool.entries.values())
    task_of = {e.cand.config: float(t) for e, t in zip(entries, strategy._task_raw(entries))}
    by_task = sorted(mutants, key=lambda c: -task_of[c])[:4]
    by_prior = [c for c in sorted(mutants, key=lambda c: -pool.entries[c].raw) if c not in by_task][:4]
    pool.keep_best_mutants(8, task_of, 0.5)
    assert {c for c, e in pool.entries.items() if e.mutant} == set(by_task) | set(by_prior)


def test_task_picks_give_part_of_each_batch_to_the_task_models_favourites(target):
    """`task_picks`: once the task model is trained, the batch starts with the pool entries it scores
    best, whatever the GP thinks of them; the GP picks the rest."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            evolve_children=0, task_picks=3)
    _run_batch(ctx)
    assert strategy.task_model.ready and strategy.stats.task_picked == 0  # the first batch: the prior alone
    mcs = ctx.generate_measure_candidates()
    assert len(mcs) == 8 and strategy.stats.task_picked == 3
    rest = strategy._task_raw(list(strategy.pool.entries.values()))  # the pool after the batch left it
    picked = strategy.task_model.predict(ctx, mcs)
    assert len(set(rest.tolist())) > 3  # a trained model, not a flat column
    assert picked[:3].min() >= rest.max()  # the first three: the task model's best of the whole pool


def test_chains_can_wait_until_the_gp_decides(target):
    """`chains_before_gp=False`: the first batch (the cost model's top picks alone) has no mutants to
    pick from; the chains start with the first batch the GP chooses."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            evolve_children=24, chains_before_gp=False)
    _run_batch(ctx)
    assert strategy.stats.prior_batches == 1 and strategy.stats.mutants == 0
    assert not any(e.mutant for e in strategy.pool.entries.values())
    _run_batch(ctx)
    assert strategy.stats.gp_batches == 1 and strategy.stats.mutants >= 24


def test_a_wide_first_pool_is_scored_once_then_cut_back(target):
    """`first_pool_random`: the first batch, which the cost model alone picks, is its best of that many
    random configurations; from the next batch on the random part is back to `pool_random`, renewed as usual."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            pool_random=24, refresh_random=8, first_pool_random=96, evolve_children=0)
    _run_batch(ctx)
    assert strategy.stats.prior_batches == 1 and strategy.stats.predictions >= 96
    randoms = lambda: [e for e in strategy.pool.entries.values() if e.origin is None and not e.mutant]  # noqa: E731
    assert len(randoms()) == 96 - 8  # the batch took its picks out of the wide pool
    _run_batch(ctx)
    assert strategy.stats.gp_batches == 1
    born = [e.born for e in randoms()]
    assert born.count(0) <= 24 - 8 and 0 < born.count(1) <= 8  # cut back, then renewed like any batch
    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            pool_random=24, evolve_children=0)
    _run_batch(ctx)
    assert strategy.stats.predictions < 96 and len(randoms()) <= 24


@pytest.mark.parametrize("per_space", [0, 1])
def test_every_design_space_keeps_an_incumbent(target, per_space):
    """`incumbents_per_space`: besides the best measured configurations overall, the best of each
    design space is an incumbent (its neighbours join the pool), however far down the ranking."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=32,
                            incumbents=2, incumbents_per_space=per_space, evolve_children=0)
    _run_batch(ctx)
    _run_batch(ctx)
    ranked = sorted(strategy.observations, key=lambda c: strategy.observations[c].latency_s)
    best_of_space = {}
    for c in ranked:
        best_of_space.setdefault(c.space, c)
    assert len(best_of_space) == 3  # the first batch spreads over the three spaces
    incumbents = strategy._incumbents()
    assert incumbents[:2] == ranked[:2]
    if per_space:
        assert set(incumbents) == set(ranked[:2]) | set(best_of_space.values())
        strategy.pool.update(2, incumbents, set(strategy.observations))
        origins = {e.origin.space for e in strategy.pool.entries.values() if e.origin is not None}
        assert origins == {0, 1, 2}
    else:
        assert incumbents == ranked[:2]


def test_task_model_learns_the_task_and_its_score_joins_the_gp(target):
    """`task_model`: XGBModel on the task's own (synthetic) measurements; once trained, its scores
    of the pool reach the proposals and the GP fits a weight for them."""
    from tvm.s_tir import meta_schedule as ms

    strategy, ctx = _driven("dense:m=64,n=64,k=64", target, ms.cost_model.RandomModel(seed=0), q=8, trials=48,
                            task_model=True)
    for _ in range(4):
        _run_batch(ctx)
    model = strategy.task_model
    assert model.ready and model.samples == 32
    later = [o.task_score for o in strategy.observations.values()][-8:]
    assert any(t != 0.0 for t in later)  # the last batch was proposed with the trained model's scores
    s = strategy.stats
    assert s.task_weight is not None and s.task_s > 0 and s.gp_batches == 3
    pooled = {e.measure.__chandle__() for e in strategy.pool.entries.values()}
    assert len(set(model.features.known) - pooled) <= 8  # features kept: the pool's and the last batch's

# ---------------------------------------------------------------------------------------------
# Inside ms.tune_tir with real builds and runs


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, target):
    """Tune dense 64^3 for 16 trials, then resume the same database for 8 more."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.tvm_setup import detach_unnamed_meta_schedule_log_handlers, import_tensor_intrinsics
    from metatune.measure.measurer import Measurer, MeasureSettings
    from metatune.search.batch_bo import BatchBO
    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import resolve_workload

    import_tensor_intrinsics()
    workload = resolve_workload("dense:m=64,n=64,k=64")
    work_dir = str(tmp_path_factory.mktemp("tune"))
    measurer = Measurer(target, MeasureSettings(verify=False, repeat=3))
    runs = []
    for trials in (16, 8):
        strategy = BatchBO(seed=len(runs))
        start = time.perf_counter()
        detach_unnamed_meta_schedule_log_handlers()  # pytest's log capture
        database = ms.tune_tir(workload.irmodule(), target, work_dir=work_dir, max_trials_global=trials,
                               num_trials_per_iter=8, builder=measurer.builder, runner=measurer.runner,
                               database=ms.database.JSONDatabase(work_dir=work_dir),
                               cost_model=ms.cost_model.RandomModel(seed=0), strategy=strategy, seed=0,
                               num_tuning_cores=1)
        runs.append((strategy, time.perf_counter() - start))
    measurer.close()
    space = SearchSpace(DesignSpaces(workload, target))
    configs = [space.config_of(r.trace) for r in database.get_all_tuning_records()]
    return runs, configs


def test_tune_tir_measures_only_distinct_configurations(tuned):
    runs, configs = tuned
    stats = runs[0][0].total_stats()  # tune_tir runs a clone: its counters reach the original
    assert (stats.batches, stats.proposed, stats.measured + stats.failed) == (2, 16, 16)
    assert stats.gp_batches == 1 and stats.fallbacks == 0 and stats.search_s > 0
    assert len(configs[:16]) == len(set(configs[:16])) == 16


def test_tune_tir_resume_never_reproposes_a_measured_configuration(tuned):
    runs, configs = tuned
    stats = runs[1][0].total_stats()
    assert stats.resumed == 16 and stats.proposed == 8
    assert stats.gp_batches == stats.batches == 1  # the database seeded the GP from the first batch
    assert len(configs) == 24 and len(set(configs)) == 24
