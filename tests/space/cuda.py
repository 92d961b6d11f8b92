"""The H100 target and its knob spaces of the small shapes, shared by the tests of this folder."""

from __future__ import annotations

import functools

H100 = "nvidia/nvidia-h100"


@functools.lru_cache(maxsize=None)
def cuda_search_space(family: str):
    """The H100 knob space of the family's small shape, built once per test session."""
    import tvm

    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import Workload
    from tests.conftest import SMALL_SHAPES

    return SearchSpace(DesignSpaces(Workload.parse(SMALL_SHAPES[family]), tvm.target.Target(H100)))
