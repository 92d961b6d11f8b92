"""BatchBO: a MetaSchedule search strategy that proposes each batch by Bayesian optimisation.

Why not EvolutionarySearch: with a cost model that is expensive to query but already good
(the meta-learned one), exploration by thousands of mutations per batch wastes search time;
the paper's batch BO (§6) is exploitation-centric and needs few cost-model calls.

Each batch:
1. Pool: uniform random valid configurations plus one-knob neighbours of the best measured
   configurations, minus everything measured, failed or in flight. The pool persists across
   batches (a slice of the random part is renewed each batch, neighbours follow the
   incumbents), so a batch pays only for the configurations it adds. Mutation chains (`evolve_*`,
   off with `evolve_children=0`) go further: each generation mutates 1..`max_changes` knobs of the
   configurations the cost model scores best (and of the incumbents), and the pool keeps the
   best-scored mutants, as EvolutionarySearch does with its cost model, but as candidates for
   the acquisition rather than as the batch.
2. Prior: the MetaSchedule cost model's predictions (higher = faster) on the pool, turned
   into rank-based normal scores. Re-predicted only when the model changed (checked on a
   probe of cached entries): MetaSchedule updates the cost model after every batch.
3. Surrogate (`bo.fit_surrogate`): a GP on the knob embedding whose mean is
   `c + w * cost-model score`, fitted on log(1/latency); a measured point's score is the
   one it had when it was proposed (a resumed run's records: before the cost model learns
   from them, which BatchBO does itself), so `w` measures out-of-sample trust in the cost model.
4. Acquisition (`bo.greedy_batch`): analytic LogEI (or UCB) over the pool, q greedy picks
   with Kriging-believer fantasies.
A second score column (`task_model`, on by default) comes from TVM's XGBModel trained on this
task's own measurements (`task_model.TaskModel`): the GP's mean becomes `c + w1 * meta score +
w2 * task score`, so the task's data takes over from the prior as far as it predicts better.
Both are on by default: chosen on the search-validation suite (docs/BENCHMARKS.md), where either
alone gained less than together.
Before `min_observations` successful measurements exist (first batch of a fresh workload),
and as a logged fallback when the GP cannot be fitted, the cost model's top-q picks decide,
spread over the design spaces; no mutation chains are built for such a batch (unless
`chains_before_gp`): bred to please the cost model alone, before any measurement can correct it,
their mutants took the first batch's picks and cost 1.06-1.23x on the validation suite.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Container, Iterable, Sequence

import numpy as np

from metatune.measure.database import earlier_results
from metatune.measure.measurer import with_failed_timings
from metatune.search import bo
from metatune.search.base import LAST, SearchLogic, SearchStats, create_strategy
from metatune.search.task_model import TaskModel
from metatune.space.knob_space import ANY_TILING, TILE_MOVES, Candidate, Config, SearchSpace
from metatune.space.parallel import collect_new

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.cost_model import CostModel
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerResult

logger = logging.getLogger(__name__)

_PROBE = 8  # cached pool entries re-predicted to detect a changed cost model
_GIVE_UP = 8  # single candidates that fail, none scored, before a cost model counts as broken


@dataclass(frozen=True)
class BatchBOSettings:
    """How BatchBO searches; every field is a keyword of `BatchBO(...)`."""

    pool_random: int = 256  # uniform random configurations kept in the pool
    first_pool_random: int = 0  # random configurations the first batch (the cost model's picks) is drawn from
    pool_local: int = 256  # one-knob neighbours of the incumbents kept in the pool
    refresh_random: int = 64  # random entries renewed per batch (oldest first)
    local_per_batch: int = 128  # new incumbent neighbours per batch (each costs a replay + postprocessing)
    incumbents: int = 8  # best measured configurations whose neighbourhoods are searched
    incumbents_per_space: int = 0  # also the best of every design space, so no space is left after its first look
    acquisition: str = "logei"  # "logei" or "ucb"
    ucb_beta: float = 4.0
    min_observations: int = 4  # successful measurements before the GP takes over
    max_gp_points: int = 512  # GP training set cap (best half kept, the rest subsampled)
    gp_recent: int = 0  # > 0: the GP learns from the incumbents and the last gp_recent measurements only
    evolve_children: int = 128  # mutants built per generation (0: no mutation chains)
    evolve_generations: int = 2  # generations per batch
    evolve_parents: int = 16  # best-scored pool entries mutated (the incumbents too)
    evolve_keep: int = 256  # mutants kept in the pool, best-scored first
    max_changes: int = 3  # a mutant changes 1..max_changes knobs of its parent
    tile_moves: str = ANY_TILING  # how far a neighbour's or mutant's tile knob moves (`knob_space.TILE_MOVES`)
    evolve_task_share: float = 0.0  # share of the kept mutants (and parents) chosen by the task model, once trained
    chains_before_gp: bool = False  # mutation chains also while the cost model alone picks (the first batch)
    task_picks: int = 0  # picks per batch given to the task model's best-scored pool entries, once trained
    task_model: bool = True  # a second prior: XGBModel on this task's own measurements
    seed: int | None = None  # default: the TuneContext's rand_state

    def __post_init__(self) -> None:
        if self.acquisition not in ("logei", "ucb"):
            raise ValueError(f"acquisition must be 'logei' or 'ucb', not {self.acquisition!r}")
        if self.pool_random < 1 or self.min_observations < 2:
            # the random entries are what a fresh task's first pool is made of: none ends it at 0 trials
            raise ValueError("BatchBO needs pool_random >= 1 and min_observations >= 2")
        if self.max_gp_points < self.min_observations:
            raise ValueError(f"max_gp_points ({self.max_gp_points}) must be >= min_observations "
                             f"({self.min_observations}): the GP could never be fitted")
        if min(self.evolve_children, self.evolve_generations, self.evolve_parents, self.evolve_keep) < 0:
            raise ValueError("the evolve_* settings must be >= 0")
        if self.max_changes < 1:
            raise ValueError("max_changes must be >= 1")
        if self.tile_moves not in TILE_MOVES:
            raise ValueError(f"tile_moves must be one of {', '.join(TILE_MOVES)}, not {self.tile_moves!r}")
        if not 0.0 <= self.evolve_task_share <= 1.0:
            raise ValueError("evolve_task_share must be in [0, 1]")
        if self.task_picks < 0:
            raise ValueError("task_picks must be >= 0")
        if self.first_pool_random < 0:
            raise ValueError("first_pool_random must be >= 0")
        if self.gp_recent < 0:
            raise ValueError("gp_recent must be >= 0")


@dataclass
class BatchBOStats(SearchStats):
    """Where one task's BatchBO search time went, beyond the counters every strategy keeps."""

    pool_s: float = 0.0  # sampling, neighbours, postprocessing, embedding
    prior_s: float = 0.0  # cost_model.predict
    fit_s: float = 0.0  # GP fit
    acquire_s: float = 0.0  # posterior over the pool + greedy selection
    gp_batches: int = 0
    prior_batches: int = 0  # batches chosen by the cost model alone (first batch or fallback)
    fallbacks: int = 0  # GP failures that fell back to the cost model (each logged)
    prior_failures: int = 0  # cost-model predictions that raised: those candidates rank last (each logged)
    predictions: int = 0  # configurations scored by the cost model
    pool_added: int = 0  # configurations built for the pool (random + neighbours + mutants)
    mutants: int = 0  # of which mutants of the mutation chains
    task_s: float = 0.0  # task model: training and scoring
    task_picked: int = 0  # proposals chosen by the task model alone (`task_picks`)
    prior_weight: float | None = field(default=None, metadata=LAST)  # last fitted w: trust in the cost model
    task_weight: float | None = field(default=None, metadata=LAST)  # last fitted w of the task model's score


