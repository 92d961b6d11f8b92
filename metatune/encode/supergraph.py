"""Loop graphs and the super-graph template (MetaTune §3).

A program's *loop graph* has a `root` node, one `for` node per loop and one `interval` node
per loop carrying that loop's context features (features.py); edges go root->for and
for->for along the nesting, and for->interval (node numbering, rows and edge order: layout.py).

The *super-graph template* is the union of the loop graphs of every supported family and
design space. Each loop of a program is put in a slot named by the role of the block it
belongs to and the role of the loop in that block:
    main/S1.2        the multi-level-tiled block, spatial axis 1 counted from the innermost
                     (S0 is the fastest-varying output axis), tile level 2
    main.init/S0.3   the same loop copied by decompose_reduction for the init block
    main/R0.1        reduction axis 0 (innermost), tile level 1
    main.write/a1    the main block's cache-write stage, its axis 1
    pad/i2           the padding stage (pad_temp, data_pad, PaddedInput), axis i2
    G/j.0            other stages keep their block and axis names (Relax's `lv88_red` is `lv_red`)

Roles come from MetaSchedule's naming: `split` names loops `<axis>_<level>`, `fuse` names
them `<a>_<b>_fused` (a fused loop takes the slot of its innermost constituent; the other
constituents' slots stay empty), compute-at stages get loops `ax<i>` for their axis i, and
`decompose_reduction` copies loops with the suffix `_init`. Slots that a program does not use
are null nodes: zero features and mask 0. The template's edges are fixed (a chain per block
role, init chains hanging below the last loop before the first reduction loop), so every
augmented graph has the same nodes and edges; `edge_mask` says which template edges are
real nesting edges of the program. Where a stage is attached (compute location) shows in
its loops' top-down products rather than in the edges.

A loop named `ax<i>` is ambiguous (compute-at names loops after the axis position, Relax and
rfactor name variables `ax<k>` at other positions): when it drives exactly one iteration
variable of its block, the block's binding decides its axis.

The template is probed from TEMPLATE_WORKLOADS and every task of the device kind's `models` (networks
whose Relax tasks, pooling to rfactored classifiers, `tune --model` meets) on every CPU
target class (target.CPU_TARGET_CLASSES: design spaces differ with vector width and ISA), so a
model trained on one machine encodes programs for any of them. Another device kind adds its
target classes to the probe and, where its stages are new, a role to `block_family_role` (GPU
cache-read/write stages `X_shared`/`X_local`; thread-bound loops already parse as split/fused
loops, their binding needs a loop-kind feature beside serial/parallel/vectorized/unrolled), then
rebuilds: one template version for all.

The template is a reviewed, versioned definition (template.json, generated data shipped with the
package); its version is a hash of its definition. A program with a loop that has no slot raises
`TemplateMismatch` naming the slot: add a workload that produces it to TEMPLATE_WORKLOADS and
rebuild with `python -m metatune.encode.supergraph --rebuild` (a new version: retrain models).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.encode import layout
from metatune.encode.features import (
    ALL_FEATURE_NAMES,
    FEATURE_NAMES,
    NUM_BUFFER_SLOTS,
    buffer_slots,
    loop_features,
    owners,
)
from metatune.encode.loopgraph import Block, LoopProgram, extract
from metatune.env.target import CPU_TARGET_CLASSES, GPU_TARGET_CLASSES
from metatune.space.knob_space import DesignSpaces, SearchSpace
from metatune.workload.model_source import ModelSource
from metatune.workload.operators import Workload
from metatune.workload.relax_tasks import extract_tasks, import_model, task_context

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

    from metatune.space.knob_space import SearchSpace

TEMPLATE_FORMAT = 1


@dataclass(frozen=True)
class DeviceKind:
    """A kind of device whose programs share one super-graph template.

    CPU and GPU programs have little in common (a GPU kernel's outer loops are bound to thread
    blocks and threads, its inputs staged through shared memory, its main block tiled
    SSSRRSRS instead of SSRSRS), so each kind has its own template and features; within a kind
    every target class is probed, so a model encodes the programs of any machine of that kind.
    """

    name: str
    template_file: str
    targets: tuple[Any, ...]  # target classes probed (a TVM target config or tag each)
    features: tuple[str, ...]
    tiling: str  # MetaSchedule's multi-level tiling structure of the main block
    models: tuple[str, ...]  # networks whose Relax tasks are probed too

    @property
    def template_path(self) -> Path:
        return Path(__file__).with_name(self.template_file)


DEVICE_KINDS: dict[str, DeviceKind] = {
    "cpu": DeviceKind("cpu", "template.json", tuple(CPU_TARGET_CLASSES.values()), FEATURE_NAMES, "SSRSRS",
                      ("resnet18", "tinycnn")),
    "cuda": DeviceKind("cuda", "template-cuda.json", tuple(GPU_TARGET_CLASSES.values()), ALL_FEATURE_NAMES,
                       "SSSRRSRS", ("resnet18", "tinycnn")),
}
_KIND_OF_TARGET = {"llvm": "cpu", "cuda": "cuda"}
TEMPLATE_PATH = DEVICE_KINDS["cpu"].template_path


def device_kind(target: Any) -> DeviceKind:
    """The device kind of a TVM target (or a kind name): which template encodes its programs."""
    name = target if isinstance(target, str) else str(target.kind.name)
    kind = DEVICE_KINDS.get(name) or DEVICE_KINDS.get(_KIND_OF_TARGET.get(name, ""))
    if kind is None:
        raise TemplateMismatch(f"metatune has no super-graph template for {name} targets: it encodes CPU (llvm) "
                               "and NVIDIA GPU (cuda) programs")
    return kind
REBUILD_HINT = (
    "add a workload that produces it to TEMPLATE_WORKLOADS in metatune/encode/supergraph.py and run "
    "`python -m metatune.encode.supergraph --rebuild` (this changes template_version: models trained "
    "on the old template must be retrained)"
)

# One small shape per family: the design spaces (not the shapes) decide the loop structure.
TEMPLATE_WORKLOADS = (
    "conv1d:n=1,c=16,l=64,k=16,r=3,stride=1,pad=1",
    "conv1d_transpose:n=1,c=16,l=32,k=8,r=4,stride=2,pad=1",
    "conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=2,pad=1",
    "conv2d_transpose:n=1,c=8,h=7,w=7,k=8,r=4,s=4,stride=2,pad=1",
    "conv2d_winograd:n=1,c=8,h=8,w=8,k=8,r=3,s=3,stride=1,pad=1",
    "depthwise_conv2d:n=1,c=8,h=14,w=14,r=3,s=3,stride=1,pad=1",
    "dense:m=16,n=32,k=24",
    "dense_bias_relu:m=16,n=32,k=24",
    "batch_matmul:b=2,m=16,n=8,k=24",
    # Relax's fused conv and linear tasks, listed last: roles are laid out in order of first
    # appearance, so only the `epilogue` role they share grows and every other slot keeps its index.
    "conv2d_bias:n=1,c=8,h=14,w=14,k=16,r=1,s=1,stride=2,pad=0",
    "conv2d_bias_relu:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=1,pad=1",
    "conv2d_bias_add_relu:n=1,c=8,h=14,w=14,k=8,r=3,s=3,stride=1,pad=1",
    "dense_bias:m=16,n=32,k=24",
)
# Block roles shared across families.
_PAD_BLOCKS = {"pad_temp", "data_pad", "PaddedInput"}
_EPILOGUE = re.compile(r"^(compute(_\d+)?|T_relu|T_add)$")
# Relax names some blocks after the variable they compute (`lv88_red`): the number is not a role.
_RELAX_VAR = re.compile(r"^lv\d+(?=_)")


def block_family_role(family: str) -> str:
    """The role of a block family that is not the main block or its cache-write stage."""
    if family in _PAD_BLOCKS:
        return "pad"
    if _EPILOGUE.match(family):
        return "epilogue"
    return _RELAX_VAR.sub("lv", family)


class TemplateMismatch(MetatuneError):
    """A program whose loop structure does not fit the super-graph template."""


# ---------------------------------------------------------------------------------------------
# Roles


@dataclass(frozen=True)
class LoopRole:
    block: str  # block role, e.g. "main", "pad"
    init: bool
    axis: str  # e.g. "S1", "R0", "i2"
    levels: tuple[int, ...]
    source: str = ""  # init copies of another block's loop: that block's role

    @property
    def slot(self) -> str:
        axis = f"{self.source}:{self.axis}" if self.source else self.axis
        return f"{self.block}{'.init' if self.init else ''}/{axis}" + "".join(f".{x}" for x in self.levels)


def _strip_iter_name(name: str) -> str:
    stripped = name[2:] if name.startswith("v_") else name[1:] if name.startswith("v") else name
    return f"a{stripped}" if stripped.isdigit() else stripped


def axis_roles(block: Block, main: bool) -> list[str]:
    """Role of each iteration variable: S<k>/R<k> (k counted from the innermost) for the main
    block, the variable's own name otherwise."""
    if not main:
        return [_strip_iter_name(n) for n in block.iter_names]
    n_spatial = sum(1 for r in block.iter_reduce if not r)
    n_reduce = len(block.iter_reduce) - n_spatial
    roles, s, r = [], 0, 0
    for red in block.iter_reduce:
        if red:
            roles.append(f"R{n_reduce - 1 - r}")
            r += 1
        else:
            roles.append(f"S{n_spatial - 1 - s}")
            s += 1
    return roles


