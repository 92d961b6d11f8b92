"""bench/late_ranking.py: the two ranking measures it reports."""

from __future__ import annotations

import pytest

from bench.late_ranking import pairwise_accuracy, top_quality


def test_pairwise_accuracy_counts_pairs_ordered_like_the_latencies():
    latencies = [1.0, 2.0, 3.0, 4.0]
    assert pairwise_accuracy([4, 3, 2, 1], latencies) == pytest.approx(1.0)  # faster = higher score
    assert pairwise_accuracy([1, 2, 3, 4], latencies) == pytest.approx(0.0)
    assert pairwise_accuracy([4, 3, 1, 2], latencies) == pytest.approx(5 / 6)  # one of six pairs swapped


def test_top_quality_is_the_best_of_the_favourites_against_the_best():
    latencies = [5.0, 1.0, 2.0, 4.0]
    assert top_quality([9, 1, 8, 7], latencies, top=2) == pytest.approx(1.0 / 2.0)  # favourites: 5.0 and 2.0
    assert top_quality([0, 9, 1, 2], latencies, top=1) == pytest.approx(1.0)


def test_a_study_of_one_strategys_runs_takes_their_checkpoint(tmp_path):
    """Another strategy's runs in the folder, tuned with another checkpoint, do not make it ambiguous."""
    import json

    import pytest

    from bench.model_args import runs_checkpoint

    (tmp_path / "runs" / "C1").mkdir(parents=True)
    for name, checkpoint in (("metatune-r0", "x86_64-znver3-2c/v2"), ("metatune@x86_64-znver3-2c_v1-r0",
                                                                    "x86_64-znver3-2c/v1"), ("xgb-r0", None)):
        (tmp_path / "runs" / "C1" / f"{name}.json").write_text(json.dumps({"checkpoint": checkpoint}))
    assert runs_checkpoint(tmp_path, "metatune") == "x86_64-znver3-2c/v2"
    assert runs_checkpoint(tmp_path, "xgb") == "auto"
    with pytest.raises(SystemExit, match="several checkpoints"):
        runs_checkpoint(tmp_path)
