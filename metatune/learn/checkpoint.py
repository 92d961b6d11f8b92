"""The trained-model checkpoint: one safetensors file with everything needed to use the model.

Tensors: the model's state dict under `model.`, and the feature statistics `stats.mean` and
`stats.std`. Metadata (all strings): `model_config`, `normalization` and `maml` as JSON, `mode`,
`template_version`, plus whatever the writer adds (`dataset_id`). Zoo checkpoints are this file
with a sha256 on record, so the format stays fixed: old checkpoints must keep loading.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from metatune import MetatuneError
from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.encode.graphs import FeatureStats, GraphBuilder
from metatune.encode.supergraph import Template
from metatune.learn.maml import MAMLConfig


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
            "normalization": json.dumps({"features": "(x - stats.mean) / stats.std on real loops",
                                         "target": "per-workload standardised log2 GFLOPS"}),
            "mode": self.builder.mode,
            "template_version": self.builder.template.version,
            "maml": json.dumps(self.maml.model_dump()),
            **extra_metadata,
        }
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> TrainedModel:
        template = Template.load()
        if metadata.get("template_version") != template.version:
            raise MetatuneError(
                f"checkpoint was trained on super-graph template {metadata.get('template_version')}, the code has "
                f"{template.version}: retrain it with `make train-zoo`"
            )
        model = CostModel(ModelConfig(**json.loads(metadata["model_config"])))
        model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        model.eval()
        stats = FeatureStats(tensors["stats.mean"], tensors["stats.std"])
        builder = GraphBuilder(template, metadata.get("mode", "supergraph"), stats)
        return cls(model, builder, MAMLConfig.model_validate_json(metadata["maml"]))

    @classmethod
    def load(cls, path: Path) -> TrainedModel:
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        return cls.from_state(tensors, metadata)
