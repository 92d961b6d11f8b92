"""ResNet-18 (He et al. 2016) as in torchvision's ImageNet model: basic blocks [2, 2, 2, 2],
a 7x7 stem with max pooling, global average pooling and a 1000-way classifier."""

from __future__ import annotations

import torch
from torch import nn

from metatune.workload.networks.layers import CalibratedModule, conv_bn


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(c_in, c_out, 3, stride)
        self.conv2 = conv_bn(c_out, c_out, 3)
        self.relu = nn.ReLU()
        self.shortcut = conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.conv1(x))
        return self.relu(self.conv2(out) + self.shortcut(x))


class ResNet(CalibratedModule):
    def __init__(self, blocks: tuple[int, ...] = (2, 2, 2, 2), classes: int = 1000) -> None:
        super().__init__()
        self.stem = conv_bn(3, 64, 7, stride=2)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        layers, c_in = [], 64
        for i, n in enumerate(blocks):
            c_out = 64 * 2**i
            for j in range(n):
                layers.append(BasicBlock(c_in, c_out, 2 if j == 0 and i > 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.stem(x)))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18() -> ResNet:
    return ResNet((2, 2, 2, 2))
