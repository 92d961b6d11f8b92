"""Building blocks shared by the models."""

from __future__ import annotations

import torch
from torch import nn


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> nn.Sequential:
    """Convolution without bias followed by BatchNorm: the pair BN folding turns into one conv."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(c_out)
    )


class CalibratedModule(nn.Module):
    """A network whose `calibrate` gives every BatchNorm non-trivial statistics from one
    training-mode pass on random data, so that folding BN into the convolutions changes real
    weights and activations keep a realistic scale through deep stacks."""

    def calibrate(self, input_shape: tuple[int, ...], batch: int = 2) -> None:
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.2, 0.2)
                m.reset_running_stats()
                m.momentum = None  # cumulative average over the calibration pass
        self.train()
        with torch.no_grad():
            self(torch.randn((batch, *input_shape[1:])))
        self.eval()
