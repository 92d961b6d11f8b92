"""How long one timed pass of a compiled model lasts: as long as the reference's pass it alternates with."""

from __future__ import annotations

import pytest

from metatune.measure.reference_timing import PASS_S
from metatune.tune.model_runtime import MIN_REPEAT_MS, repeats_for


@pytest.mark.parametrize("run_s", [2e-5, 0.004, 0.027, 0.06, 0.09])
def test_a_tvm_pass_lasts_about_as_long_as_a_reference_pass(run_s):
    """A repeat shorter than MIN_REPEAT_MS runs the model until it lasts that long, so a pass of
    short runs counts repeats of MIN_REPEAT_MS, not of one run (a 20-µs model once got 15 repeats
    of 50 ms: 0.75 s against the reference's 0.3)."""
    repeat = repeats_for(run_s, PASS_S)
    pass_s = repeat * max(run_s, MIN_REPEAT_MS / 1e3)
    assert PASS_S / 2 < pass_s <= PASS_S


def test_long_runs_get_the_fewest_repeats_a_median_needs():
    assert repeats_for(2.0, PASS_S) == 3
    assert repeats_for(1e-6, 100.0) == 15
