"""TinyCNN: a network small enough to tune in tests that still yields both kinds of task.

Its second convolution feeds global average pooling directly (no bias, BatchNorm or ReLU
after it), so its task is a plain conv2d; the first, conv-BN-ReLU, becomes a conv2d with a
fused bias/ReLU epilogue (the conv2d_bias_relu family). metatune's cost model encodes both.
Pooling and the classifier add the reduction and matmul tasks every CNN has, and it encodes
neither (see tune/fallback.py): the bias-free 16->10 classifier's reduction is longer than its
output, so MetaSchedule also rfactors it. Four tasks in all, so a few trials reach each of them.
"""

from __future__ import annotations

import torch
from torch import nn

from metatune.workload.networks.layers import CalibratedModule, conv_bn


class TinyCNN(CalibratedModule):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = conv_bn(3, 8, 3)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.fc = nn.Linear(16, classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(self.relu(self.conv1(x)))
        return self.fc(x.mean((2, 3)))
