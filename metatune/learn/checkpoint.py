"""The trained-model checkpoint: one safetensors file with everything needed to use the model.

Tensors: the model's state dict under `model.`, and the feature statistics `stats.mean` and
`stats.std`. Metadata (all strings): `model_config`, `normalization` and `maml` as JSON, `mode`,
`template_version`, plus whatever the writer adds (`dataset_id`). Zoo checkpoints are this file
with a sha256 on record, so the format stays fixed: old checkpoints must keep loading.

Loading checks the header first: the metadata must describe a model this code can build, and
the tensor names and shapes must be that model's, before any tensor is read.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import ValidationError
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from metatune import MetatuneError
from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.encode.graphs import MIN_STD, MODES, FeatureStats, GraphBuilder
from metatune.encode.supergraph import Template, TemplateMismatch
from metatune.learn.config import MAMLConfig

REQUIRED_METADATA = ("model_config", "template_version", "maml")


class CheckpointError(MetatuneError):
    """A file that is not a checkpoint this code can load; the message says what does not match."""


@dataclass(frozen=True)
class _Header:
    """What a checkpoint's metadata describes, checked against the code and the tensors."""

    config: ModelConfig
    template: Template
    mode: str
    maml: MAMLConfig

    @classmethod
    def check(cls, metadata: dict[str, str], shapes: dict[str, tuple[int, ...]], where: str) -> _Header:
        missing = [k for k in REQUIRED_METADATA if k not in metadata]
        if missing:
            raise CheckpointError(f"{where}: not a metatune checkpoint (its metadata lacks {', '.join(missing)})")
        try:
            template = Template.by_version(metadata["template_version"])
        except TemplateMismatch as err:
            raise CheckpointError(f"{where} was trained on {err}: retrain it with `make train-zoo`") from None
        mode = metadata.get("mode", "supergraph")
        if mode not in MODES:
            raise CheckpointError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
        config = _model_config(metadata["model_config"], where)
        builder = GraphBuilder(template, mode)
        positions = template.num_nodes if mode == "supergraph" else 0
        if (config.in_dim, config.num_positions) != (builder.width, positions):
            raise CheckpointError(
                f"{where}: model_config has in_dim={config.in_dim}, num_positions={config.num_positions}; this "
                f"encoder's {mode} graphs need in_dim={builder.width}, num_positions={positions}"
            )
        with torch.device("meta"):  # shapes only: a model_config with huge sizes allocates nothing
            expected = {f"model.{k}": tuple(v.shape) for k, v in CostModel(config).state_dict().items()}
        expected["stats.mean"] = expected["stats.std"] = (builder.num_features,)
        _compare_shapes(expected, shapes, where)
        try:
            maml = MAMLConfig.model_validate_json(metadata["maml"])
        except ValidationError as err:
            first = err.errors()[0]
            where_in = ".".join(str(p) for p in first["loc"]) or "maml"
            raise CheckpointError(
                f"{where}: metadata 'maml' is not a MAML config: {where_in}: {first['msg']}") from None
        return cls(config, template, mode, maml)


def _model_config(text: str, where: str) -> ModelConfig:
    """The `model_config` metadata as a ModelConfig whose every field has its declared type."""
    try:
        raw = json.loads(text)
        config = ModelConfig(**raw)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{where}: metadata 'model_config' is not a model config ({err})") from None
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if type(value).__name__ != field.type or (field.type == "int" and value < 0):
            raise CheckpointError(f"{where}: model_config.{field.name} = {value!r} is not a valid {field.type}")
    return config


def _compare_shapes(expected: dict[str, tuple[int, ...]], actual: dict[str, tuple[int, ...]], where: str) -> None:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"] if missing else []) + (
            [f"has unexpected {', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}"] if extra else [])
        raise CheckpointError(f"{where}: tensors do not match its model_config: {'; '.join(parts)}")
    for name, shape in expected.items():
        if tuple(actual[name]) != shape:
            raise CheckpointError(f"{where}: tensor {name} has shape {list(actual[name])}, "
                                  f"its model_config implies {list(shape)}")


class TrainedModel:
    """A trained cost model with everything needed to encode inputs for it."""

    def __init__(self, model: CostModel, builder: GraphBuilder, maml: MAMLConfig) -> None:
        self.model, self.builder, self.maml = model, builder, maml

    def save(self, path: Path, extra_metadata: dict[str, str]) -> None:
        tensors = {f"model.{k}": v.contiguous() for k, v in self.model.state_dict().items()}
        tensors["stats.mean"] = self.builder.stats.mean.contiguous()
        tensors["stats.std"] = self.builder.stats.std.contiguous()
        metadata = {
            "model_config": json.dumps(self.model.config.to_json()),
            "normalization": json.dumps({"features": "(x - stats.mean) / stats.std on real loops, 0 where stats.std "
                                                     f"is at its floor {MIN_STD:g} (never varied in training)",
                                         "target": "per-workload standardised log2 GFLOPS"}),
            "mode": self.builder.mode,
            "template_version": self.builder.template.version,
            "maml": json.dumps(self.maml.model_dump()),
            **extra_metadata,
        }
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, str],
                   where: str = "checkpoint") -> TrainedModel:
        """The model from loaded tensors and metadata, after checking that they agree (`where` names them in errors)."""
        header = _Header.check(metadata, {k: tuple(v.shape) for k, v in tensors.items()}, where)
        return cls._assemble(header, tensors, where)

    @classmethod
    def load(cls, path: Path) -> TrainedModel:
        """A checkpoint file, read with safetensors (never pickle); its header is checked before any tensor is read."""
        try:
            with safe_open(str(path), "pt") as f:
                metadata = f.metadata() or {}
                header = _Header.check(metadata, {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}, str(path))
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{path} is not a safetensors checkpoint ({err})") from None
        return cls._assemble(header, tensors, str(path))

    @classmethod
    def _assemble(cls, header: _Header, tensors: dict[str, torch.Tensor], where: str) -> TrainedModel:
        not_float = sorted(k for k, v in tensors.items() if v.dtype != torch.float32)
        if not_float:
            raise CheckpointError(f"{where}: tensor {not_float[0]} is {tensors[not_float[0]].dtype}, not float32")
        model = CostModel(header.config)
        model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        model.eval()
        stats = FeatureStats(tensors["stats.mean"], tensors["stats.std"])
        return cls(model, GraphBuilder(header.template, header.mode, stats), header.maml)
