"""bench/prior_rank.py: where a kernel's score falls among random configurations' scores."""

from __future__ import annotations

import numpy as np

from bench.prior_rank import fastest, percentile_among


def test_percentile_counts_the_reference_scores_strictly_below():
    reference = [0.0, 1.0, 2.0, 3.0]
    assert percentile_among([2.5, -1.0, 9.0, 1.0], reference).tolist() == [75.0, 0.0, 100.0, 25.0]


def test_fastest_orders_the_lowest_latencies_first():
    assert fastest([3.0, 1.0, 2.0, 1.0], top=3).tolist() == [1, 3, 2]  # ties keep measurement order
    assert np.array_equal(fastest([2.0], top=8), [0])