def block_roles(program: LoopProgram) -> dict[str, str]:
    """Block family -> role; raises when two families would share a role."""
    families = list(dict.fromkeys(b.family for b in program.blocks))
    tiled = list(dict.fromkeys(b.family for b in program.blocks if b.tiled))
    if len(tiled) > 1:
        raise TemplateMismatch(
            f"blocks {', '.join(tiled)} are all multi-level tiled; the template has one main block: {REBUILD_HINT}"
        )
    main = tiled[0] if tiled else None
    main_reads = _main_reads(program, main)
    roles: dict[str, str] = {}
    for fam in families:
        if fam == main:
            role = "main"
        elif main is not None and fam in (f"{main}_global", f"{main}_local"):
            role = "main.write"  # the cache-write stage: global on CPUs, registers on GPUs
        elif fam in main_reads:
            role = f"main.read{main_reads.index(fam)}.{fam.rsplit('_', 1)[1]}"  # a GPU cache-read stage
        else:
            role = block_family_role(fam)
        roles[fam] = role
    seen: dict[str, str] = {}
    for fam, role in roles.items():
        if role in seen:
            raise TemplateMismatch(f"blocks {seen[role]} and {fam} would both take block role {role!r}: {REBUILD_HINT}")
        seen[role] = fam
    return roles


