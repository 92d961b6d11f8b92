"""MetaSchedule design spaces of a workload, and random concrete schedules drawn from them.

A design space is the trace that MetaSchedule's PostOrderApply produces for the target's
default schedule rules. Replaying that trace without its decisions re-samples every sampling
instruction (tile sizes, unroll step, compute location); the postprocessors then make it a
concrete, buildable schedule or reject it.

`KnobSpace` turns one design space into an explicit search space: one knob per sampling
instruction, a configuration is a small hashable `Config` (design-space index plus one
decision per knob). Decisions are imposed with `Trace.apply_to_schedule(...,
decision_provider=...)` and read back from the resulting trace, which is also how TVM's own
normalisation shows: an unusable compute location is silently snapped to a valid one.
`SearchSpace` joins the design spaces of a workload.
"""

from __future__ import annotations

import collections
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.env.tvm_setup import import_tensor_intrinsics
from metatune.space.parallel import build_until_accepted, collect_new, count
from metatune.space.shared_memory import shared_memory_bytes, shared_memory_limit
from metatune.space.threads import ThreadLimit, thread_axis_sized_by, thread_limits
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import Schedule, Trace
    from tvm.s_tir.meta_schedule import MeasureCandidate, TuneContext


class SpaceError(MetatuneError):
    """No design space covers a workload, or a configuration does not fit its space."""


class UnsupportedOnTarget(SpaceError):
    """TVM's own space generation fails for this workload on this target (a TVM limitation,
    e.g. conv2d_winograd on CUDA in TVM 0.27): typed, so callers can skip the workload."""


def _generate_design_spaces(context: "TuneContext", what: object) -> list["Schedule"]:
    """The task's design spaces; TVM's out-of-bounds IndexError inside space generation (its
    C++ containers' message, not a Python one) becomes `UnsupportedOnTarget`."""
    import tvm

    try:
        return list(context.space_generator.generate_design_space(context.mod))
    except IndexError as err:
        if "out of bounds" not in str(err):
            raise
        raise UnsupportedOnTarget(
            f"{what} has no MetaSchedule design space on {context.target.kind.name} (TVM "
            f"{tvm.__version__}'s space generation fails: IndexError: {err})"
        ) from err


@dataclass
class Candidate:
    """A concrete schedule after postprocessing, and which design space it came from.

    `config` is the schedule's knob configuration when a `KnobSpace` made it (normalised:
    the decisions TVM actually applied).
    """

    space_index: int
    sch: "Schedule"
    config: "Config | None" = None

    @property
    def trace(self) -> "Trace":
        return self.sch.trace

    @property
    def trace_key(self) -> str:
        """Identity of a configuration: the printed trace, decisions included."""
        return str(self.sch.trace)

    def measure_candidate(self) -> "MeasureCandidate":
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        return MeasureCandidate(self.sch, ArgInfo.from_entry_func(self.sch.mod, remove_preproc=True))


Build = Callable[[], "Candidate | None"]  # a drawn configuration, not built yet
# TVM's space generation samples as it goes, and a sampled decision may shape a space: on a CPU,
# winograd's input tile is computed at a sampled location or inlined, and the trace keeps only the
# former (measured: 1 generation in 7 differed). Generated from a fixed seed, a space is the same in
# every process, so a configuration (space index, decisions) means one schedule everywhere.
SPACE_GENERATION_SEED = 0


