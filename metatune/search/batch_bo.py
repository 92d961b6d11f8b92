"""BatchBO: a MetaSchedule search strategy that proposes each batch by Bayesian optimisation.

Why not EvolutionarySearch: with a cost model that is expensive to query but already good
(the meta-learned one), exploration by thousands of mutations per batch wastes search time;
the paper's batch BO (§6) is exploitation-centric and needs few cost-model calls.

Each batch:
1. Pool: uniform random valid configurations plus one-knob neighbours of the best measured
   configurations, minus everything measured, failed or in flight. The pool persists across
   batches (a slice of the random part is renewed each batch, neighbours follow the
   incumbents), so a batch pays only for the configurations it adds.
2. Prior: the MetaSchedule cost model's predictions (higher = faster) on the pool, turned
   into rank-based normal scores. Re-predicted only when the model changed (checked on a
   probe of cached entries): MetaSchedule updates the cost model after every batch.
3. Surrogate (`bo.fit_surrogate`): a GP on the knob embedding whose mean is
   `c + w * cost-model score`, fitted on log(1/latency); a measured point's score is the
   one it had when it was proposed, so `w` measures out-of-sample trust in the cost model.
4. Acquisition (`bo.greedy_batch`): analytic LogEI (or UCB) over the pool, q greedy picks
   with Kriging-believer fantasies.
Before `min_observations` successful measurements exist (first batch of a fresh workload),
and as a logged fallback when the GP cannot be fitted, the cost model's top-q picks decide,
spread over the design spaces.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Container, Iterable, Sequence

import numpy as np

from metatune.env.plugin import search_strategy_class
from metatune.measure.measurer import median_latency, successful_run_seconds
from metatune.search import bo
from metatune.space.knob_space import Candidate, Config, DesignSpaces, SearchSpace, SpaceError

if TYPE_CHECKING:
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext
    from tvm.s_tir.meta_schedule.cost_model import CostModel
    from tvm.s_tir.meta_schedule.database import Database
    from tvm.s_tir.meta_schedule.runner import RunnerResult

logger = logging.getLogger(__name__)

_PROBE = 8  # cached pool entries re-predicted to detect a changed cost model


@dataclass(frozen=True)
class BatchBOSettings:
    """How BatchBO searches; every field is a keyword of `BatchBO(...)`."""

    pool_random: int = 256  # uniform random configurations kept in the pool
    pool_local: int = 256  # one-knob neighbours of the incumbents kept in the pool
    refresh_random: int = 64  # random entries renewed per batch (oldest first)
    local_per_batch: int = 128  # new incumbent neighbours per batch (each costs a replay + postprocessing)
    incumbents: int = 8  # best measured configurations whose neighbourhoods are searched
    acquisition: str = "logei"  # "logei" or "ucb"
    ucb_beta: float = 4.0
    min_observations: int = 4  # successful measurements before the GP takes over
    max_gp_points: int = 512  # GP training set cap (best half kept, the rest subsampled)
    per_space: int | None = None  # cost-model-only batches: max picks per design space (default q / spaces)
    seed: int | None = None  # default: the TuneContext's rand_state

    def __post_init__(self) -> None:
        if self.acquisition not in ("logei", "ucb"):
            raise ValueError(f"acquisition must be 'logei' or 'ucb', not {self.acquisition!r}")
        if self.pool_random + self.pool_local < 1 or self.min_observations < 2:
            raise ValueError("BatchBO needs a non-empty pool and min_observations >= 2")


@dataclass
class SearchStats:
    """Where one task's search time went (seconds, wall clock in this process)."""

    task: str = ""
    batches: int = 0
    proposed: int = 0
    search_s: float = 0.0  # pre_tuning + generate_measure_candidates, everything below included
    pool_s: float = 0.0  # sampling, neighbours, postprocessing, embedding
    prior_s: float = 0.0  # cost_model.predict
    fit_s: float = 0.0  # GP fit
    acquire_s: float = 0.0  # posterior over the pool + greedy selection
    gp_batches: int = 0
    prior_batches: int = 0  # batches chosen by the cost model alone (first batch or fallback)
    fallbacks: int = 0  # GP failures that fell back to the cost model (each logged)
    predictions: int = 0  # configurations scored by the cost model
    pool_added: int = 0  # configurations built for the pool (random + neighbours)
    resumed: int = 0  # database records of this workload read at pre_tuning
    measured: int = 0
    failed: int = 0
    prior_weight: float | None = None  # last fitted w: how much measurements trust the cost model
    batch_s: list[float] = field(default_factory=list)

    @property
    def per_trial_s(self) -> float:
        return self.search_s / self.proposed if self.proposed else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "per_trial_s": self.per_trial_s}

    @staticmethod
    def total(stats: Iterable["SearchStats"]) -> "SearchStats":
        """Sum over tasks (prior_weight and batch times are concatenated/last-wins)."""
        out = SearchStats(task="total")
        for s in stats:
            for name in ("batches", "proposed", "search_s", "pool_s", "prior_s", "fit_s", "acquire_s",
                         "gp_batches", "prior_batches", "fallbacks", "predictions", "pool_added", "resumed", "measured", "failed"):
                setattr(out, name, getattr(out, name) + getattr(s, name))
            out.batch_s += s.batch_s
            out.prior_weight = s.prior_weight if s.prior_weight is not None else out.prior_weight
        return out