_CACHE_READ = re.compile(r"_(shared|local)$")


def _main_reads(program: LoopProgram, main: str | None) -> list[str]:
    """The main block's distinct inputs in order, when they are cache-read stages (`data_shared`):
    such a stage is named after the buffer it copies, so its role is the input's position instead."""
    block = next((b for b in program.blocks if b.family == main and not b.is_init), None)
    names = list(dict.fromkeys(a.buffer for a in block.reads)) if block is not None else []
    return [n if _CACHE_READ.search(n) else "" for n in names]


@dataclass
class _Vocabulary:
    """Loop-name tokens of one block family: its axis names and ax<i> aliases -> axis role."""

    roles: dict[str, str]
    keys: tuple[str, ...]  # longest first
    parsed: dict[str, tuple[bool, str, tuple[int, ...]]] = field(default_factory=dict)


def _vocabulary(block: Block, main: bool) -> _Vocabulary:
    roles: dict[str, str] = {}
    for i, (name, role) in enumerate(zip(block.iter_names, axis_roles(block, main))):
        # te names a loop `x` and its block variable `v_x`; rfactor names the variable `vx`.
        roles[_var_key(name)] = role
        roles[f"ax{i}"] = role
    # A variable `v0` gives the key "0": never a loop-name token (its loops are `ax0`), while a
    # split level "_0" is, so digit-only keys are left out.
    keys = [k for k in roles if not k.isdigit()]
    return _Vocabulary(roles, tuple(sorted(keys, key=len, reverse=True)))


def _var_key(name: str) -> str:
    return name[2:] if name.startswith("v_") else name[1:] if name.startswith("v") else name


_AX_LOOP = re.compile(r"^ax\d+((_\d+)*)(_init)?$")


def _bound_role(loop: Any, block: Block, main: bool) -> tuple[bool, str, tuple[int, ...]] | None:
    """The role of an `ax<i>` loop read from the block's bindings when it drives exactly one
    iteration variable. Needed because `ax<i>` is ambiguous: compute-at names loops after the
    axis position, while Relax and rfactor also name variables `ax<k>` at other positions."""
    match = _AX_LOOP.match(loop.name)
    if match is None or not block.iter_loops:
        return None
    driven = [i for i, loops in enumerate(block.iter_loops) if loop.var in loops]
    if len(driven) != 1:
        return None
    levels = tuple(int(x) for x in match.group(1).split("_") if x)
    return match.group(3) is not None, axis_roles(block, main)[driven[0]], levels


def parse_loop_name(name: str, vocab: _Vocabulary) -> tuple[bool, str, tuple[int, ...]] | None:
    """(init copy?, axis role, split levels) of a MetaSchedule loop name, None if unparseable."""
    cached = vocab.parsed.get(name)
    if cached is not None:
        return cached
    init = name.endswith("_init")
    text = name[:-5] if init else name
    items: list[tuple[str, list[int]]] = []
    p, n = 0, len(text)
    while p < n:
        if text[p] == "_":
            p += 1
            continue
        key = next(
            (k for k in vocab.keys if text.startswith(k, p) and (p + len(k) == n or text[p + len(k)] == "_")), None
        )
        if key is not None:
            items.append((vocab.roles[key], []))
            p += len(key)
            continue
        if text.startswith("fused", p) and (p + 5 == n or text[p + 5] == "_") and items:
            items = [items[-1]]  # a fused loop takes the slot of its innermost constituent
            p += 5
            continue
        q = p
        while q < n and text[q].isdigit():
            q += 1
        if q > p and items and (q == n or text[q] == "_"):
            items[-1][1].append(int(text[p:q]))
            p = q
            continue
        return None
    if len(items) != 1:
        return None
    result = (init, items[0][0], tuple(items[0][1]))
    vocab.parsed[name] = result
    return result


