"""The registry of `--model` names: small CNNs in plain PyTorch for whole-model tuning.

Each model is built with seeded weights in eval mode, so a name always means the same
network and the same reference output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from metatune.workload.networks.resnet import resnet18
from metatune.workload.networks.tiny import TinyCNN

if TYPE_CHECKING:
    import torch

    from metatune.workload.networks.layers import CalibratedModule


@dataclass(frozen=True)
class ModelSpec:
    """A named network and the input it is tuned for (batch included)."""

    name: str
    input_shape: tuple[int, ...]
    factory: Callable[[], "CalibratedModule"]

    def build(self, seed: int = 0) -> "torch.nn.Module":
        """The network with weights drawn from `seed`, in eval mode; the global RNG is left untouched."""
        import torch

        with torch.random.fork_rng():
            torch.manual_seed(seed)
            module = self.factory()
            module.calibrate(self.input_shape)
        return module.eval()


def _resnet18() -> "CalibratedModule":
    return resnet18()


def _tinycnn() -> "CalibratedModule":
    return TinyCNN()


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet18", (1, 3, 224, 224), _resnet18),  # ImageNet ResNet-18, batch 1
        ModelSpec("tinycnn", (1, 3, 16, 16), _tinycnn),  # four tasks, for tests
    )
}