class DesignSpaces:
    """The design spaces of one workload on one target, with their postprocessors."""

    def __init__(self, workload: Workload, target: "tvm.target.Target") -> None:
        from tvm.s_tir import meta_schedule as ms

        import_tensor_intrinsics(target)
        self.workload = workload
        self.target = target
        self.mod = workload.irmodule()
        self.context: "TuneContext" = ms.TuneContext(
            mod=self.mod, target=target, space_generator="post-order-apply", task_name=workload.family,
            rand_state=SPACE_GENERATION_SEED,
        )
        self.spaces: list["Schedule"] = _generate_design_spaces(self.context, workload)
        self.postprocs = list(self.context.space_generator.postprocs)
        self.shared_memory_limit = shared_memory_limit(target)
        self.rejected: collections.Counter[str] = collections.Counter()
        if not self.spaces:
            raise SpaceError(f"no MetaSchedule design space covers {workload}")

    @classmethod
    def from_context(cls, context: "TuneContext", design_spaces: Sequence["Schedule"] | None = None) -> "DesignSpaces":
        """The design spaces of a MetaSchedule task (a task of a whole model has no `Workload`)."""
        self = cls.__new__(cls)
        self.workload = context.task_name or "task"  # only used in messages
        self.target, self.mod, self.context = context.target, context.mod, context
        self.spaces = list(design_spaces) if design_spaces is not None else _generate_design_spaces(context, self.workload)
        self.postprocs = list(context.space_generator.postprocs)
        self.shared_memory_limit = shared_memory_limit(context.target)
        self.rejected = collections.Counter()
        if not self.spaces:
            raise SpaceError(f"task {self.workload!r} has no design space")
        return self

    def __len__(self) -> int:
        return len(self.spaces)

    def postprocess(self, sch: "Schedule") -> str | None:
        """Apply the postprocessors in place; why the schedule is invalid, or None when it is valid.
        On a GPU a schedule whose shared buffers cannot fit a thread block is turned down first,
        for a fraction of what VerifyGPUCode's lowering costs (shared_memory.py)."""
        if self.shared_memory_limit is not None:
            size = shared_memory_bytes(sch.mod)
            if size is not None and size > self.shared_memory_limit:
                return "shared memory"
        sch.enter_postproc()
        return None if all(p.apply(sch) for p in self.postprocs) else "postprocessor"

    def replay(self, space_index: int, trace: "Trace", seed: int) -> Candidate | None:
        """Replay a design-space trace (decisions it lacks are sampled) and postprocess it."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.mod, seed=seed)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
        except (ValueError, RuntimeError) as err:
            # Some sampled decisions make a later primitive invalid (e.g. a compute location that
            # inlines a block the trace still refers to): the configuration is not in the space.
            count(self.rejected, f"replay: {error_tail(err)}")
            return None
        if (problem := self.postprocess(sch)) is not None:
            count(self.rejected, problem)
            return None
        return Candidate(space_index, sch)

    def random_candidate(self, rng: np.random.Generator) -> Candidate | None:
        """One random configuration of a random design space; None if postprocessing rejects it."""
        return self._random_draw(rng)()

    def _random_draw(self, rng: np.random.Generator) -> Build:
        """A random configuration of a random design space, to be built (and maybe rejected)."""
        from tvm.s_tir import Trace

        index = int(rng.integers(len(self.spaces)))
        blank = Trace(self.spaces[index].trace.insts, {})
        return functools.partial(self.replay, index, blank, int(rng.integers(1, 2**31 - 1)))

    def random_candidates(
        self, n: int, seed: int = 0, exclude: set[str] | None = None, max_attempts: int | None = None
    ) -> list[Candidate]:
        """Up to `n` distinct random valid configurations, skipping keys in `exclude`; at most
        `max_attempts` replays, built side by side."""
        rng = np.random.default_rng(seed)
        known = set(exclude or ())
        return collect_new(n, max_attempts or 20 * n + 100,
                           lambda k: build_until_accepted(k, lambda _: self._random_draw(rng), lambda _, c: True, tries=1),
                           key=lambda c: c.trace_key, known=known.__contains__)


# ---------------------------------------------------------------------------------------------
# Knob spaces: the sampling decisions of a design-space trace as an explicit search space

Decision = int | tuple[int, ...]

TILE = "tile"
PARTITIONED_TILE = "partitioned_tile"
CATEGORICAL = "categorical"
COMPUTE_LOCATION = "compute_location"
ANY_TILING = "any"  # a moved tile knob takes any other perfect tiling of its loop
FACTOR_MOVE = "factor"  # ... or one divisor moved from one level to another (TVM's MutateTileSize)
TILE_MOVES = (ANY_TILING, FACTOR_MOVE)
_SAMPLE_KINDS = {
    "SamplePerfectTile": TILE,
    "SamplePartitionedTile": PARTITIONED_TILE,
    "SampleCategorical": CATEGORICAL,
    "SampleComputeLocation": COMPUTE_LOCATION,
}
_ENTER_POSTPROC = "EnterPostproc"
_FAR_LOCATION = 1 << 20  # larger than any loop index: snaps to the innermost valid location
_LIMIT_DRAWS = 2000  # decision draws per sampling attempt before giving up on the thread limits


class Config(NamedTuple):
    """One point of a search space: the design-space index and one decision per knob.

    Tile decisions are factor tuples, categorical decisions are indices into the candidate
    list (as in TVM's traces), compute locations are TVM's loop index (-1 root, -2 inline).
    """

    space: int
    decisions: tuple[Decision, ...]

    def to_json(self) -> list[Any]:
        return [self.space, [list(d) if isinstance(d, tuple) else d for d in self.decisions]]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> "Config":
        space, decisions = data
        return cls(int(space), tuple(tuple(int(x) for x in d) if isinstance(d, list) else int(d) for d in decisions))


@dataclass(frozen=True)
class Knob:
    """One sampling instruction of a design-space trace."""

    position: int  # index in `Config.decisions`
    inst_index: int  # index of the sampling instruction in the design-space trace
    kind: str
    name: str
    choices: tuple[Decision, ...]  # every valid decision; empty for a conditional knob
    categories: tuple[int, ...] = ()  # categorical: the values the indices select

    @property
    def conditional(self) -> bool:
        """Valid values depend on earlier decisions (only compute locations, here)."""
        return self.kind == COMPUTE_LOCATION

    @property
    def embedding_width(self) -> int:
        if self.kind in (TILE, PARTITIONED_TILE):
            return len(self.choices[0])
        if self.kind == CATEGORICAL:
            return len(self.choices)
        return 3


@functools.lru_cache(maxsize=4096)
def perfect_tilings(extent: int, n: int, max_innermost: int = -1) -> tuple[tuple[int, ...], ...]:
    """All ordered n-factor tilings of `extent` (product == extent), innermost <= max_innermost.

    The same set TVM's SamplePerfectTile samples from (uniformly, by rejection).
    """
    if n == 1:
        return ((extent,),) if max_innermost < 0 or extent <= max_innermost else ()
    result: list[tuple[int, ...]] = []
    for first in range(1, extent + 1):
        if extent % first == 0:
            result.extend((first, *rest) for rest in perfect_tilings(extent // first, n - 1, max_innermost))
    return tuple(result)


def is_factor_move(tile: Sequence[int], other: Sequence[int]) -> bool:
    """Whether `other` is `tile` with one divisor d > 1 of one level's factor moved to one other
    level: exactly two levels differ, one divided by d and the other multiplied by it."""
    if len(tile) != len(other):
        return False
    changed = [i for i, (a, b) in enumerate(zip(tile, other)) if a != b]
    if len(changed) != 2:
        return False
    i, j = changed
    src, dst = (i, j) if other[i] < tile[i] else (j, i)
    return tile[src] % other[src] == 0 and other[dst] == tile[dst] * (tile[src] // other[src])


def error_tail(err: BaseException) -> str:
    """What a rejection is counted as: the last line of TVM's message (its first lines are the
    traceback), or the exception's type where the message is empty."""
    text = str(err).strip()
    return text.splitlines()[-1][:80] if text else type(err).__name__


