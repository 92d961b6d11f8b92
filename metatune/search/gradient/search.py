"""GradientSearch: a MetaSchedule search strategy that descends through the cost model (Felix §3.4).

Each batch (Felix, Algorithm 1):
1. Seeds: `seeds` starting points spread over the variants (design space x compute locations):
   a share from the best measured configurations, the rest uniformly random valid tilings with
   a random unroll step.
2. Descent: Adam on the free log-factors of every seed at once, minimising
   `-score(features(y)) + penalty_weight * penalty(y)`, where `score` is the MetaTuneCostModel's
   GCN with the weights it adapted to this workload's measurements so far, `features` the
   differentiable super-graph features (`features.VariantFeatures`) and `penalty` Felix's
   constraint terms (`relax`).
3. Rounding: every point visited (seeds included) is rounded to the nearest valid tiling in log
   space and combined with every unroll step; duplicates and configurations already measured,
   failed or in flight are dropped.
4. Selection: the rest are scored exactly (the features of an integer configuration are the
   encoder's). Seeds often descend into the same basin, and the top-n of all points would then
   be near-copies of one tiling: the batch takes the best configuration of each descent
   (trajectory) first, best first, then the best remaining points; a share of every batch
   (`explore_share`) is random valid configurations, because the model is only trusted near
   what it has seen measured. A pick TVM rejects is replaced by the next one.
The cost model's `update()` adapts it on each batch's measurements, as for BatchBO. Search time
per batch is in `stats.batch_s` and logged at the end of the task.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from metatune import MetatuneError
from metatune.encode import layout
from metatune.encode.features import FEATURE_NAMES
from metatune.encode.supergraph import GraphEncoder
from metatune.search.base import SearchLogic, SearchStats, create_strategy
from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.program import Variant
from metatune.search.gradient.variants import VariantModel, Variants
from metatune.space.knob_space import Config

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext

logger = logging.getLogger(__name__)

_SCORE_BATCH = 256


@dataclass(frozen=True)
class GradientSettings:
    """How GradientSearch searches; every field is a keyword of `GradientSearch(...)`."""

    seeds: int = 24  # starting points per batch
    steps: int = 20  # Adam steps per batch
    lr: float = 0.15  # Adam step size, in natural-log units of a tile factor
    penalty_weight: float = 10.0  # Felix's lambda
    incumbent_share: float = 0.25  # share of the seeds started from the best measured configurations
    seeds_per_variant: int = 4  # random seeds share a variant in groups of this size (fewer, larger batches)
    explore_share: float = 0.25  # share of each batch filled with random valid configurations
    probes: int = 3  # random configurations per design space used to discover compute locations
    threads: int = 1  # torch threads while searching; 1 avoids oversubscribing the cores TVM shares
    seed: int | None = None  # default: the TuneContext's rand_state

    def __post_init__(self) -> None:
        if (self.seeds < 1 or self.steps < 0 or self.lr <= 0 or not 0 <= self.incumbent_share <= 1
                or not 0 <= self.explore_share < 1 or self.seeds_per_variant < 1 or self.threads < 1):
            raise ValueError("GradientSearch needs seeds, seeds_per_variant, threads >= 1, steps >= 0, lr > 0, "
                             "0 <= incumbent_share <= 1 and 0 <= explore_share < 1")


@dataclass
class GradientStats(SearchStats):
    """Where one task's gradient-search time went, beyond the counters every strategy keeps."""

    setup_s: float = 0.0  # design spaces, compute locations, symbolic programs
    descent_s: float = 0.0  # Adam through features and GCN
    select_s: float = 0.0  # rounding, exact scores of the rounded points
    build_s: float = 0.0  # TVM schedules of the picks
    visited: int = 0  # points visited by the descent (seeds included)
    candidates: int = 0  # distinct unmeasured rounded configurations scored
    rejected: int = 0  # picks TVM could not build
    explored: int = 0  # batch slots given to random configurations on purpose (explore_share)
    random_fill: int = 0  # batch slots filled by random configurations (nothing better left)
    structures: int = 0  # distinct postprocessed loop structures met
    variants: int = 0
    dropped: list[str] = field(default_factory=list)  # variants the symbolic model cannot express