class RoleCache:
    """Vocabularies by (family, axis names) so repeated programs parse each name once."""

    def __init__(self) -> None:
        self.vocabularies: dict[tuple[Any, ...], _Vocabulary] = {}

    def roles(self, program: LoopProgram, owner: Sequence[int]) -> list[LoopRole | str]:
        """Each loop's role, or an error message for loops whose name cannot be parsed.

        A loop `x_init` made by decompose_reduction is a copy of the update block's loop `x`
        at the same place below the decomposition point: it takes that loop's role, in the
        init block (`kernel_pack.init/main:S1.2` when it copies a main-block loop).
        """
        broles = block_roles(program)
        loops = program.loops
        reference: dict[str, Block] = {}
        for b in program.blocks:  # the family member with the most axes names them all
            ref = reference.get(b.family)
            if ref is None or len(b.iter_names) > len(ref.iter_names):
                reference[b.family] = b
        copies = _init_copies(program)
        out: list[LoopRole | str] = [""] * len(loops)
        for loop in loops:
            if loop.index in copies:
                continue
            block = program.blocks[owner[loop.index]]
            ref = reference[block.family]
            role = broles[block.family]
            key = (role, ref.iter_names, ref.iter_reduce)
            vocab = self.vocabularies.get(key)
            if vocab is None:
                vocab = self.vocabularies[key] = _vocabulary(ref, role == "main")
            own_axes = block.iter_names == ref.iter_names and block.iter_reduce == ref.iter_reduce
            parsed = (_bound_role(loop, block, role == "main") if own_axes else None) or parse_loop_name(loop.name, vocab)
            if parsed is None:
                out[loop.index] = (
                    f"loop {loop.name!r} of block {block.name!r} is not a MetaSchedule split/fuse/compute-at "
                    f"name over its axes {sorted(vocab.roles)}"
                )
            else:
                out[loop.index] = LoopRole(role, parsed[0], parsed[1], parsed[2])
        for copy, original in copies.items():
            src = out[original]
            if isinstance(src, str):
                out[copy] = src
                continue
            own = broles[program.blocks[owner[copy]].family]
            out[copy] = LoopRole(own, True, src.axis, src.levels, "" if src.block == own else src.block)
        return out


def _init_copies(program: LoopProgram) -> dict[int, int]:
    """init-block loop -> the update-block loop it copies (matched by name, in order)."""
    loops = program.loops
    result: dict[int, int] = {}
    for ib in program.blocks:
        if not ib.is_init:
            continue
        ub = next((b for b in program.blocks if b.family == ib.family and not b.is_init), None)
        if ub is None:
            continue
        common = 0
        while common < min(len(ib.chain), len(ub.chain)) and ib.chain[common] == ub.chain[common]:
            common += 1
        originals = ub.chain[common:]
        j = 0
        for li in ib.chain[common:]:
            name = loops[li].name
            if not name.endswith("_init"):
                continue
            while j < len(originals) and loops[originals[j]].name != name[:-5]:
                j += 1
            if j < len(originals):
                result[li] = originals[j]
                j += 1
    return result


# ---------------------------------------------------------------------------------------------
# The template