def _from_numpy(value: Any) -> Any:
    """A decision with numpy integers as Python ints; anything else as it is (for `check` to judge)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, tuple) and any(isinstance(x, np.integer) for x in value):
        return tuple(int(x) if isinstance(x, np.integer) else x for x in value)
    return value


def _to_decision(value: Any) -> Decision:
    if isinstance(value, (int, np.integer)):
        return int(value)
    return tuple(int(x) for x in value)


def _trace_of(source: Any) -> "Trace":
    """A trace from a Trace, Schedule, Candidate or TuningRecord."""
    for attr in ("trace", "sch"):
        if hasattr(source, attr) and not hasattr(source, "insts"):
            return _trace_of(getattr(source, attr))
    return source


def _design_insts(trace: "Trace") -> list[Any]:
    """The trace's instructions before postprocessing."""
    insts = []
    for inst in trace.insts:
        if inst.kind.name == _ENTER_POSTPROC:
            break
        insts.append(inst)
    return insts


def _structure(insts: Sequence[Any]) -> str:
    """The trace printed without decisions and without dead instructions: equal for every replay
    of one design space, including TVM's own records of it. EvolutionarySearch stores simplified
    traces (an unused `get_consumers` dropped), which the raw design-space trace would not match."""
    from tvm.s_tir import Trace

    return str(Trace(list(insts), {}).simplified(remove_postproc=True))


