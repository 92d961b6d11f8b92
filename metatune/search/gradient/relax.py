"""Felix's continuous relaxation of tile sizes: free log-factors, penalties, rounding.

A `SamplePerfectTile` knob splits a loop of extent E into n factors whose product is E. In log
space that is a linear constraint, so it holds by construction: the inner n-1 log-factors are
free and the outermost is the remainder `ln E - sum(inner)`. The remaining constraints of the
knob become Felix's penalty terms `max(g, 0)^2`:

* every factor >= 1 (log-factor >= 0; the remainder too, which bounds the inner ones' sum);
* the innermost factor <= the knob's `max_innermost_factor`;
* a loop a stage is computed at must not have extent 1 (TVM skips unit loops as compute
  locations): its log-factor >= ln 2; loops TVM would otherwise stop at before reaching it
  must have extent 1 (`program.SymbolicProgram.unit_loops`): log-factor <= 0.

Rounding maps each knob's log-factors to the nearest valid factorisation in log space (Felix
rounds `y` to `ln N_i` over the divisors); the candidates are the knob's own choices that
keep the variant's compute locations valid, so every rounded point is a valid configuration
of the variant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.program import SymbolicProgram

if TYPE_CHECKING:
    from metatune.space.knob_space import KnobSpace


@dataclass(frozen=True)
class _Knob:
    position: int
    columns: tuple[int, ...]
    log_extent: float
    log_max_innermost: float  # inf without a bound
    choices: tuple[tuple[int, ...], ...]
    log_choices: np.ndarray  # (choices, levels)
    free: tuple[int, ...]  # indices into the free vector of levels 1..n-1 (empty: a single choice)
    nonunit_levels: tuple[int, ...]  # levels that must not be 1 (a compute location sits on them)
    unit_levels: tuple[int, ...]  # levels that must be 1 (so TVM can reach a compute location)


class TileRelaxation:
    """Free variables, penalties and rounding for the tile knobs of one variant."""

    def __init__(self, program: SymbolicProgram, ks: "KnobSpace") -> None:
        self.program = program
        nonunit = {program.loops[loop].column for loop in program.nonunit_loops}
        unit = {program.loops[loop].column for loop in program.unit_loops}
        knobs, free = [], 0
        for k in program.knobs:
            big = tuple(i for i, col in enumerate(k.columns) if col in nonunit)
            one = tuple(i for i, col in enumerate(k.columns) if col in unit)
            choices = tuple(c for c in ks.knobs[k.position].choices  # type: ignore[union-attr]
                            if all(c[i] > 1 for i in big) and all(c[i] == 1 for i in one))  # type: ignore[index]
            if not choices:
                raise NotDifferentiable(f"{program.name}: no tiling of {k.loop} keeps the compute locations valid")
            width = k.levels - 1 if len(choices) > 1 else 0
            bound = math.log(k.max_innermost) if k.max_innermost > 0 else math.inf
            knobs.append(_Knob(k.position, k.columns, math.log(k.extent), bound, choices,  # type: ignore[arg-type]
                               np.log(np.asarray(choices, dtype=np.float64)), tuple(range(free, free + width)),
                               big, one))
            free += width
        self.knobs = tuple(knobs)
        self.num_free = free
        self.num_columns = program.num_columns
        self.size = math.prod(len(k.choices) for k in knobs)

    # -- parametrisation -----------------------------------------------------------------------

    def columns(self, z: torch.Tensor) -> torch.Tensor:
        """(B, columns) log-factors from (B, free) free variables; factors multiply to the extents."""
        cols: list[torch.Tensor | None] = [None] * self.num_columns
        batch = z.shape[0]
        for k in self.knobs:
            if not k.free:
                for col, value in zip(k.columns, k.log_choices[0]):
                    cols[col] = torch.full((batch,), float(value), dtype=z.dtype)
                continue
            inner = z[:, list(k.free)]
            cols[k.columns[0]] = k.log_extent - inner.sum(-1)
            for col, j in zip(k.columns[1:], range(inner.shape[1])):
                cols[col] = inner[:, j]
        return torch.stack(cols, dim=-1)  # type: ignore[arg-type]

    def free(self, y: torch.Tensor) -> torch.Tensor:
        """The free variables of log-factors `y` (inverse of `columns` on valid points)."""
        out = torch.zeros(y.shape[0], self.num_free, dtype=y.dtype)
        for k in self.knobs:
            if k.free:
                out[:, list(k.free)] = y[:, list(k.columns[1:])]
        return out

    def penalty(self, y: torch.Tensor) -> torch.Tensor:
        """(B,) sum of squared constraint violations (Felix eq. 4 without the weight)."""
        total = torch.zeros(y.shape[0], dtype=y.dtype)
        for k in self.knobs:
            if not k.free:
                continue
            logs = y[:, list(k.columns)]
            total = total + torch.relu(-logs).pow(2).sum(-1)
            if math.isfinite(k.log_max_innermost):
                total = total + torch.relu(logs[:, -1] - k.log_max_innermost).pow(2)
            for level in k.nonunit_levels:
                total = total + torch.relu(math.log(2.0) - logs[:, level]).pow(2)
            for level in k.unit_levels:
                total = total + torch.relu(logs[:, level]).pow(2)
        return total

    # -- sampling and rounding -----------------------------------------------------------------

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, columns) log-factors of uniformly random valid tilings."""
        y = np.zeros((n, self.num_columns))
        for k in self.knobs:
            y[:, list(k.columns)] = k.log_choices[rng.integers(len(k.choices), size=n)]
        return y

    def round(self, y: np.ndarray) -> list[tuple[tuple[int, ...], ...]]:
        """Per point, each knob's nearest valid tiling in log space (knobs in program order)."""
        picks = []
        for k in self.knobs:
            d = ((y[:, None, list(k.columns)] - k.log_choices[None]) ** 2).sum(-1)
            picks.append(np.argmin(d, axis=1))
        return [tuple(k.choices[int(p[i])] for k, p in zip(self.knobs, picks)) for i in range(len(y))]

    def log_columns(self, tilings: Sequence[tuple[tuple[int, ...], ...]]) -> np.ndarray:
        """(n, columns) log-factors of rounded tilings."""
        y = np.zeros((len(tilings), self.num_columns))
        for i, tiles in enumerate(tilings):
            for k, t in zip(self.knobs, tiles):
                y[i, list(k.columns)] = np.log(t)
        return y