@dataclass(frozen=True)
class Template:
    """Slots (one `for` and one `interval` node each) and their fixed parent slots."""

    slots: tuple[str, ...]
    parents: tuple[int, ...]  # parent slot index, -1 for the root
    features: tuple[str, ...] = FEATURE_NAMES
    built_from: tuple[str, ...] = ()

    @property
    def definition(self) -> dict[str, Any]:
        return {
            "format": TEMPLATE_FORMAT,
            "features": list(self.features),
            "slots": [[s, self.slots[p] if p >= 0 else "root"] for s, p in zip(self.slots, self.parents)],
        }

    @property
    def version(self) -> str:
        text = json.dumps(self.definition, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    @property
    def num_nodes(self) -> int:
        return layout.num_nodes(len(self.slots))

    @property
    def num_edges(self) -> int:
        return layout.num_edges(len(self.slots))

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, **self.definition, "built_from": list(self.built_from)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Template":
        if data.get("format") != TEMPLATE_FORMAT:
            raise TemplateMismatch(f"super-graph template format {data.get('format')} is not {TEMPLATE_FORMAT}")
        names = [s for s, _ in data["slots"]]
        index = {s: i for i, s in enumerate(names)}
        if len(index) != len(names):
            raise TemplateMismatch("super-graph template lists a slot twice")
        parents = []
        for i, (name, parent) in enumerate(data["slots"]):
            p = -1 if parent == "root" else index.get(parent, i)
            if p >= i:
                raise TemplateMismatch(f"super-graph template slot {name!r} has parent {parent!r}, not an earlier slot")
            parents.append(p)
        unknown = [f for f in data["features"] if f not in ALL_FEATURE_NAMES]
        if unknown:
            raise TemplateMismatch(f"super-graph template uses features this encoder does not compute: {unknown}")
        tpl = cls(tuple(names), tuple(parents), tuple(data["features"]), tuple(data.get("built_from", ())))
        if "version" in data and data["version"] != tpl.version:
            raise TemplateMismatch(
                f"super-graph template says version {data['version']} but its definition hashes to {tpl.version}: "
                "it was edited by hand; rebuild it with `python -m metatune.encode.supergraph --rebuild`"
            )
        return tpl

    @classmethod
    def load(cls, path: Path | None = None) -> "Template":
        """The shipped CPU template, or one saved at `path`."""
        return cls.from_json(json.loads((path or TEMPLATE_PATH).read_text()))

    @classmethod
    def for_target(cls, target: Any) -> "Template":
        """The shipped template of a target's (or a kind name's) device kind."""
        return _shipped(device_kind(target).name)

    @classmethod
    def by_version(cls, version: str) -> "Template":
        """The shipped template with this version (a checkpoint names the one it was trained on)."""
        for kind in DEVICE_KINDS.values():
            if kind.template_path.exists() and _shipped(kind.name).version == version:
                return _shipped(kind.name)
        shipped = ", ".join(f"{k} {_shipped(k).version}" for k, kind in DEVICE_KINDS.items()
                            if kind.template_path.exists())
        raise TemplateMismatch(f"super-graph template {version} is not one this code ships ({shipped})")

    def save(self, path: Path | None = None) -> None:
        (path or TEMPLATE_PATH).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    def without(self, slot: str) -> "Template":
        """The template minus one slot (its children re-hung on its parent): for tests."""
        i = self.slots.index(slot)
        keep = [j for j in range(len(self.slots)) if j != i]
        remap = {j: k for k, j in enumerate(keep)}
        parents = []
        for j in keep:
            p = self.parents[j]
            p = self.parents[i] if p == i else p
            parents.append(remap.get(p, -1))
        return Template(tuple(self.slots[j] for j in keep), tuple(parents), self.features, self.built_from)


@functools.lru_cache(maxsize=None)
def _shipped(kind: str) -> Template:
    path = DEVICE_KINDS[kind].template_path
    if not path.exists():
        raise TemplateMismatch(f"no super-graph template is shipped for {kind} programs ({path.name} is missing): "
                               f"build it with `python -m metatune.encode.supergraph --rebuild --kind {kind}`")
    return Template.load(path)


# ---------------------------------------------------------------------------------------------
# Building the template from observed programs


def _axis_index(axis: str) -> int:
    return int(axis[1:]) if axis[1:].isdigit() else 0


def _tile_stages(tiling: str) -> dict[str, tuple[int, ...]]:
    """Position in the loop nest of each tile level of spatial and reduction axes:
    SSRSRS gives S levels at (0, 1, 3, 5) and R levels at (2, 4)."""
    return {kind: tuple(i for i, c in enumerate(tiling) if c == kind) for kind in "SR"}


def _slot_key(role: str, axis: str, levels: tuple[int, ...], axis_order: dict[str, int],
              stages: dict[str, tuple[int, ...]]) -> tuple[Any, ...]:
    if role == "main":
        level = levels[0] if levels else 99
        order = stages["S" if axis.startswith("S") else "R"]
        stage = order[level] if level < len(order) else 10 + level
        return (stage, -_axis_index(axis), levels)  # outer axes (larger k) first
    return (levels[0] if levels else 50, levels, axis_order[axis])


@dataclass
class _RoleObservation:
    axes: dict[str, bool] = field(default_factory=dict)  # axis role -> ever a reduction; first-seen order
    spatial: set[str] = field(default_factory=set)  # axes ever data-parallel (rfactor swaps them)
    levels: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)
    reduction: bool = False
    init_sources: set[str] = field(default_factory=set)  # roles whose loops its init copies


def observe(programs: Iterable[LoopProgram]) -> dict[str, _RoleObservation]:
    """Block roles, their axes and the split levels seen in a set of programs (in order)."""
    cache = RoleCache()
    seen: dict[str, _RoleObservation] = {}
    for program in programs:
        owner = owners(program)
        broles = block_roles(program)
        for b in program.blocks:
            obs = seen.setdefault(broles[b.family], _RoleObservation())
            for axis, red in zip(axis_roles(b, broles[b.family] == "main"), b.iter_reduce):
                obs.axes[axis] = obs.axes.get(axis, False) or red
                obs.levels.setdefault(axis, set())
                if not red:
                    obs.spatial.add(axis)
            obs.reduction |= b.is_reduction
        for loop, role in zip(program.loops, cache.roles(program, owner)):
            if isinstance(role, str):
                raise TemplateMismatch(role)
            if role.source:
                seen[role.block].init_sources.add(role.source)
            else:
                seen[role.block].levels.setdefault(role.axis, set()).add(role.levels)
    return seen