class _Scorer:
    """The cost model's GCN with the weights currently adapted to the task, on dense x batches."""

    def __init__(self, cost_model: Any, context: "TuneContext") -> None:
        trained = cost_model.trained
        self.model = trained.model
        template = trained.builder.template
        self.params = {n: p.detach() for n, p in self.model.named_parameters()}
        self.params.update({n: p.detach() for n, p in cost_model.adapted_params(context).items()})
        self.edges = layout.template_edges(template.parents)
        self.nodes = template.num_nodes

    def __call__(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        edges = layout.batched_edges(self.edges, x.shape[0], self.nodes)
        return torch.func.functional_call(self.model, self.params, (x, edges, mask))


@dataclass
class _Seed:
    variant: Variant
    y: np.ndarray  # (columns,) log-factors
    unroll: int


class _GradientLogic(SearchLogic):
    """Felix-style gradient descent over tile sizes through a MetaTuneCostModel.
    `GradientSearch(cost_model, **GradientSettings fields)`. Counters: `.stats` (this task),
    `.total_stats()` (every clone: `tune_tir`/`tune_tasks` run one per task)."""

    name = "GradientSearch"

    def __init__(self, cost_model: Any = None, **settings: Any) -> None:
        self.cost_model = cost_model
        super().__init__(GradientSettings(**settings), GradientStats())

    def _reset(self) -> None:
        super()._reset()
        self.variants: Variants | None = None
        self.structures: set[tuple] = set()

    def _prepare(self, cost_model: Any) -> None:
        """The descent runs through the cost model given at construction (the one MetaSchedule updates)."""
        t0 = time.perf_counter()
        assert self.space is not None
        if self.cost_model is None or not hasattr(self.cost_model, "adapted_params"):
            raise MetatuneError("GradientSearch descends through a MetaTuneCostModel: "
                                "pass it as GradientSearch(cost_model)")
        template = self.cost_model.trained.builder.template
        if template.features != FEATURE_NAMES:
            raise MetatuneError("gradient search differentiates the CPU loop features only; this checkpoint "
                                "encodes GPU programs: use --strategy metatune")
        self.variants = Variants(self.space, self.cost_model.trained.builder, GraphEncoder(template), self.rng,
                                 self.settings.probes)
        self.stats.variants = len(self.variants)
        usable = [self.variants.model(next(v for v in self.variants.usable() if v.space == ks.index))
                  for ks in self.space.knob_spaces if any(v.space == ks.index for v in self.variants.usable())]
        if not any(usable):
            raise MetatuneError(f"{self.stats.task}: gradient search cannot differentiate any design space: "
                                + "; ".join(dict.fromkeys(self.variants.dropped.values())))
        self.stats.setup_s += time.perf_counter() - t0

    def post_tuning(self) -> None:
        s = self.stats
        logger.info("GradientSearch %s: %d batches, %d proposed, search %.1f s (%.2f s per batch: setup %.1f, "
                    "descent %.1f, select %.1f, build %.1f), %d points visited, %d structures, %d variants "
                    "(%d skipped)", s.task, s.batches, s.proposed, s.search_s, s.per_batch_s, s.setup_s,
                    s.descent_s, s.select_s, s.build_s, s.visited, s.structures, s.variants, len(s.dropped))
        self.variants = None  # symbolic programs and plans are big; the stats stay

    def _observe(self, config: Config, latency_s: float, proposal: tuple | None) -> None:
        self.observations[config] = latency_s

    def _fresh(self) -> Any:
        return GradientSearch(self.cost_model, **asdict(self.settings))

    def _propose(self, q: int) -> list[tuple["MeasureCandidate", Config]]:
        assert self.context is not None
        scorer = _Scorer(self.cost_model, self.context)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.settings.threads)
        try:
            t0 = time.perf_counter()
            visited = self._descend(self._seeds(), scorer)
            t1 = time.perf_counter()
            ranked = self._rank(visited, scorer, q)
            t2 = time.perf_counter()
        finally:
            torch.set_num_threads(threads)
        picked = self._build(ranked, q - self._explore_slots(q), q)
        self.stats.descent_s += t1 - t0
        self.stats.select_s += t2 - t1
        self.stats.build_s += time.perf_counter() - t2
        self.stats.structures = len(self.structures)
        return picked

    def _seeds(self) -> list[_Seed]:
        assert self.variants is not None
        n = self.settings.seeds
        seeds: list[_Seed] = []
        best = sorted(self.observations.items(), key=lambda kv: kv[1])
        for config, _ in best[: int(round(self.settings.incumbent_share * n))]:
            model = self.variants.model_for(config)
            if model is not None:
                unroll = int(config.decisions[model.program.unroll.position]) if model.program.unroll else 0
                seeds.append(_Seed(model.variant, np.asarray(model.program.columns(config)), unroll))
        by_space: dict[int, list[Variant]] = {}
        for v in self.variants.usable():
            by_space.setdefault(v.space, []).append(v)
        while len(seeds) < n and by_space:
            spaces = sorted(by_space)
            space = spaces[int(self.rng.integers(len(spaces)))]
            options = by_space[space]
            variant = options[int(self.rng.integers(len(options)))]
            model = self.variants.model(variant)
            if model is None:
                options.remove(variant)
                if not options:
                    del by_space[space]
                continue
            unrolls = len(model.program.unroll.categories) if model.program.unroll else 1
            count = min(self.settings.seeds_per_variant, n - len(seeds))
            for y in model.relax.sample(self.rng, count):
                seeds.append(_Seed(variant, y, int(self.rng.integers(unrolls))))
        if not seeds:
            raise MetatuneError(f"{self.stats.task}: no design space can be differentiated: "
                                + "; ".join(self.variants.dropped.values()))
        return seeds

    def _descend(self, seeds: list[_Seed], scorer: _Scorer) -> list[tuple[Variant, np.ndarray, np.ndarray, np.ndarray]]:
        """Adam from every seed; per variant, the log-factors of every point visited (seeds
        included), each point's unroll index and the number of its trajectory (its seed)."""
        assert self.variants is not None
        groups: dict[Variant, list[_Seed]] = {}
        for s in seeds:
            groups.setdefault(s.variant, []).append(s)
        models: dict[Variant, VariantModel] = {}
        free: dict[Variant, torch.Tensor] = {}
        unroll: dict[Variant, torch.Tensor] = {}
        for variant, members in groups.items():
            model = self.variants.model(variant)
            assert model is not None
            models[variant] = model
            y0 = torch.tensor(np.stack([s.y for s in members]), dtype=torch.float64)
            free[variant] = model.relax.free(y0).requires_grad_(True)
            unroll[variant] = torch.tensor([s.unroll for s in members])
        visited: dict[Variant, list[np.ndarray]] = {v: [] for v in groups}
        opt = torch.optim.Adam(list(free.values()), lr=self.settings.lr)
        for step in range(self.settings.steps + 1):
            xs, masks, penalties = [], [], []
            for variant in list(free):
                model = models[variant]
                y = model.relax.columns(free[variant])
                visited[variant].append(y.detach().numpy().copy())
                if step == self.settings.steps:
                    continue
                try:
                    x, mask, rewrites = model.features.node_features(y, unroll[variant])
                except NotDifferentiable as err:
                    self._drop(variant, err)
                    del free[variant]
                    continue
                self.structures.update((variant, rw.key) for rw in rewrites)
                xs.append(x)
                masks.append(mask)
                penalties.append(model.relax.penalty(y).sum())
            if step == self.settings.steps or not xs:
                break
            opt.zero_grad()
            loss = -scorer(torch.cat(xs), torch.cat(masks)).sum() + self.settings.penalty_weight * sum(penalties)
            loss.backward()
            opt.step()
        out = []
        first = 0  # trajectory numbers: seed order, unique over all variants
        for variant, points in visited.items():
            members = len(groups[variant])
            if variant in free:
                trajectory = np.tile(np.arange(first, first + members), len(points))
                out.append((variant, np.concatenate(points), unroll[variant].repeat(len(points)).numpy(), trajectory))
                self.stats.visited += len(points) * members
            first += members
        return out

    def _rank(self, visited: list[tuple[Variant, np.ndarray, np.ndarray, np.ndarray]], scorer: _Scorer,
              q: int) -> list[Config]:
        """Distinct unmeasured rounded configurations in the order the batch takes them: the best
        of each trajectory (best first), then every other by predicted score. Scored: every visited
        point with its seed's unroll step, and every unroll step of the best 2q and of the leaders."""
        assert self.variants is not None
        avoid = set(self.observations) | self.failures | {c for _, c in self.pending}
        scored: dict[Config, float] = {}
        trajectory_of: list[tuple[Config, int]] = []
        for variant, y, unroll, trajectory in visited:
            model = self.variants.models[variant]
            points = list(zip(model.relax.round(y), unroll.tolist()))
            config_of = {point: model.config(*point) for point in dict.fromkeys(points)}
            scored.update(self._score(model, [p for p, c in config_of.items() if c not in avoid], scorer))
            trajectory_of += [(config_of[point], int(k)) for point, k in zip(points, trajectory)]
        leaders: dict[int, Config] = {}
        for config, k in trajectory_of:
            if config in scored and (k not in leaders or _key(scored[config]) < _key(scored[leaders[k]])):
                leaders[k] = config
        siblings: dict[Config, list[Config]] = {}
        for config in dict.fromkeys([*sorted(scored, key=lambda c: _key(scored[c]))[: 2 * q], *leaders.values()]):
            siblings[config] = self._score_unroll_steps(config, avoid, scored, scorer)
        self.stats.candidates += len(scored)
        # a leader stands for its tiling: take the tiling's best unroll step
        best_leaders = {min([c, *siblings.get(c, [])], key=lambda x: _key(scored[x])) for c in leaders.values()}
        first = sorted(best_leaders, key=lambda c: _key(scored[c]))
        rest = sorted((c for c in scored if c not in best_leaders), key=lambda c: _key(scored[c]))
        return first + rest

    def _score_unroll_steps(self, config: Config, avoid: set[Config], scored: dict[Config, float],
                            scorer: _Scorer) -> list[Config]:
        """Score `config`'s tiling with every other unroll step (into `scored`); those configurations."""
        assert self.variants is not None
        model = self.variants.model_for(config)
        if model is None or model.program.unroll is None:
            return []
        tiles = tuple(config.decisions[k.position] for k in model.program.knobs)
        others = [(tiles, u) for u in range(len(model.program.unroll.categories))
                  if model.config(tiles, u) not in avoid and model.config(tiles, u) != config]
        scored.update(self._score(model, [(t, u) for t, u in others if model.config(t, u) not in scored], scorer))
        return [model.config(t, u) for t, u in others if model.config(t, u) in scored]

    def _score(self, model: VariantModel, items: list[tuple[tuple[tuple[int, ...], ...], int]],
               scorer: _Scorer) -> dict[Config, float]:
        """Exact predicted scores of (tilings, unroll index) of one variant."""
        out: dict[Config, float] = {}
        for start in range(0, len(items), _SCORE_BATCH):
            chunk = items[start : start + _SCORE_BATCH]
            y = torch.tensor(model.relax.log_columns([t for t, _ in chunk]), dtype=torch.float64)
            u = torch.tensor([u for _, u in chunk])
            try:
                with torch.no_grad():
                    x, mask, rewrites = model.features.node_features(y, u)
                    scores = scorer(x, mask).tolist()
            except NotDifferentiable as err:
                self._drop(model.variant, err)
                return {}
            self.structures.update((model.variant, rw.key) for rw in rewrites)
            out.update((model.config(t, u), s) for s, (t, u) in zip(scores, chunk))
        return out

    def _drop(self, variant: Variant, err: NotDifferentiable) -> None:
        assert self.variants is not None
        self.variants.drop(variant, str(err))
        self.stats.dropped.append(str(err))

    def _explore_slots(self, q: int) -> int:
        """Random configurations in a batch of q: `explore_share` of it, rounded at random."""
        share = self.settings.explore_share * q
        return int(share) + int(self.rng.random() < share - int(share))

    def _build(self, ranked: list[Config], n: int, q: int) -> list[tuple["MeasureCandidate", Config]]:
        """The first n ranked configurations TVM builds, then random ones up to q."""
        from tvm.s_tir.meta_schedule import MeasureCandidate

        assert self.space is not None
        picked: list[tuple["MeasureCandidate", Config]] = []
        for config in ranked:
            if len(picked) >= n:
                break
            cand = self.space.schedule(config, strict=True)
            if cand is None:
                self.stats.rejected += 1
                continue
            picked.append((MeasureCandidate(cand.sch, self.args_info), config))
        short = n - len(picked)
        if len(picked) < q:
            known = set(self.observations) | self.failures | {c for _, c in self.pending} | {c for _, c in picked}
            fill = self.space.sample_candidates(q - len(picked), seed=int(self.rng.integers(2**31 - 1)), exclude=known)
            if short > 0 and fill:
                logger.info("GradientSearch %s: %d of %d picks are random (the descent found too few new "
                            "configurations)", self.stats.task, min(short, len(fill)), q)
            self.stats.random_fill += min(max(short, 0), len(fill))
            self.stats.explored += len(fill) - min(max(short, 0), len(fill))
            picked += [(MeasureCandidate(c.sch, self.args_info), c.config) for c in fill]
        return picked

def _key(score: float) -> float:
    """Sort key, best first; a non-finite score sorts last."""
    return -score if math.isfinite(score) else math.inf


def GradientSearch(cost_model: Any, **settings: Any) -> Any:  # noqa: N802 (creates the TVM class)
    """The gradient MetaSchedule search strategy through `cost_model` (a `MetaTuneCostModel`);
    keywords: the fields of `GradientSettings`."""
    return create_strategy(_GradientLogic, cost_model, **settings)
