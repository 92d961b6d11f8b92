"""Training configs (train/configs/<device>.yaml): the schema, loading, and evaluation overrides.

Every section is validated when the file is loaded, so a typo fails before hours of training,
as a one-line error naming the key. Only the schema lives here (no PyTorch), so that the commands
check a config in a fraction of a second, before the trainer is imported.
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

# "metatune-plain" is the super-graph ablation; a config asks for it with `ablation: true`
EVAL_METHODS = ("metatune", "finetune", "scratch", "metatune-plain", "xgb", "xgb-transfer")


class PretrainConfig(BaseModel):
    """The `pretrain:` section of a training config; unknown keys are typos, so they are errors."""

    model_config = ConfigDict(extra="forbid")
    epochs: int = Field(30, ge=1)
    steps_per_epoch: int = Field(40, ge=1)  # an "epoch" is a validation interval, independent of dataset size
    lr: float = Field(5e-3, gt=0)
    weight_decay: float = Field(1e-5, ge=0)
    workloads_per_batch: int = Field(8, ge=1)
    graphs_per_workload: int = Field(32, ge=2)  # a rank loss needs pairs
    rank_loss: bool = False  # AutoTVM's pairwise rank loss instead of MSE; must match the model's rank_scores
    patience: int = Field(5, ge=1)


class MAMLConfig(BaseModel):
    """The `maml:` section of a training config; checkpoints carry it to adapt the same way when tuning."""

    model_config = ConfigDict(extra="forbid")
    k_support: int = Field(16, ge=2)
    q_query: int = Field(32, ge=2)
    tasks_per_batch: int = Field(8, ge=1)
    inner_lr: float = Field(0.05, gt=0)  # α
    inner_steps: int = Field(5, ge=1)
    outer_lr: float = Field(1e-3, gt=0)  # β
    iterations: int = Field(600, ge=1)
    first_order: bool = False
    freeze_embedding: bool = True
    patience: int = Field(8, ge=1)
    eval_every: int = Field(25, ge=1)

    @model_validator(mode="after")
    def _validated_at_least_once(self) -> "MAMLConfig":
        """Meta-training keeps the weights of its best validation: with fewer iterations than
        `eval_every` it never validates a meta-trained state, and would silently keep the pretrained weights."""
        if self.iterations < self.eval_every:
            raise ValueError(f"iterations ({self.iterations}) must be at least eval_every ({self.eval_every})")
        return self


class EvalConfig(BaseModel):
    """The `evaluation:` section of a training config; unknown keys are typos, so they are errors."""

    model_config = ConfigDict(extra="forbid")
    ks: tuple[int, ...] = (0, 8, 16, 32)
    repeats: int = 3
    scratch_steps: int = 150
    scratch_lr: float = 1e-2
    seed: int = Field(0, ge=0, le=MAX_SEED)
    methods: tuple[str, ...] = ("metatune", "finetune", "scratch", "xgb", "xgb-transfer")

    @field_validator("ks")
    @classmethod
    def _support_sizes(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        """k counts support samples: zero (no adaptation) or more."""
        if any(k < 0 for k in ks):
            raise ValueError(f"evaluation ks must be >= 0, got {list(ks)}")
        return ks


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