def template_from_observations(seen: dict[str, _RoleObservation], built_from: Sequence[str] = (),
                               kind: DeviceKind = DEVICE_KINDS["cpu"]) -> Template:
    """Slots for every observed axis at every level its role can have, plus init copies.

    Generalises beyond what was observed so that other shapes fit: the main block gets the
    full grid of observed axes x observed tile levels; other stages get each axis unsplit
    and split in two (parallel/vectorize rewriting fuses and splits root-level stages). An
    init block gets a copy of each spatial slot of its block, and when it was seen copying
    another block's loops (a stage decomposed inside the main nest), a copy of every slot of
    that block and of the main block.
    """
    chains: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    orders: dict[str, dict[str, int]] = {}
    stages = _tile_stages(kind.tiling)
    for role, obs in seen.items():
        axis_order = {a: i for i, a in enumerate(obs.axes)}
        for axis in obs.levels:  # axes seen only through loop names
            axis_order.setdefault(axis, len(axis_order))
        wanted: set[tuple[str, tuple[int, ...]]] = set()
        if role == "main":
            for letter in ("S", "R"):
                axes = [a for a in obs.axes if a.startswith(letter)]
                levels = set().union(*(obs.levels.get(a, set()) for a in axes)) if axes else set()
                wanted |= {(a, lv) for a in axes for lv in levels}
        else:
            for axis in obs.axes:
                wanted |= {(axis, lv) for lv in obs.levels.get(axis, set()) | {(), (0,), (1,)}}
        chains[role] = sorted(wanted, key=lambda al: _slot_key(role, al[0], al[1], axis_order, stages))
        orders[role] = axis_order
    slots: list[str] = []
    parents: list[int] = []
    for role, obs in seen.items():
        order = chains[role]
        first = len(slots)
        for i, (axis, lv) in enumerate(order):
            slots.append(LoopRole(role, False, axis, lv).slot)
            parents.append(-1 if i == 0 else first + i - 1)
        if not obs.reduction:
            continue
        reduce_axes = {a for a, red in obs.axes.items() if red}
        first_reduce = next((i for i, (a, _) in enumerate(order) if a in reduce_axes), None)
        hang = -1 if not first_reduce else first + first_reduce - 1
        copies = []
        sources = obs.init_sources | ({"main"} if obs.init_sources and role != "main" else set())
        for src in (r for r in seen if r in sources):  # outer stages' loops come first
            copies += [LoopRole(role, True, a, lv, src).slot for a, lv in chains[src]]
        # The main block is decomposed at its first reduction loop: only deeper loops are copied.
        own = order[first_reduce:] if role == "main" and first_reduce is not None else order
        copies += [LoopRole(role, True, a, lv).slot for a, lv in own if a in obs.spatial]
        for i, name in enumerate(copies):
            slots.append(name)
            parents.append(hang if i == 0 else len(slots) - 2)
    return Template(tuple(slots), tuple(parents), kind.features, tuple(built_from))


def _space_programs(space: "SearchSpace", rng: np.random.Generator, samples_per_space: int) -> list[LoopProgram]:
    """Postprocessed programs of every design space: its own decisions, every stage at root,
    and a few random configurations."""
    programs: list[LoopProgram] = []
    for ks in space.knob_spaces:
        at_root = ks.default._replace(
            decisions=tuple(-1 if k.conditional else d for k, d in zip(ks.knobs, ks.default.decisions))
        )
        cands = [ks.schedule(at_root), ks.schedule(ks.default)]
        cands += [ks.sample(rng) for _ in range(samples_per_space)]
        programs += [extract(c.sch.mod["main"]) for c in cands if c is not None]
    return programs


def model_task_spaces(model_name: str, target: Any) -> list[tuple[str, "SearchSpace"]]:
    """(task name, knob spaces) of every task Relax extracts from a network for `target`."""

    tasks = extract_tasks(import_model(ModelSource.parse(model_name)).mod, target)
    return [(t.task_name, SearchSpace(DesignSpaces.from_context(task_context(t, target)))) for t in tasks]


def template_workloads(kind: DeviceKind) -> tuple[str, ...]:
    """TEMPLATE_WORKLOADS that have design spaces on this kind (TVM 0.27 cannot generate
    winograd's for CUDA)."""
    return tuple(w for w in TEMPLATE_WORKLOADS if not (kind.name == "cuda" and w.startswith("conv2d_winograd")))


