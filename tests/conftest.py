"""Shared fixtures: small shapes of every family, and this machine's TVM target."""

from __future__ import annotations

import functools

import pytest

SMALL_SHAPES = {
    "conv1d": "conv1d:n=1,c=16,l=64,k=16,r=3,stride=1,pad=1",
    "conv1d_transpose": "conv1d_transpose:n=1,c=16,l=32,k=8,r=4,stride=2,pad=1",
    "conv2d": "conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=2,pad=1",
    "conv2d_bias": "conv2d_bias:n=1,c=8,h=14,w=14,k=16,r=1,s=1,stride=2,pad=0",
    "conv2d_bias_relu": "conv2d_bias_relu:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=1,pad=1",
    "conv2d_bias_add_relu": "conv2d_bias_add_relu:n=1,c=8,h=14,w=14,k=8,r=3,s=3,stride=1,pad=1",
    "conv2d_transpose": "conv2d_transpose:n=1,c=8,h=7,w=7,k=8,r=4,s=4,stride=2,pad=1",
    "conv2d_winograd": "conv2d_winograd:n=1,c=8,h=8,w=8,k=8,r=3,s=3,stride=1,pad=1",
    "depthwise_conv2d": "depthwise_conv2d:n=1,c=8,h=14,w=14,r=3,s=3,stride=1,pad=1",
    "dense": "dense:m=16,n=32,k=24",
    "dense_bias_relu": "dense_bias_relu:m=16,n=32,k=24",
    "dense_bias": "dense_bias:m=16,n=32,k=24",
    "batch_matmul": "batch_matmul:b=2,m=16,n=8,k=24",
}


@functools.lru_cache(maxsize=None)
def local_target():
    """This machine's TVM target (cached: fingerprinting reads /proc/cpuinfo and LLVM)."""
    from metatune.env.device import local_fingerprint

    return local_fingerprint().tvm_target()


@functools.lru_cache(maxsize=None)
def small_search_space(family: str):
    """The knob space of the family's small shape, built once per test session."""
    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import Workload

    return SearchSpace(DesignSpaces(Workload.parse(SMALL_SHAPES[family]), local_target()))


@pytest.fixture(scope="session")
def target():
    return local_target()