@dataclass
class _Entry:
    """A pool configuration: its schedule, MeasureCandidate, embedding and cached prediction."""

    cand: Candidate
    measure: "MeasureCandidate"
    embedding: np.ndarray
    origin: Config | None  # the incumbent it neighbours; None for a random entry
    born: int
    raw: float | None = None  # cost-model output, valid while the model is unchanged


class CandidatePool:
    """Configurations the acquisition chooses from: random entries plus incumbent neighbourhoods."""

    def __init__(self, space: SearchSpace, args_info: Any, settings: BatchBOSettings, rng: np.random.Generator) -> None:
        self.space = space
        self.args_info = args_info
        self.settings = settings
        self.rng = rng
        self.entries: dict[Config, _Entry] = {}
        self.random_exhausted = False  # the last random top-up found under half of what it wanted
        self.exhausted: set[Config] = set()  # incumbents whose neighbourhood yields nothing new

    def __len__(self) -> int:
        return len(self.entries)

    def _add(self, cand: Candidate, origin: Config | None, batch: int) -> None:
        from tvm.s_tir.meta_schedule import MeasureCandidate

        assert cand.config is not None
        self.entries[cand.config] = _Entry(
            cand, MeasureCandidate(cand.sch, self.args_info), self.space.embed(cand.config), origin, batch
        )

    def discard(self, configs: Iterable[Config]) -> None:
        for c in configs:
            self.entries.pop(c, None)

    def update(self, batch: int, incumbents: Sequence[Config], avoid: Container[Config], thorough: bool = False) -> None:
        """Drop avoided entries, renew the oldest random entries, give the incumbents (best
        first) neighbours within this batch's budget, and evict neighbours of former
        incumbents (oldest first) only when the local part is over its size. `thorough`
        ignores what earlier rounds said about exhaustion (before concluding the space is used up)."""
        s = self.settings
        self.discard([c for c in self.entries if c in avoid])
        randoms = sorted((e.born, c) for c, e in self.entries.items() if e.origin is None)
        if batch > 0 and s.refresh_random:
            self.discard(c for _, c in randoms[: s.refresh_random])
            randoms = randoms[s.refresh_random :]
        missing = s.pool_random - len(randoms)
        if missing > 0:
            exclude = set(self.entries) | set(avoid)  # type: ignore[arg-type]
            seed = int(self.rng.integers(2**31 - 1))
            # In a small space most samples are already known: once a round came back half
            # empty, spend only a few attempts per batch instead of 2 replays per wanted entry.
            attempts = 2 * missing + 20
            if self.random_exhausted and not thorough:
                attempts = min(attempts, 32)
            found = self.space.sample_candidates(missing, seed=seed, exclude=exclude, max_attempts=attempts)
            for cand in found:
                self._add(cand, None, batch)
            self.random_exhausted = len(found) < missing / 2
        if not incumbents or not s.pool_local:
            return
        share = max(1, s.pool_local // len(incumbents))
        counts = {c: 0 for c in incumbents}
        for e in self.entries.values():
            if e.origin in counts:
                counts[e.origin] += 1
        budget = s.local_per_batch
        for inc in incumbents:
            budget -= self._add_neighbours(inc, min(share - counts[inc], budget), batch, avoid)
        local = sorted((e.born, c) for c, e in self.entries.items() if e.origin is not None and e.origin not in counts)
        excess = sum(1 for e in self.entries.values() if e.origin is not None) - s.pool_local
        if excess > 0:
            self.discard(c for _, c in local[:excess])

    def _add_neighbours(self, incumbent: Config, n: int, batch: int, avoid: Container[Config]) -> int:
        """Up to n new one-knob neighbours of an incumbent; returns how many were added."""
        knobs = self.space[incumbent.space]
        if n <= 0 or len(knobs) == 0 or incumbent in self.exhausted:
            return 0
        added = 0
        for _ in range(n + n // 2 + 8):  # collisions are rare in a big space; a small one gets marked exhausted
            if added >= n:
                break
            cand = knobs.neighbour(incumbent, self.rng)
            if cand is None or cand.config in self.entries or cand.config in avoid:
                continue
            self._add(cand, incumbent, batch)
            added += 1
        if added < n:  # its neighbourhood is (nearly) all measured or pooled: stop paying for retries
            self.exhausted.add(incumbent)
        return added


@dataclass
class _Observation:
    latency_s: float  # median run time
    embedding: np.ndarray
    score: float | None  # cost-model normal score when proposed (None: not yet known)
    raw: float | None = None  # cost-model output, for database records until they get a score


class _BatchBOLogic:
    """The strategy's logic; `BatchBO` adds MetaSchedule's `PySearchStrategy` plumbing."""

    def __init__(self, **settings: Any) -> None:
        self.settings = BatchBOSettings(**settings)
        self.stats = SearchStats()
        self.family: list[SearchStats] = [self.stats]  # shared by every clone: tune_* runs clones
        self.context: "TuneContext | None" = None
        self._reset()

    def _reset(self) -> None:
        self.space: SearchSpace | None = None
        self.pool: CandidatePool | None = None
        self.cost_model: "CostModel | None" = None
        self.observations: dict[Config, _Observation] = {}
        self.failures: set[Config] = set()
        self.pending: list[tuple["MeasureCandidate", Config, np.ndarray, float]] = []
        self.max_trials = 0
        self.trials_per_iter = 0
        self.trials = 0  # proposed in this session
        self._gp_state: dict[str, Any] | None = None
        self.rng = np.random.default_rng(self.settings.seed)

    # -- MetaSchedule interface -------------------------------------------------------------

    def _initialize_with_tune_context(self, context: "TuneContext") -> None:
        self.context = context
        self.stats.task = str(context.task_name or "")

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: list["Schedule"],
        database: "Database | None" = None,
        cost_model: "CostModel | None" = None,
    ) -> None:
        from tvm.s_tir.meta_schedule import Profiler

        with Profiler.timeit("BatchBO/PreTuning"):
            self._pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def _pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list["Schedule"],
                    database: "Database | None", cost_model: "CostModel | None") -> None:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        t0 = time.perf_counter()
        if self.context is None:
            raise RuntimeError("BatchBO.pre_tuning before _initialize_with_tune_context")
        self._reset()
        seed = self.settings.seed
        if seed is None and self.context.rand_state is not None and int(self.context.rand_state) >= 0:
            seed = int(self.context.rand_state)
        self.rng = np.random.default_rng(seed)
        self.max_trials, self.trials_per_iter = int(max_trials), int(num_trials_per_iter)
        self.cost_model = cost_model
        self.space = SearchSpace(DesignSpaces.from_context(self.context, list(design_spaces)))
        args_info = ArgInfo.from_entry_func(design_spaces[0].mod, remove_preproc=True)
        self.pool = CandidatePool(self.space, args_info, self.settings, self.rng)
        if database is not None:
            self._resume(database)
        self.stats.search_s += time.perf_counter() - t0

    def post_tuning(self) -> None:
        s = self.stats
        logger.info(
            "BatchBO %s: %d batches, %d proposed, search %.1f s (%.3f s/trial: pool %.1f, prior %.1f, fit %.1f, "
            "acquire %.1f), %d fallbacks", s.task, s.batches, s.proposed, s.search_s, s.per_trial_s, s.pool_s,
            s.prior_s, s.fit_s, s.acquire_s, s.fallbacks,
        )
        self.pool = None  # schedules are big; the stats stay

    def generate_measure_candidates(self) -> list["MeasureCandidate"] | None:
        """Also timed as the profiler scope "BatchBO/GenerateMeasureCandidates" (as tuners read
        EvolutionarySearch's "EvoSearch/*" scopes)."""
        from tvm.s_tir.meta_schedule import Profiler

        with Profiler.timeit("BatchBO/GenerateMeasureCandidates"):
            return self._generate()

    def _generate(self) -> list["MeasureCandidate"] | None:
        t0 = time.perf_counter()
        try:
            q = min(self.trials_per_iter, self.max_trials - self.trials)
            if q <= 0 or self.space is None:
                return None
            picked = self._propose(q)
            if not picked:
                logger.info("BatchBO %s: no unmeasured configuration left to propose", self.stats.task)
                return None
            self.trials += len(picked)
            self.stats.proposed += len(picked)
            self.stats.batches += 1
            return [m for m, *_ in picked]
        finally:
            dt = time.perf_counter() - t0
            self.stats.search_s += dt
            self.stats.batch_s.append(round(dt, 4))

    def notify_runner_results(self, measure_candidates: list["MeasureCandidate"], results: list["RunnerResult"]) -> None:
        for cand, result in zip(measure_candidates, results):
            match = next((i for i, p in enumerate(self.pending) if p[0].same_as(cand)), None)
            if match is not None:
                _, config, embedding, score = self.pending.pop(match)
            else:  # not ours (should not happen): identify it by its trace
                assert self.space is not None
                config = self.space.config_of(cand.sch.trace)
                embedding, score = self.space.embed(config), None
            secs = successful_run_seconds(result.run_secs)
            if result.error_msg or secs is None:
                self.failures.add(config)
                self.stats.failed += 1
            else:
                self.observations[config] = _Observation(median_latency(secs), embedding, score)
                self.stats.measured += 1

    def clone(self) -> Any:
        new = _batch_bo_class()(**asdict(self.settings))
        new.family = self.family
        self.family.append(new.stats)
        return new

    # -- counters ---------------------------------------------------------------------------

    def total_stats(self) -> SearchStats:
        """Search counters summed over this strategy and every clone of it (one per task)."""
        return SearchStats.total(self.family)

    # -- internals --------------------------------------------------------------------------

    def _resume(self, database: "Database") -> None:
        """Read this workload's records: measured configurations seed the GP, all are avoided."""
        assert self.space is not None and self.context is not None
        mod = self.context.mod
        if not database.has_workload(mod):
            return
        workload = database.commit_workload(mod)  # existing: returns the stored workload
        foreign = 0
        to_predict: list[tuple[Config, Any]] = []
        for rec in database.get_all_tuning_records():
            if not rec.workload.same_as(workload):
                continue
            try:
                config = self.space.config_of(rec.trace)
            except SpaceError:
                foreign += 1  # another design-space structure (other rules): we cannot propose it anyway
                continue
            self.stats.resumed += 1
            secs = successful_run_seconds(rec.run_secs)
            if secs is None:
                self.failures.add(config)
            elif config not in self.observations:
                self.observations[config] = _Observation(median_latency(secs), self.space.embed(config), None)
                to_predict.append((config, rec))
        if to_predict:
            raw = self._predict([rec.as_measure_candidate() for _, rec in to_predict])
            for (config, _), r in zip(to_predict, raw):
                self.observations[config].raw = float(r)
        if self.stats.resumed or foreign:
            logger.info("BatchBO %s: resumed %d records (%d measured, %d failed, %d from other design spaces)",
                        self.stats.task, self.stats.resumed, len(self.observations), len(self.failures), foreign)

    def _predict(self, candidates: list["MeasureCandidate"]) -> np.ndarray:
        if self.cost_model is None or not candidates:
            return np.zeros(len(candidates))
        t0 = time.perf_counter()
        try:
            assert self.context is not None
            out = np.asarray(self.cost_model.predict(self.context, candidates), dtype=np.float64).reshape(-1)
            if out.shape[0] != len(candidates):
                raise ValueError(f"{out.shape[0]} predictions for {len(candidates)} candidates")
            return out
        except Exception as err:  # noqa: BLE001 - a broken prior must not end the tuning run
            logger.warning("BatchBO %s: cost_model.predict failed (%s: %s); using a flat prior for %d candidates",
                           self.stats.task, type(err).__name__, err, len(candidates))
            return np.zeros(len(candidates))
        finally:
            self.stats.prior_s += time.perf_counter() - t0
            self.stats.predictions += len(candidates)

    def _pool_raw(self, entries: list[_Entry]) -> np.ndarray:
        """Cost-model outputs for the pool; cached values are reused if a probe shows the model unchanged."""
        cached = [e for e in entries if e.raw is not None]
        todo = [e for e in entries if e.raw is None]
        if cached:
            probe = [cached[i] for i in self.rng.choice(len(cached), min(_PROBE, len(cached)), replace=False)]
            fresh = self._predict([e.measure for e in probe])
            if not np.allclose(fresh, [e.raw for e in probe], rtol=1e-6, atol=1e-9):
                todo = entries  # the model was updated since: everything is stale
        if todo:
            for e, r in zip(todo, self._predict([e.measure for e in todo])):
                e.raw = float(r)
        return np.array([e.raw for e in entries], dtype=np.float64)

    def _incumbents(self) -> list[Config]:
        ranked = sorted(self.observations.items(), key=lambda kv: kv[1].latency_s)
        return [c for c, _ in ranked[: self.settings.incumbents]]

    def _propose(self, q: int) -> list[tuple["MeasureCandidate", Config, np.ndarray, float]]:
        assert self.pool is not None
        t0 = time.perf_counter()
        avoid = set(self.observations) | self.failures | {p[1] for p in self.pending}
        before = set(self.pool.entries)
        self.pool.update(self.stats.batches, self._incumbents(), avoid)
        if not self.pool.entries and self.pool.random_exhausted:  # look hard before giving up
            self.pool.update(self.stats.batches, self._incumbents(), avoid, thorough=True)
        self.stats.pool_added += len(set(self.pool.entries) - before)
        entries = list(self.pool.entries.values())
        self.stats.pool_s += time.perf_counter() - t0
        if not entries:
            return []
        raw = self._pool_raw(entries)
        z = bo.normal_scores(raw)
        for obs in self.observations.values():  # database records: score against this pool, once
            if obs.score is None and obs.raw is not None:
                obs.score = float(bo.normal_scores(np.array([obs.raw]), raw)[0])
        picks: list[int] | None = None
        if len(self.observations) >= self.settings.min_observations:
            try:
                picks = self._bo_picks(entries, z, q)
            except Exception as err:  # noqa: BLE001 - degenerate data must not end the run; logged
                self.stats.fallbacks += 1
                self._gp_state = None  # do not warm-start the next fit from whatever led here
                logger.warning("BatchBO %s: GP step failed (%s: %s); this batch is the cost model's top-%d",
                               self.stats.task, type(err).__name__, str(err).splitlines()[0] if str(err) else "", q)
        if picks is None:
            self.stats.prior_batches += 1
            ties = 1e-9 * self.rng.random(len(entries))  # a flat prior picks at random, not in pool order
            picks = bo.diverse_top(z + ties, [e.cand.space_index for e in entries], q, self.settings.per_space)
        chosen = [(entries[i].measure, entries[i].cand.config, entries[i].embedding, float(z[i])) for i in picks]
        self.pool.discard(c for _, c, _, _ in chosen)
        self.pending.extend(chosen)  # type: ignore[arg-type]
        return chosen  # type: ignore[return-value]

    def _training_set(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Embeddings, cost-model scores and log-throughputs of successful measurements (capped)."""
        items = sorted(self.observations.values(), key=lambda o: o.latency_s)
        cap = self.settings.max_gp_points
        if len(items) > cap:
            rest = items[cap // 2 :]
            keep = self.rng.choice(len(rest), cap - cap // 2, replace=False)
            items = items[: cap // 2] + [rest[i] for i in sorted(keep)]
        x = np.stack([o.embedding for o in items])
        score = np.array([o.score if o.score is not None else 0.0 for o in items])
        y = -np.log(np.array([o.latency_s for o in items]))
        return x, score, y

    def _bo_picks(self, entries: list[_Entry], z: np.ndarray, q: int) -> list[int]:
        t0 = time.perf_counter()
        x_obs, score_obs, y = self._training_set()
        x_obs, x_pool = bo.unit_cube(x_obs, np.stack([e.embedding for e in entries]))
        surrogate = bo.fit_surrogate(x_obs, bo.score_column(score_obs), y, init=self._gp_state)
        self._gp_state = surrogate.state
        t1 = time.perf_counter()
        self.stats.fit_s += t1 - t0
        mean, cov = bo.pool_posterior(surrogate, x_pool, bo.score_column(z))
        if not (math.isfinite(float(mean.sum())) and math.isfinite(float(cov.diagonal().sum()))):
            raise FloatingPointError("non-finite GP posterior over the pool")
        picks = bo.greedy_batch(mean, cov, q, surrogate.best_f, 0.0, self.settings.acquisition,  # type: ignore[arg-type]
                                self.settings.ucb_beta)
        self.stats.acquire_s += time.perf_counter() - t1
        self.stats.gp_batches += 1
        self.stats.prior_weight = round(surrogate.prior_weight, 4)
        return picks


def _batch_bo_class() -> Any:
    """The MetaSchedule class, built on first use so that importing this module stays cheap."""

    return search_strategy_class(
        _BatchBOLogic, "BatchBO",
        "Batch Bayesian optimisation over knob configurations, the cost model as the GP's prior mean. "
        "Keywords: the fields of `BatchBOSettings`. Counters: `.stats` (this task), `.total_stats()` "
        "(every clone: `tune_tir`/`tune_tasks` run clones, one per task).")


def __getattr__(name: str) -> Any:
    """`from metatune.search.batch_bo import BatchBO` builds the TVM class lazily."""
    if name == "BatchBO":
        return _batch_bo_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