def _best_first(raw: float | None) -> float:
    """A sort key putting the highest cost-model output first, a NaN or missing one last."""
    return -raw if raw is not None and math.isfinite(raw) else math.inf


@dataclass
class _Entry:
    """A pool configuration: its schedule, MeasureCandidate, embedding and cached prediction."""

    cand: Candidate
    measure: "MeasureCandidate"
    embedding: np.ndarray
    origin: Config | None  # the incumbent it neighbours; None for a random entry or a mutant
    born: int
    mutant: bool = False  # made by a mutation chain (kept by score, not by incumbent)
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

    def _add(self, cand: Candidate, origin: Config | None, batch: int, mutant: bool = False) -> _Entry:
        from tvm.s_tir.meta_schedule import MeasureCandidate

        assert cand.config is not None
        entry = _Entry(cand, MeasureCandidate(cand.sch, self.args_info), self.space.embed(cand.config), origin, batch,
                       mutant=mutant)
        self.entries[cand.config] = entry
        return entry

    def discard(self, configs: Iterable[Config]) -> None:
        for c in configs:
            self.entries.pop(c, None)

    def update(self, batch: int, incumbents: Sequence[Config], avoid: Container[Config], thorough: bool = False,
               random_size: int | None = None) -> None:
        """Drop avoided entries, renew the oldest random entries, give the incumbents (best
        first) neighbours within this batch's budget, and evict neighbours of former
        incumbents (oldest first) only when the local part is over its size. `thorough`
        ignores what earlier rounds said about exhaustion (before concluding the space is used up);
        `random_size` overrides `pool_random` for this batch (a wider first look); a random part
        left over its size by such a batch is cut back to it."""
        s = self.settings
        size = s.pool_random if random_size is None else random_size
        if thorough:
            self.exhausted.clear()
        self.discard([c for c in self.entries if c in avoid])
        randoms = sorted((e.born, c) for c, e in self.entries.items() if e.origin is None and not e.mutant)
        if len(randoms) > size:
            self.discard(c for _, c in randoms[: len(randoms) - size])
            randoms = randoms[len(randoms) - size :]
        if batch > 0 and s.refresh_random:
            self.discard(c for _, c in randoms[: s.refresh_random])
            randoms = randoms[s.refresh_random :]
        missing = size - len(randoms)
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

    def add_mutants(self, parents: Sequence[Config], n: int, batch: int, avoid: Container[Config]) -> list[_Entry]:
        """Up to n new mutants, each of a uniformly drawn parent in 1..max_changes knobs."""
        if not parents:
            return []
        moves = []
        for _ in range(n):
            parent = parents[int(self.rng.integers(len(parents)))]
            moves.append((parent, int(self.rng.integers(1, self.settings.max_changes + 1))))
        added: list[_Entry] = []
        for cand in self.space.neighbours(moves, self.rng, tile_moves=self.settings.tile_moves):
            if cand is None or cand.config in self.entries or cand.config in avoid:
                continue
            added.append(self._add(cand, None, batch, mutant=True))
        return added

    def keep_best_mutants(self, keep: int, task_raw: dict[Config, float] | None = None, task_share: float = 0.0) -> None:
        """Evict all but the `keep` best-scored mutants (every mutant must have a score). With
        `task_raw` (the task model's outputs), `task_share` of the places go to the mutants it
        scores best, the rest to the cost model's best."""
        mutants = [c for c, e in self.entries.items() if e.mutant]
        by_prior = sorted(mutants, key=lambda c: _best_first(self.entries[c].raw))
        kept: set[Config] = set()
        if task_raw is not None and task_share > 0.0:
            kept = set(sorted(mutants, key=lambda c: _best_first(task_raw[c]))[: round(keep * task_share)])
        for c in by_prior:
            if len(kept) >= keep:
                break
            kept.add(c)
        self.discard(c for c in mutants if c not in kept)

    def _add_neighbours(self, incumbent: Config, n: int, batch: int, avoid: Container[Config]) -> int:
        """Up to n new one-knob neighbours of an incumbent; returns how many were added."""
        knobs = self.space[incumbent.space]
        if n <= 0 or len(knobs) == 0 or incumbent in self.exhausted:
            return 0
        found = collect_new(n, n + n // 2 + 8,  # collisions are rare in a big space; a small one gets marked exhausted
                            lambda k: self.space.neighbours([(incumbent, 1)] * k, self.rng,
                                                            tile_moves=self.settings.tile_moves),
                            key=lambda c: c.config, known=lambda c: c in self.entries or c in avoid)
        for cand in found:
            self._add(cand, incumbent, batch)
        added = len(found)
        if added < n:  # its neighbourhood is (nearly) all measured or pooled: stop paying for retries
            self.exhausted.add(incumbent)
        return added


