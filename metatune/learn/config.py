"""Training configs (train/configs/<device>.yaml): the schema, loading, and evaluation overrides.

Every section is validated when the file is loaded, so a typo fails before hours of training,
as a one-line error naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from metatune import MAX_SEED, MetatuneError
from metatune.learn.evaluate import EvalConfig
from metatune.learn.maml import MAMLConfig, PretrainConfig

# "metatune-plain" is the super-graph ablation; a config asks for it with `ablation: true`
EVAL_METHODS = ("metatune", "finetune", "scratch", "metatune-plain", "xgb", "xgb-transfer")


class ModelSection(BaseModel):
    """The `model:` section: the GCN's sizes; the input width and positions come from the data."""

    model_config = ConfigDict(extra="forbid")
    hidden: int = Field(64, ge=4)
    gcn_layers: int = Field(2, ge=0, description="0 = no message passing (an ablation)")
    fc_hidden: int = Field(64, ge=4)
    slot_readout: int = Field(0, ge=0, description="super-graph: per-slot width of the aligned readout; 0 = pooling only")


class TrainConfig(BaseModel):
    """A training config file (train/configs/<device>.yaml)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    device_id: str
    dataset: str = Field(description="dataset directory, relative to the repository root")
    spec: str | None = Field(None, description="dataset spec used to build the dataset if it is missing; "
                                               "none for a dataset imported from measurements made elsewhere")
    seed: int = Field(0, ge=0, le=MAX_SEED)
    threads: int = Field(1, ge=1, description="torch threads; 1 avoids oversubscribing 2 cores")
    mode: str = Field("supergraph", pattern="^(supergraph|plain)$")
    valid_fraction: float = Field(0.1, gt=0, lt=0.5)
    model: ModelSection = Field(default_factory=ModelSection)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    maml: MAMLConfig = Field(default_factory=MAMLConfig)
    evaluation: EvalConfig = Field(default_factory=EvalConfig)
    ablation: bool = Field(True, description="also train on plain loop graphs (no super-graph) and compare")

    @field_validator("evaluation")
    @classmethod
    def _known_methods(cls, evaluation: EvalConfig) -> EvalConfig:
        """Only the methods the training run knows how to build can be asked for."""
        unknown = sorted(set(evaluation.methods) - set(EVAL_METHODS))
        if unknown:
            raise ValueError(f"unknown evaluation method(s) {', '.join(unknown)}; choose from {', '.join(EVAL_METHODS)}")
        return evaluation

    @model_validator(mode="after")
    def _evaluation_seed_follows_seed(self) -> TrainConfig:
        """The evaluation draws follow the run's seed unless the section names its own; the seed stays
        unset there so that the run card records the sections as written."""
        if "seed" not in self.evaluation.model_fields_set:
            values = {**dict(self.evaluation), "seed": self.seed}
            self.evaluation = EvalConfig.model_construct(self.evaluation.model_fields_set, **values)
        return self

    @field_serializer("pretrain", "maml", "evaluation")
    def _as_written(self, section: BaseModel, info: SerializationInfo) -> dict[str, Any]:
        """The keys the file set, not every default: run cards keep the config as it was written."""
        return section.model_dump(mode=info.mode, exclude_unset=True)


def load_config(path: Path) -> TrainConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise MetatuneError(f"training config not found: {path}") from None
    return _validated(raw, f"{path}: ")


def with_evaluation(config: TrainConfig, ks: tuple[int, ...] | None, methods: tuple[str, ...] | None) -> TrainConfig:
    """The config with its evaluation's k values and/or methods replaced (validated like a file)."""
    raw = config.model_dump(mode="json")
    if ks is not None:
        raw["evaluation"]["ks"] = list(ks)
    if methods is not None:
        raw["evaluation"]["methods"] = list(methods)
    return _validated(raw, "")


def _validated(raw: Any, where: str) -> TrainConfig:
    """The config, or a one-line error naming the first bad key."""
    try:
        return TrainConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        key = ".".join(map(str, first["loc"])) or "the config"  # no key: the whole file (e.g. empty) is wrong
        raise MetatuneError(f"{where}{key}: {message}") from None
