"""A training script that parses its command line when imported, as many do."""

import argparse

from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=8)
args = parser.parse_args()  # metatune's own arguments must not reach it


def make() -> nn.Module:
    again = parser.parse_args()  # and so must the function's
    return nn.Sequential(nn.Conv2d(3, again.width, 3), nn.ReLU())
