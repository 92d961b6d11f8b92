"""A user's model file for `metatune tune --model tests/tune/data/small_net.py:make`."""

from torch import nn


def make() -> nn.Module:
    """Conv-BN-ReLU, a strided conv, pooling and a classifier: three kinds of task, a BatchNorm to fold."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def broken() -> nn.Module:
    raise ValueError("weights file not found")


def not_a_module() -> int:
    return 3


def exits() -> nn.Module:
    raise SystemExit(2)  # what argparse does on arguments it does not know


def head() -> nn.Module:
    """A classifier head of 10 features."""
    return nn.Linear(10, 4)
