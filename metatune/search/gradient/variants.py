"""The differentiable variants of a search space.

A variant is a design space with its compute locations fixed; its tile sizes are what gradient
descent moves. Which compute locations exist is found by asking TVM (`KnobSpace.valid_values`)
at a few random configurations; each variant keeps one configuration where it is valid to read
its symbolic program from. Programs are read on first use; a variant the symbolic model cannot
express is dropped with a logged warning naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from metatune.search.gradient import NotDifferentiable
from metatune.search.gradient.features import VariantFeatures
from metatune.search.gradient.program import SymbolicProgram, Variant, build
from metatune.search.gradient.relax import TileRelaxation
from metatune.space.knob_space import COMPUTE_LOCATION, Config

if TYPE_CHECKING:
    from metatune.encode.graphs import GraphBuilder
    from metatune.encode.supergraph import GraphEncoder
    from metatune.space.knob_space import Config, KnobSpace, SearchSpace

logger = logging.getLogger(__name__)


@dataclass
class VariantModel:
    """Everything gradient search needs about one variant."""

    variant: Variant
    ks: "KnobSpace"
    program: SymbolicProgram
    features: VariantFeatures
    relax: TileRelaxation

    def config(self, tiles: tuple[tuple[int, ...], ...], unroll: int) -> "Config":
        """The configuration with these tilings (knob order of the program) and unroll index."""

        decisions: list = list(self.ks.default.decisions)
        for knob, tile in zip(self.program.knobs, tiles):
            decisions[knob.position] = tile
        for position, location in self.variant.locations:
            decisions[position] = location
        if self.program.unroll is not None:
            decisions[self.program.unroll.position] = unroll
        return Config(self.ks.index, tuple(decisions))


def variant_of(ks: "KnobSpace", config: "Config") -> Variant:
    return Variant(ks.index, tuple((k.position, int(config.decisions[k.position]))  # type: ignore[arg-type]
                                   for k in ks.knobs if k.kind == COMPUTE_LOCATION))


class Variants:
    """Variants of every design space of a search space, discovered up front, modelled lazily."""

    def __init__(self, space: "SearchSpace", builder: "GraphBuilder", encoder: "GraphEncoder",
                 rng: np.random.Generator, probes: int = 3) -> None:
        self.space, self.builder, self.encoder = space, builder, encoder
        self.references: dict[Variant, "Config"] = {}
        self.models: dict[Variant, VariantModel] = {}
        self.dropped: dict[Variant, str] = {}
        for ks in space.knob_spaces:
            locations = [k for k in ks.knobs if k.kind == COMPUTE_LOCATION]
            for _ in range(probes):
                cand = ks.sample(rng)
                if cand is None or cand.config is None:
                    continue
                self.references.setdefault(variant_of(ks, cand.config), cand.config)
                for knob in locations:
                    for value in ks.valid_values(cand.config, knob.position):
                        decisions = list(cand.config.decisions)
                        decisions[knob.position] = value
                        config = cand.config._replace(decisions=tuple(decisions))
                        variant = variant_of(ks, config)
                        if variant not in self.references and ks.schedule(config, postprocess=False, strict=True):
                            self.references[variant] = config

    def __len__(self) -> int:
        return len(self.references)

    def usable(self) -> list[Variant]:
        return [v for v in self.references if v not in self.dropped]

    def model(self, variant: Variant) -> VariantModel | None:
        """The variant's model; None (and a warning, once) if it cannot be differentiated."""
        if variant in self.models:
            return self.models[variant]
        if variant in self.dropped or variant not in self.references:
            return None
        ks = self.space[variant.space]
        reference = self.references[variant]
        try:
            program = build(ks, reference)
            model = VariantModel(variant, ks, program, VariantFeatures(program, self.builder, self.encoder),
                                 TileRelaxation(program, ks))
            position = program.unroll.position if program.unroll else None
            unroll = int(reference.decisions[position]) if position is not None else 0  # type: ignore[arg-type]
            # the postprocessor replay can meet a case it does not model only when it runs
            model.features.node_features(torch.tensor([program.columns(reference)], dtype=torch.float64),
                                         torch.tensor([unroll]))
        except NotDifferentiable as err:
            self.drop(variant, str(err))
            return None
        self.models[variant] = model
        return model

    def model_for(self, config: "Config") -> VariantModel | None:
        """The model of the variant a (valid) configuration belongs to, read at it if new."""
        variant = variant_of(self.space[config.space], config)
        self.references.setdefault(variant, config)
        return self.model(variant)

    def drop(self, variant: Variant, reason: str) -> None:
        self.dropped[variant] = reason
        self.models.pop(variant, None)
        logger.warning("gradient search skips %s (locations %s): %s", f"design space {variant.space}",
                       list(variant.locations), reason)