def probe_programs(workload_texts: Sequence[str] | None = None, samples_per_space: int = 6,
                   seed: int = 0, targets: Sequence[Any] | None = None,
                   models: Sequence[str] | None = None, kind: DeviceKind = DEVICE_KINDS["cpu"]) -> list[LoopProgram]:
    """Programs of every workload's and every model task's design spaces on every target class
    of a device kind (design spaces differ by vector width and ISA: AVX2 targets rfactor
    reductions that AVX-512 targets do not). Nothing is compiled to machine code, so every
    class is probed on any host."""
    import tvm

    rng = np.random.default_rng(seed)
    programs: list[LoopProgram] = []
    for config in targets if targets is not None else kind.targets:
        target = tvm.target.Target(config)
        for text in workload_texts if workload_texts is not None else template_workloads(kind):
            programs += _space_programs(SearchSpace(DesignSpaces(Workload.parse(text), target)), rng,
                                        samples_per_space)
        for model in models if models is not None else kind.models:
            for _, space in model_task_spaces(model, target):
                programs += _space_programs(space, rng, samples_per_space)
    return programs


def build_template(kind: DeviceKind = DEVICE_KINDS["cpu"], samples_per_space: int = 6) -> Template:
    workloads = template_workloads(kind)
    built_from = (*workloads, *(f"model:{m}" for m in kind.models))
    programs = probe_programs(workloads, samples_per_space, kind=kind)
    return template_from_observations(observe(programs), built_from, kind)


# ---------------------------------------------------------------------------------------------
# Encoding


@dataclass
class EncodedProgram:
    """A program's loops with their features and roles (before any template is applied)."""

    program: LoopProgram
    owner: list[int]
    features: np.ndarray  # (loops, NUM_FEATURES)
    roles: list[LoopRole | str]  # a str explains why a loop has no role

    @property
    def slot_names(self) -> list[str]:
        loops = self.program.loops
        return [r.slot if isinstance(r, LoopRole) else f"?{loops[i].name}" for i, r in enumerate(self.roles)]


def _func_of(source: Any) -> Any:
    """The PrimFunc of a Candidate, Schedule, IRModule or PrimFunc."""
    if hasattr(source, "sch"):
        source = source.sch
    if hasattr(source, "mod") and not hasattr(source, "functions"):
        source = source.mod
    if hasattr(source, "functions"):
        source = source["main"]
    return source


class GraphEncoder:
    """Scheduled programs -> torch_geometric graphs, with or without the super-graph.

    A graph's `x`, `edge_index` and `mask` are what `data.graphs.GraphBuilder` feeds the cost model
    for the program (before feature standardisation): what is shown or exported here is what a
    model sees."""

    def __init__(self, template: Template | None = None) -> None:
        import torch_geometric.data  # noqa: F401  (seconds to import: pay it here, not in the first encode)

        self.template = template or Template.load()
        self.version = self.template.version
        self.width = layout.width(len(self.template.features))
        self._index = {s: i for i, s in enumerate(self.template.slots)}
        self._roles = RoleCache()
        self._edge_index = layout.template_edges(self.template.parents)

    def analyse(self, source: Any) -> EncodedProgram:
        program = extract(_func_of(source))
        owner = owners(program)
        return EncodedProgram(program, owner, loop_features(program, owner, self.template.features),
                              self._roles.roles(program, owner))

    def slots_of(self, enc: EncodedProgram) -> np.ndarray:
        """Template slot of each loop; raises TemplateMismatch naming the first missing slot."""
        out = np.empty(len(enc.roles), dtype=np.int64)
        used: dict[int, int] = {}
        for i, role in enumerate(enc.roles):
            if isinstance(role, str):
                raise TemplateMismatch(f"{role}; it has no super-graph slot: {REBUILD_HINT}")
            slot = self._index.get(role.slot)
            if slot is None:
                loop = enc.program.loops[i]
                block = enc.program.blocks[enc.owner[i]]
                raise TemplateMismatch(
                    f"slot {role.slot!r} (loop {loop.name!r} of block {block.name!r}) is not in super-graph "
                    f"template {self.version}: {REBUILD_HINT}"
                )
            if slot in used:
                other = enc.program.loops[used[slot]].name
                raise TemplateMismatch(
                    f"loops {other!r} and {enc.program.loops[i].name!r} both map to slot {role.slot!r}: {REBUILD_HINT}"
                )
            used[slot] = i
            out[i] = slot
        return out

    def augmented(self, source: Any, workload: str = "", knobs: np.ndarray | None = None, space: int = -1,
                  enc: EncodedProgram | None = None) -> "Data":
        """The program on the super-graph template: fixed nodes and edges, masks for real ones."""
        import torch
        from torch_geometric.data import Data

        enc = enc or self.analyse(source)
        slot = self.slots_of(enc)
        t = self.template
        slots = torch.from_numpy(slot)
        x = torch.zeros(1, t.num_nodes, self.width)
        layout.place(x, slice(None), layout.for_node(slots), layout.interval_node(slots, t.num_slots),
                     torch.from_numpy(enc.features))
        # A template edge is real when it is the loop's actual nesting edge.
        parent_real = torch.zeros(t.num_slots, dtype=torch.bool)
        for i, lp in enumerate(enc.program.loops):
            real_parent = slot[lp.parent] if lp.parent >= 0 else -1
            if t.parents[slot[i]] == real_parent:
                parent_real[slot[i]] = True
        present = torch.zeros(t.num_slots, dtype=torch.bool)
        present[slots] = True
        return Data(
            x=x[0], edge_index=self._edge_index.clone(), mask=layout.present(x[0]),
            edge_mask=layout.edge_mask(parent_real, present), knobs=_knob_tensor(knobs), workload=workload,
            template_version=self.version, space=space, num_nodes=t.num_nodes,
        )

    def plain(self, source: Any, workload: str = "", knobs: np.ndarray | None = None, space: int = -1,
              enc: EncodedProgram | None = None) -> "Data":
        """The program's own loop graph (the ablation without the super-graph)."""
        import torch
        from torch_geometric.data import Data

        enc = enc or self.analyse(source)
        n = len(enc.program.loops)
        loops = torch.arange(n)
        for_nodes, interval_nodes = layout.for_node(loops), layout.interval_node(loops, n)
        x = torch.zeros(1, layout.num_nodes(n), self.width)
        layout.place(x, slice(None), for_nodes, interval_nodes, torch.from_numpy(enc.features))
        parents = torch.tensor([lp.parent for lp in enc.program.loops], dtype=torch.long)
        return Data(
            x=x[0], edge_index=layout.edges(layout.parent_node(parents), for_nodes, interval_nodes),
            mask=layout.present(x[0]), edge_mask=torch.ones(layout.num_edges(n), dtype=torch.bool),
            knobs=_knob_tensor(knobs), workload=workload, template_version="", space=space,
            num_nodes=layout.num_nodes(n),
        )