def _first_block_name(stmt: Any) -> str:
    """Name of the first block below a loop (what a tile knob splits)."""
    for _ in range(1000):
        if hasattr(stmt, "block"):
            return str(stmt.block.name_hint)
        if hasattr(stmt, "seq"):
            stmt = stmt.seq[0]
        elif hasattr(stmt, "body"):
            stmt = stmt.body
        else:
            break
    return "?"


class _StopReplay(Exception):
    pass


class KnobSpace:
    """The knobs of one design space: build, read back, sample, move and embed configurations."""

    def __init__(self, spaces: DesignSpaces, index: int) -> None:
        from tvm.s_tir import Schedule

        self.spaces = spaces
        self.index = index
        self.trace: "Trace" = spaces.spaces[index].trace
        self.insts = _design_insts(self.trace)
        self.signature = _structure(self.insts)
        self.rejected: collections.Counter[str] = collections.Counter()
        self._valid_cache: dict[tuple[int, tuple[Decision, ...]], tuple[Decision, ...]] = {}
        self._move_cache: dict[tuple[int, Decision], tuple[Decision, ...]] = {}
        self._size: float | None = None
        for inst in self.insts:
            if inst.kind.name.startswith("Sample") and inst.kind.name not in _SAMPLE_KINDS:
                raise SpaceError(f"{spaces.workload}: unsupported sampling instruction {inst.kind.name}")
        knobs: list[Knob] = []
        sch = Schedule(spaces.mod)
        counter = [0]

        def record(inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
            """Reads each sampling instruction's loop/block as bound in the replayed schedule."""
            kind = _SAMPLE_KINDS.get(inst.kind.name)
            if kind is not None:
                knobs.append(self._make_knob(len(knobs), counter[0], kind, sch, inputs, attrs))
            counter[0] += 1
            return decision

        self.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=record)
        if any(k.kind != COMPUTE_LOCATION and not k.choices for k in knobs):
            raise SpaceError(f"{spaces.workload}: a knob of design space {index} has no valid value")
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._knob_at = {k.inst_index: k.position for k in knobs}
        self._choice_sets = [frozenset(k.choices) for k in knobs]
        self.limits: tuple[ThreadLimit, ...] = thread_limits(self.insts, self._knob_at)  # GPU only
        self.default = self.config_of(self.trace)

    def _make_knob(self, position: int, inst_index: int, kind: str, sch: "Schedule", inputs: Any, attrs: Any) -> Knob:
        if kind in (TILE, PARTITIONED_TILE):
            loop = sch.get(inputs[0])
            extent = int(loop.extent.value)
            n = int(attrs[0])
            if kind == TILE:
                choices = perfect_tilings(extent, n, int(attrs[1]))
            else:
                pos, factor = int(attrs[1]), int(attrs[2])
                choices = tuple(t for t in perfect_tilings(extent, n) if math.prod(t[pos:]) % factor == 0)
            name = f"tile {_first_block_name(loop)}.{loop.loop_var.name} ({extent}) into {n}"
            return Knob(position, inst_index, kind, name, choices)
        if kind == CATEGORICAL:
            categories = tuple(int(c) for c in attrs[0])
            return Knob(position, inst_index, kind, self._categorical_name(inst_index),
                        tuple(range(len(categories))), categories)
        block = sch.get(inputs[0])
        return Knob(position, inst_index, kind, f"compute location of {block.name_hint}", ())

    def _categorical_name(self, inst_index: int) -> str:
        """Categoricals feed an annotation (e.g. the unroll step): name them after its key;
        on GPUs one may size a thread-bound loop instead (AutoBind's thread count)."""
        out = self.insts[inst_index].outputs[0]
        for inst in self.insts[inst_index + 1 :]:
            uses = any(getattr(x, "same_as", None) and x.same_as(out) for x in inst.inputs)
            if inst.kind.name == "Annotate" and uses:
                return str(inst.attrs[0]).removeprefix("meta_schedule.")
        return thread_axis_sized_by(self.insts, inst_index) or f"categorical {inst_index}"

    # -- basic properties ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.knobs)

    def __repr__(self) -> str:
        return f"KnobSpace({self.spaces.workload}, space {self.index}, {len(self.knobs)} knobs)"

    @property
    def size(self) -> float:
        """Number of configurations: exact for unconditional knobs; each compute location
        counts the locations valid under the design space's own decisions (an estimate).
        Tiles outside a GPU thread limit are counted too (an upper bound there)."""
        if self._size is None:
            total = 1.0
            for knob in self.knobs:
                total *= len(self.valid_values(self.default, knob.position)) if knob.conditional else len(knob.choices)
            self._size = total
        return self._size

    # -- configuration <-> schedule ---------------------------------------------------------

    def _replay(self, decisions: Sequence[Decision | None], seed: int, stop_after: int | None = None) -> "Schedule":
        """Apply the design-space trace imposing `decisions` (None: let TVM sample)."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.spaces.mod, seed=seed)
        knob_at = self._knob_at
        counter = [0]

        def provide(inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
            i = counter[0]
            counter[0] += 1
            if stop_after is not None and i > stop_after:
                raise _StopReplay()
            position = knob_at.get(i)
            return decision if position is None else decisions[position]

        try:
            self.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
        except Exception:
            if stop_after is None or counter[0] <= stop_after + 1:
                raise
        return sch

    def decisions_of(self, trace: "Trace") -> tuple[Decision, ...]:
        """The sampling decisions recorded in a trace (normalised by TVM when applied)."""
        decisions = trace.decisions
        out = []
        for inst in _design_insts(trace):
            if inst.kind.name in _SAMPLE_KINDS:
                out.append(_to_decision(decisions[inst]))
        return tuple(out)

    def config_of(self, source: Any) -> Config:
        """The exact configuration of a trace, schedule, candidate or TuningRecord."""
        trace = _trace_of(source)
        if _structure(_design_insts(trace)) != self.signature:
            raise SpaceError(f"{self.spaces.workload}: the trace does not come from design space {self.index}")
        return Config(self.index, self.decisions_of(trace))

    def check(self, config: Config) -> str | None:
        """Why a configuration cannot be in this space (None if it may be)."""
        if config.space != self.index:
            return f"design space {config.space} is not {self.index}"
        if len(config.decisions) != len(self.knobs):
            return f"{len(config.decisions)} decisions for {len(self.knobs)} knobs"
        for knob, value, allowed in zip(self.knobs, config.decisions, self._choice_sets):
            if knob.conditional:
                if not isinstance(value, int):
                    return f"{knob.name}: {value!r} is not a loop index"
            elif not isinstance(value, (int, tuple)) or value not in allowed:
                return f"{knob.name}: {value!r} is not one of its {len(knob.choices)} choices"
        return self._limit_violation(config.decisions)

    def _limit_violation(self, decisions: Sequence[Decision | None]) -> str | None:
        for limit in self.limits:
            problem = limit.violation(decisions)
            if problem is not None:
                return problem
        return None

    def schedule(
        self, config: Config, postprocess: bool = True, strict: bool = False, seed: int = 1
    ) -> Candidate | None:
        """The concrete (postprocessed) schedule of a configuration, or None if it is invalid.

        A compute location TVM cannot use is snapped to a valid one: the returned candidate's
        `config` holds the applied decisions; with `strict`, a snapped configuration is None.
        """
        config = Config(config.space, tuple(_from_numpy(d) for d in config.decisions))
        problem = self.check(config)  # on Python ints: a decision taken from numpy is the same decision
        if problem is not None:
            count(self.rejected, f"config: {problem.split(':')[0]}")
            return None
        return self._build(config.decisions, seed, postprocess, expect=config if strict else None)

    def _build(self, decisions: Sequence[Decision | None], seed: int, postprocess: bool = True,
               expect: Config | None = None) -> Candidate | None:
        try:
            sch = self._replay(decisions, seed)
        except Exception as err:  # an invalid combination is the configuration's problem, not ours
            count(self.rejected, f"replay: {error_tail(err)}")
            return None
        config = Config(self.index, self.decisions_of(sch.trace))
        if expect is not None and config != expect:
            count(self.rejected, "snapped compute location")
            return None
        if postprocess and (problem := self.spaces.postprocess(sch)) is not None:
            count(self.rejected, problem)
            return None
        return Candidate(self.index, sch, config)

    # -- sampling and moves -----------------------------------------------------------------

    def sample(self, rng: np.random.Generator, max_attempts: int = 20) -> Candidate | None:
        """A random valid configuration: each knob uniform over its valid values, in trace
        order (compute locations are drawn by TVM among the locations valid at that point),
        redrawn until the tiles keep the GPU thread limits."""
        return build_until_accepted(1, lambda _: self.sample_draw(rng), lambda _, c: True, max_attempts)[0]

    def sample_draw(self, rng: np.random.Generator) -> Build | None:
        """A random configuration to build; None if no draw kept the thread limits."""
        decisions = self._draw(rng)
        if decisions is None:
            count(self.rejected, "thread limits")
            return None
        return functools.partial(self._build, decisions, int(rng.integers(1, 2**31 - 1)))

    def _draw(self, rng: np.random.Generator) -> list[Decision | None] | None:
        """Uniform decisions within the thread limits (a draw costs microseconds, a replay
        milliseconds); None if `_LIMIT_DRAWS` draws all break them."""
        for _ in range(_LIMIT_DRAWS if self.limits else 1):
            decisions = [None if k.conditional else k.choices[int(rng.integers(len(k.choices)))] for k in self.knobs]
            if self._limit_violation(decisions) is None:
                return decisions
        return None

    def valid_values(self, config: Config, position: int) -> tuple[Decision, ...]:
        """Valid values of a knob given the earlier decisions of `config` (sorted).

        For a compute location this replays the trace prefix once per valid location: TVM
        snaps an invalid index to the nearest valid one below, so asking for ever smaller
        indices walks the valid set downwards.
        """
        knob = self.knobs[position]
        if not knob.conditional:
            return knob.choices
        key = (position, tuple(config.decisions[:position]))
        cached = self._valid_cache.get(key)
        if cached is not None:
            return cached
        values: list[int] = []
        ask = _FAR_LOCATION
        while True:
            got = self._probe(config.decisions, position, ask)
            if got < 0 or got in values:
                break
            values.append(got)
            ask = got - 1
        values.append(-1)
        if self._probe(config.decisions, position, -2) == -2:
            values.append(-2)
        result = tuple(sorted(values))
        self._valid_cache[key] = result
        return result

    def _probe(self, decisions: Sequence[Decision], position: int, value: int) -> int:
        """The location TVM applies for `value` at knob `position` (replays only the prefix)."""
        asked = list(decisions)
        asked[position] = value
        inst_index = self.knobs[position].inst_index
        sch = self._replay(asked, seed=1, stop_after=inst_index)
        insts = sch.trace.insts
        return int(sch.trace.decisions[insts[inst_index]])

    def neighbour(self, config: Config, rng: np.random.Generator, max_attempts: int = 20,
                  changes: int = 1) -> Candidate | None:
        """A valid configuration that differs from `config` in `changes` knobs (one by default;
        all of them if the space has fewer): a move of a mutation chain in one build.

        Changing a tile can make a later compute location invalid; TVM then snaps it, so the
        result may also differ in such a conditional knob (its `config` says exactly how).
        """
        return build_until_accepted(1, lambda _: self.neighbour_draw(config, rng, changes),
                                    lambda _, cand: cand.config != config, max_attempts)[0]

    def neighbour_draw(self, config: Config, rng: np.random.Generator, changes: int = 1,
                       tile_moves: str = ANY_TILING) -> Build | None:
        """A move of `changes` knobs of `config`, to build; None if the draw changed nothing.
        `tile_moves` says how far a tile knob moves (`TILE_MOVES`)."""
        decisions = list(config.decisions)
        for position in self._positions(rng, changes):  # in trace order: a location sees the tiles before it
            try:
                options = self._other_values(Config(config.space, tuple(decisions)), position, tile_moves)
            except (ValueError, RuntimeError) as err:  # a location probed after a changed one may not replay
                count(self.rejected, f"replay: {error_tail(err)}")
                return None
            if options:
                decisions[position] = options[int(rng.integers(len(options)))]
        if tuple(decisions) == tuple(config.decisions):
            return None
        return functools.partial(self._build, decisions, int(rng.integers(1, 2**31 - 1)))

    def _positions(self, rng: np.random.Generator, changes: int) -> list[int]:
        """`changes` distinct knob positions drawn uniformly (at most every knob), sorted."""
        chosen: list[int] = []
        while len(chosen) < min(changes, len(self.knobs)):
            position = int(rng.integers(len(self.knobs)))
            if position not in chosen:
                chosen.append(position)
        return sorted(chosen)

    def _other_values(self, config: Config, position: int, tile_moves: str = ANY_TILING) -> Sequence[Decision]:
        """The values knob `position` could take instead of its current one, within the limits."""
        knob = self.knobs[position]
        current = config.decisions[position]
        if knob.conditional:
            return [v for v in self.valid_values(config, position) if v != current]
        choices = self._factor_moves(position, current) if tile_moves == FACTOR_MOVE and knob.kind == TILE \
            else knob.choices
        return [c for c in choices if c != current and self._keeps_limits(config, position, c)]

    def _factor_moves(self, position: int, tile: Decision) -> tuple[Decision, ...]:
        """The tilings one MutateTileSize step away from `tile`: a divisor d > 1 of one level's
        factor moved to another level, the other levels unchanged."""
        key = (position, tile)
        cached = self._move_cache.get(key)
        if cached is None:
            cached = tuple(c for c in self.knobs[position].choices if is_factor_move(tile, c))  # type: ignore[arg-type]
            self._move_cache[key] = cached
        return cached

    def _keeps_limits(self, config: Config, position: int, value: Decision) -> bool:
        if not self.limits:
            return True
        decisions = list(config.decisions)
        decisions[position] = value
        return self._limit_violation(decisions) is None

    # -- numeric embedding ------------------------------------------------------------------

    @property
    def embedding_dim(self) -> int:
        return sum(k.embedding_width for k in self.knobs)

    def embedding_names(self) -> list[str]:
        names: list[str] = []
        for k in self.knobs:
            if k.kind in (TILE, PARTITIONED_TILE):
                names += [f"{k.name}: log2 factor {i}" for i in range(k.embedding_width)]
            elif k.kind == CATEGORICAL:
                names += [f"{k.name} = {c}" for c in k.categories]
            else:
                names += [f"{k.name}: inline", f"{k.name}: root", f"{k.name}: log2(2 + loop index)"]
        return names

    def embed(self, config: Config) -> np.ndarray:
        """Numbers for Bayesian optimisation: log2 tile factors, one-hot categoricals, and
        (inline, root, log2(2 + loop index)) for compute locations."""
        out = np.zeros(self.embedding_dim, dtype=np.float64)
        i = 0
        for knob, value in zip(self.knobs, config.decisions):
            if knob.kind in (TILE, PARTITIONED_TILE):
                out[i : i + len(value)] = np.log2(np.asarray(value, dtype=np.float64))  # type: ignore[arg-type]
            elif knob.kind == CATEGORICAL:
                out[i + int(value)] = 1.0  # type: ignore[arg-type]
            else:
                loc = int(value)  # type: ignore[arg-type]
                out[i : i + 3] = (loc == -2, loc == -1, math.log2(2 + loc) if loc >= 0 else 0.0)
            i += knob.embedding_width
        return out


class SearchSpace:
    """All design spaces of a workload as one knob space (configurations carry their space)."""

    def __init__(self, spaces: DesignSpaces) -> None:
        self.spaces = spaces
        self.knob_spaces = [KnobSpace(spaces, i) for i in range(len(spaces))]

    def __len__(self) -> int:
        return len(self.knob_spaces)

    def __getitem__(self, index: int) -> KnobSpace:
        return self.knob_spaces[index]

    @property
    def size(self) -> float:
        return sum(k.size for k in self.knob_spaces)

    def _space(self, config: Config) -> KnobSpace:
        if not 0 <= config.space < len(self.knob_spaces):
            raise SpaceError(f"{self.spaces.workload} has no design space {config.space}")
        return self.knob_spaces[config.space]

    def schedule(self, config: Config, postprocess: bool = True, strict: bool = False) -> Candidate | None:
        """The schedule of a configuration of any design space; None if it is invalid."""
        if not 0 <= config.space < len(self.knob_spaces):
            return None
        return self.knob_spaces[config.space].schedule(config, postprocess=postprocess, strict=strict)

    def config_of(self, source: Any) -> Config:
        """The configuration of a trace/schedule/candidate/TuningRecord of any design space."""
        trace = _trace_of(source)
        signature = _structure(_design_insts(trace))
        for ks in self.knob_spaces:
            if ks.signature == signature:
                return Config(ks.index, ks.decisions_of(trace))
        raise SpaceError(f"{self.spaces.workload}: the trace matches none of its {len(self)} design spaces")

    def sample(self, rng: np.random.Generator) -> Candidate | None:
        """A random valid configuration of a uniformly chosen design space."""
        return self.samples(rng, 1)[0]

    def samples(self, rng: np.random.Generator, n: int, tries: int = 20) -> list[Candidate | None]:
        """`n` random valid configurations, each of a uniformly chosen design space (None where
        `tries` draws all failed), built side by side."""
        spaces = [self.knob_spaces[int(rng.integers(len(self.knob_spaces)))] for _ in range(n)]
        return build_until_accepted(n, lambda slot: spaces[slot].sample_draw(rng), lambda _, c: True, tries)

    def sample_candidates(self, n: int, seed: int = 0, exclude: set[Config] | None = None,
                          max_attempts: int | None = None) -> list[Candidate]:
        """Up to `n` distinct random valid configurations, skipping those in `exclude`; at most
        `max_attempts` samples (each up to 20 draws)."""
        rng = np.random.default_rng(seed)
        known = set(exclude or ())
        return collect_new(n, max_attempts or 4 * n + 20, lambda k: self.samples(rng, k),
                           key=lambda c: c.config, known=known.__contains__)

    def neighbour(self, config: Config, rng: np.random.Generator, changes: int = 1) -> Candidate | None:
        return self.neighbours([(config, changes)], rng)[0]

    def neighbours(self, moves: Sequence[tuple[Config, int]], rng: np.random.Generator,
                   tries: int = 20, tile_moves: str = ANY_TILING) -> list[Candidate | None]:
        """A valid neighbour per (configuration, knobs to change) (None where `tries` draws all
        failed), built side by side; `tile_moves` as in `KnobSpace.neighbour_draw`."""
        if tile_moves not in TILE_MOVES:
            raise ValueError(f"tile_moves must be one of {', '.join(TILE_MOVES)}, not {tile_moves!r}")

        def draw(slot: int) -> Build | None:
            config, changes = moves[slot]
            return self._space(config).neighbour_draw(config, rng, changes, tile_moves)

        return build_until_accepted(len(moves), draw, lambda slot, cand: cand.config != moves[slot][0], tries)

    @property
    def embedding_dim(self) -> int:
        return len(self.knob_spaces) + max(k.embedding_dim for k in self.knob_spaces)

    def embed(self, config: Config) -> np.ndarray:
        """One-hot design space, then that space's embedding zero-padded to a common width."""
        out = np.zeros(self.embedding_dim, dtype=np.float64)
        out[config.space] = 1.0
        emb = self._space(config).embed(config)
        out[len(self.knob_spaces) : len(self.knob_spaces) + len(emb)] = emb
        return out