@dataclass
class _Observation:
    latency_s: float  # median run time
    embedding: np.ndarray
    score: float | None  # cost-model normal score when proposed (None: not yet known)
    task_score: float = 0.0  # the task model's normal score when proposed (0: no model yet, or a record)
    raw: float | None = None  # a database record's cost-model output (its score's source)


class _BatchBOLogic(SearchLogic):
    """Batch Bayesian optimisation over knob configurations, the cost model as the GP's prior mean.
    Keywords: the fields of `BatchBOSettings`. Counters: `.stats` (this task), `.total_stats()`
    (every clone: `tune_tir`/`tune_tasks` run clones, one per task)."""

    name = "BatchBO"
    warms_cost_model = True

    def __init__(self, **settings: Any) -> None:
        super().__init__(BatchBOSettings(**settings), BatchBOStats())

    def _reset(self) -> None:
        super()._reset()
        self.pool: CandidatePool | None = None
        self.cost_model: "CostModel | None" = None
        self._gp_state: dict[str, Any] | None = None
        self._read: list[tuple[Config | None, "TuningRecord"]] = []  # database records (config if observed) to score
        self.task_model: TaskModel | None = None

    def _prepare(self, cost_model: Any) -> None:
        assert self.space is not None
        self.cost_model = cost_model
        self.pool = CandidatePool(self.space, self.args_info, self.settings, self.rng)
        if self.settings.task_model:
            self.task_model = TaskModel()

    def post_tuning(self) -> None:
        s = self.stats
        logger.info(
            "BatchBO %s: %d batches, %d proposed, search %.1f s (%.3f s/trial: pool %.1f, prior %.1f, fit %.1f, "
            "acquire %.1f), %d fallbacks", s.task, s.batches, s.proposed, s.search_s, s.per_trial_s, s.pool_s,
            s.prior_s, s.fit_s, s.acquire_s, s.fallbacks,
        )
        self.pool = self.task_model = None  # schedules and features are big; the stats stay

    def _observe(self, config: Config, latency_s: float, proposal: tuple | None) -> None:
        assert self.space is not None
        if proposal is None:
            self.observations[config] = _Observation(latency_s, self.space.embed(config), None)
        else:
            self.observations[config] = _Observation(latency_s, proposal[2], proposal[3], task_score=proposal[4])

    def notify_runner_results(self, measure_candidates: list["MeasureCandidate"],
                              results: list["RunnerResult"]) -> None:
        super().notify_runner_results(measure_candidates, results)
        if self.task_model is not None:
            assert self.context is not None
            t0 = time.perf_counter()
            self.task_model.update(self.context, measure_candidates, with_failed_timings(results))
            self.stats.task_s += time.perf_counter() - t0

    def _observe_record(self, config: Config, latency_s: float | None, record: "TuningRecord") -> None:
        """Database records seed the GP; once all are read, `_resumed` scores them and the models learn them."""
        fresh = latency_s is not None and config not in self.observations
        super()._observe_record(config, latency_s, record)
        self._read.append((config if fresh else None, record))

    def _resumed(self) -> None:
        """The records read get the cost model's scores before it learns from them, as a proposal
        is scored before it is measured (so the GP's weight on the scores stays an out-of-sample
        trust); then the cost model and the task model learn from every record, failures too, as
        they would have learnt from each batch in the run that measured them."""
        read, self._read = self._read, []
        if not read:
            return
        assert self.context is not None
        records = [rec for _, rec in read]
        candidates, results = [rec.as_measure_candidate() for rec in records], earlier_results(records)
        observed = [(config, cand) for (config, _), cand in zip(read, candidates) if config is not None]
        raw = self._predict([cand for _, cand in observed])
        reference = self._resume_reference() if observed else raw
        # Scored against the pool as the model sees it now, before it learns the records, as a proposal is
        # scored against its pool by the model of its time (not against a pool the adapted model scores
        # on another scale).
        for (config, _), r, z in zip(observed, raw, bo.normal_scores(raw, reference)):
            self.observations[config].raw, self.observations[config].score = float(r), float(z)
        if self.cost_model is not None:
            self.cost_model.update(self.context, candidates, results)
        if self.task_model is not None:
            self.task_model.update(self.context, candidates, results)

    def _resume_reference(self) -> np.ndarray:
        """The pool's random part (`pool_random` configurations), filled now, and the cost model's outputs on it."""
        assert self.pool is not None
        t0 = time.perf_counter()
        self.pool.update(0, [], set(self.observations) | self.failures)
        self.stats.pool_s += time.perf_counter() - t0
        return self._pool_raw(list(self.pool.entries.values()))

    def _fresh(self) -> Any:
        return BatchBO(**asdict(self.settings))

    def _predict(self, candidates: list["MeasureCandidate"]) -> np.ndarray:
        """The cost model's outputs; where it raises, see `_isolate_failures`."""
        if self.cost_model is None or not candidates:
            return np.zeros(len(candidates))
        t0 = time.perf_counter()
        try:
            out, err = self._try_predict(candidates)
            return out if err is None else self._isolate_failures(candidates, err)
        finally:
            self.stats.prior_s += time.perf_counter() - t0
            self.stats.predictions += len(candidates)

    def _isolate_failures(self, candidates: list["MeasureCandidate"], err: Exception) -> np.ndarray:
        """Outputs of a call that raised `err`, found by halving: the candidates the model fails on get NaN
        (ranked last), so that programs it cannot encode do not flatten every other's prior, call after
        call. Where the first _GIVE_UP single candidates all fail, the model itself is broken: NaN for all
        (a flat prior)."""
        out = np.full(len(candidates), np.nan)
        failing, scored, last, failed = [(0, len(candidates))], False, err, 0
        while failing:
            lo, hi = failing.pop()
            if hi - lo == 1:
                failed += 1
                if failed >= _GIVE_UP and not scored:
                    break
                continue
            mid = (lo + hi) // 2
            for a, b in ((lo, mid), (mid, hi)):
                part, part_err = self._try_predict(candidates[a:b])
                if part_err is None:
                    out[a:b], scored = part, True
                else:
                    failing.append((a, b))
                    last = part_err
        logger.warning("BatchBO %s: cost_model.predict failed on %d of %d candidates (%s: %s); they rank last",
                       self.stats.task, failed if scored else len(candidates), len(candidates),
                       type(last).__name__, last)
        self.stats.prior_failures += 1
        return out

    def _try_predict(self, candidates: list["MeasureCandidate"]) -> tuple[np.ndarray, Exception | None]:
        assert self.context is not None and self.cost_model is not None
        try:
            out = np.asarray(self.cost_model.predict(self.context, candidates), dtype=np.float64).reshape(-1)
            if out.shape[0] != len(candidates):
                raise ValueError(f"{out.shape[0]} predictions for {len(candidates)} candidates")
            return out, None
        except Exception as err:  # noqa: BLE001 - a broken prior must not end the tuning run
            return np.empty(0), err

    def _pool_raw(self, entries: list[_Entry]) -> np.ndarray:
        """Cost-model outputs for the pool; cached values are reused if a probe shows the model unchanged."""
        cached = [e for e in entries if e.raw is not None]
        todo = [e for e in entries if e.raw is None]
        if cached:
            probe = [cached[i] for i in self.rng.choice(len(cached), min(_PROBE, len(cached)), replace=False)]
            fresh = self._predict([e.measure for e in probe])
            if not np.allclose(fresh, [e.raw for e in probe], rtol=1e-6, atol=1e-9, equal_nan=True):
                todo = entries  # the model was updated since: everything is stale
        if todo:
            for e, r in zip(todo, self._predict([e.measure for e in todo])):
                e.raw = float(r)
        return np.array([e.raw for e in entries], dtype=np.float64)

    def _evolve(self, avoid: Container[Config]) -> None:
        """Mutation chains scored by the cost model: each generation mutates the best-scored
        pool entries and the incumbents; the best-scored mutants stay in the pool. With
        `evolve_task_share`, the task model (once trained) also chooses parents and keeps that
        share of the mutants: the task's own measurements steer where the chains go, as the
        task's XGBModel steers TVM's EvolutionarySearch."""
        assert self.pool is not None
        s = self.settings
        by_task = s.evolve_task_share > 0.0 and self.task_model is not None and self.task_model.ready
        for _ in range(s.evolve_generations):
            entries = list(self.pool.entries.values())
            raw = self._pool_raw(entries)
            parents = [entries[i].cand.config for i in np.argsort(-raw, kind="stable")[: s.evolve_parents]]
            if by_task:
                task = self._task_raw(entries)
                n_task = round(s.evolve_parents * s.evolve_task_share)
                parents += [entries[i].cand.config for i in np.argsort(-task, kind="stable")[:n_task]]
            t0 = time.perf_counter()
            mutants = self.pool.add_mutants(parents + self._incumbents(), s.evolve_children, self.stats.batches, avoid)
            self.stats.pool_s += time.perf_counter() - t0
            self.stats.mutants += len(mutants)
            self._pool_raw(mutants)
            task_of = None
            if by_task:
                entries = list(self.pool.entries.values())
                task_of = {e.cand.config: float(t) for e, t in zip(entries, self._task_raw(entries))}
            self.pool.keep_best_mutants(s.evolve_keep, task_of, s.evolve_task_share)

    def _incumbents(self) -> list[Config]:
        """The best measured configurations, then the best of each design space not among them."""
        ranked = [c for c, _ in sorted(self.observations.items(), key=lambda kv: kv[1].latency_s)]
        chosen = ranked[: self.settings.incumbents]
        per_space = self.settings.incumbents_per_space
        if per_space:
            seen: collections.Counter[int] = collections.Counter()
            taken = set(chosen)
            for c in ranked:
                if seen[c.space] < per_space and c not in taken:
                    chosen.append(c)
                seen[c.space] += 1
        return chosen

    def _propose(self, q: int) -> list[tuple["MeasureCandidate", Config, np.ndarray, float]]:
        assert self.pool is not None
        t0 = time.perf_counter()
        avoid = set(self.observations) | self.failures | {p[1] for p in self.pending}
        before = set(self.pool.entries)
        gp_decides = len(self.observations) >= self.settings.min_observations
        first = self.stats.batches == 0 and not gp_decides
        random_size = (self.settings.first_pool_random or None) if first else None
        self.pool.update(self.stats.batches, self._incumbents(), avoid, random_size=random_size)
        if not self.pool.entries and self.pool.random_exhausted:  # look hard before giving up
            self.pool.update(self.stats.batches, self._incumbents(), avoid, thorough=True, random_size=random_size)
        self.stats.pool_s += time.perf_counter() - t0
        if self.settings.evolve_children and self.pool.entries and (gp_decides or self.settings.chains_before_gp):
            self._evolve(avoid)
        self.stats.pool_added += len(set(self.pool.entries) - before)
        entries = list(self.pool.entries.values())
        if not entries:
            return []
        raw = self._pool_raw(entries)
        z = bo.normal_scores(raw)
        scores = np.column_stack([z, self._task_scores(entries)]) if self.task_model is not None else z
        picks: list[int] | None = None
        if gp_decides:
            try:
                picks = self._bo_picks(entries, scores, q, self._task_favourites(scores, q))
            except Exception as err:  # noqa: BLE001 - degenerate data must not end the run; logged
                self.stats.fallbacks += 1
                self._gp_state = None  # do not warm-start the next fit from whatever led here
                logger.warning("BatchBO %s: GP step failed (%s: %s); this batch is the cost model's top-%d",
                               self.stats.task, type(err).__name__, str(err).splitlines()[0] if str(err) else "", q)
        if picks is None:
            self.stats.prior_batches += 1
            ties = 1e-9 * self.rng.random(len(entries))  # a flat prior picks at random, not in pool order
            picks = bo.diverse_top(z + ties, [e.cand.space_index for e in entries], q)
        task = scores[:, 1] if scores.ndim == 2 else np.zeros(len(entries))
        chosen = [(entries[i].measure, entries[i].cand.config, entries[i].embedding, float(z[i]), float(task[i]))
                  for i in picks]
        self.pool.discard(c[1] for c in chosen)
        return chosen  # type: ignore[return-value]

    def _task_favourites(self, scores: np.ndarray, q: int) -> list[int]:
        """The `task_picks` pool entries the task model scores best (none until it is trained):
        a hedge for when the GP's trust in the meta-learned prior keeps the batch where the
        prior is wrong, as on layers where TVM's XGBModel-guided search overtakes late."""
        n = min(self.settings.task_picks, q - 1)
        if n <= 0 or self.task_model is None or not self.task_model.ready or scores.ndim < 2:
            return []
        order = np.lexsort((-scores[:, 0], -scores[:, 1]))  # task score, ties by the prior's
        return [int(i) for i in order[:n]]

    def _task_raw(self, entries: list[_Entry]) -> np.ndarray:
        """The task model's outputs over the whole pool (zeros until it is trained)."""
        assert self.task_model is not None and self.context is not None
        t0 = time.perf_counter()
        raw = self.task_model.predict(self.context, [e.measure for e in entries])
        self.stats.task_s += time.perf_counter() - t0
        return raw

    def _task_scores(self, entries: list[_Entry]) -> np.ndarray:
        """The task model's normal scores over the pool (zeros until it is trained)."""
        return bo.normal_scores(self._task_raw(entries))

    def _training_set(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Embeddings, cost-model scores and log-throughputs of successful measurements (capped).

        With `gp_recent`, only the incumbents and the latest measurements: late in a run the search
        proposes near its incumbents, where the meta-learned model ranks worse than the task's own
        (bench/late_ranking.py), while weights fitted on the whole history keep trusting it."""
        items = list(self.observations.values())  # in measurement order
        recent = self.settings.gp_recent
        if recent and len(items) > recent + self.settings.incumbents:
            best = sorted(range(len(items)), key=lambda i: items[i].latency_s)[: self.settings.incumbents]
            keep = set(best) | set(range(len(items) - recent, len(items)))
            items = [items[i] for i in sorted(keep)]
        items = sorted(items, key=lambda o: o.latency_s)
        cap = self.settings.max_gp_points
        if len(items) > cap:
            rest = items[cap // 2 :]
            keep = self.rng.choice(len(rest), cap - cap // 2, replace=False)
            items = items[: cap // 2] + [rest[i] for i in sorted(keep)]
        x = np.stack([o.embedding for o in items])
        score = np.array([o.score if o.score is not None else 0.0 for o in items])
        if self.task_model is not None:
            score = np.column_stack([score, [o.task_score for o in items]])
        y = -np.log(np.array([o.latency_s for o in items]))
        return x, score, y

    def _bo_picks(self, entries: list[_Entry], z: np.ndarray, q: int, chosen: Sequence[int] = ()) -> list[int]:
        """`z`: the pool's normal scores, (N,) or (N, 2) with the task model's; `chosen`: picks
        made already, which the GP's batch treats as its first (their fantasies included)."""
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
                                self.settings.ucb_beta, chosen=chosen)
        self.stats.task_picked += len(chosen)
        self.stats.acquire_s += time.perf_counter() - t1
        self.stats.gp_batches += 1
        self.stats.prior_weight = round(surrogate.prior_weight, 4)
        if len(surrogate.weights) > 1:
            self.stats.task_weight = round(surrogate.weights[1], 4)
        return picks


def BatchBO(**settings: Any) -> Any:  # noqa: N802 (creates the TVM class)
    """The BatchBO MetaSchedule search strategy; keywords: the fields of `BatchBOSettings`."""
    return create_strategy(_BatchBOLogic, **settings)