def _knob_tensor(knobs: np.ndarray | None) -> "torch.Tensor":
    import torch

    if knobs is None:
        return torch.zeros((1, 0), dtype=torch.float32)
    return torch.as_tensor(np.asarray(knobs, dtype=np.float32)).reshape(1, -1)


def describe(enc: EncodedProgram) -> list[str]:
    """One line per loop, indented by nesting: slot, loop name, [extent], kind, unroll pragma,
    top-down/bottom-up products and per buffer of its owner block touch/reuse/stride (features
    are shown un-logged, 2**x - 1)."""

    kinds = {0: "serial", 1: "parallel", 2: "vector", 3: "unroll", 4: "thread"}
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    lines = []
    for i, lp in enumerate(enc.program.loops):
        f = enc.features[i]

        def val(name: str) -> str:
            return f"{round(2 ** float(f[col[name]]) - 1, 2):g}"

        bufs = " ".join(
            f"{acc.buffer}(t={val(f'buf{b}.touch')},r={val(f'buf{b}.reuse')},s={val(f'buf{b}.stride')})"
            for b, acc in enumerate(buffer_slots(enc.program, enc.owner[i])[:NUM_BUFFER_SLOTS])
        )
        pragma = f" unroll<={lp.unroll_max_step}" if lp.unroll_max_step else ""
        lines.append(
            f"{'  ' * lp.depth}{enc.slot_names[i]} = {lp.name} [{lp.extent}] {kinds.get(lp.kind, lp.kind)}{pragma}"
            f"  top={val('topdown')} bottom={val('bottomup')} {bufs}"
        )
    return lines


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Show or rebuild a device kind's super-graph template.")
    parser.add_argument("--rebuild", action="store_true", help="probe TEMPLATE_WORKLOADS and rewrite the template")
    parser.add_argument("--kind", choices=sorted(DEVICE_KINDS), default="cpu", help="device kind (default: cpu)")
    args = parser.parse_args(argv)
    kind = DEVICE_KINDS[args.kind]
    if args.rebuild:
        old = Template.load(kind.template_path).version if kind.template_path.exists() else None
        tpl = build_template(kind)
        tpl.save(kind.template_path)
        print(f"{kind.name} template {old} -> {tpl.version}: {tpl.num_slots} slots, {tpl.num_nodes} nodes, "
              f"{tpl.num_edges} edges")
    else:
        tpl = Template.load(kind.template_path)
        print(f"{kind.name} template {tpl.version}: {tpl.num_slots} slots, {tpl.num_nodes} nodes, "
              f"{layout.width(len(tpl.features))} features per node")
        for name, parent in tpl.definition["slots"]:
            print(f"  {name:<28} <- {parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
