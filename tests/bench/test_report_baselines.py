"""A bench of checkpoints side by side reports, from its re-timed kernels, how each compares with the others."""

from __future__ import annotations

from metatune.bench.report import retimed_baselines, retimed_markdown


def retimed(gflops: dict[str, list[float]]) -> dict:
    """Two workloads; each strategy's kernel at budget 16 re-timed at the given GFLOPS per workload."""
    runs = {name: {"kernels": len(gflops), "runs": [{"strategy": s, "repeat": 0, "budget": 16, "gflops": g[i]}
                                                      for s, g in gflops.items()]}
            for i, name in enumerate(["conv", "dense"])}
    return {"device_id": "x86_64-test-2c", "rounds": 3, "budgets": [16], "workloads": runs}


def test_checkpointed_strategies_become_baselines_bare_names_do_not():
    strategies = ["metatune@dev/v1", "metatune@runs/candidate", "xgb", "random"]
    assert retimed_baselines(strategies) == ("xgb", "metatune", "metatune@dev/v1", "metatune@runs/candidate")


def test_the_table_gives_each_checkpoint_the_ratio_over_the_other():
    strategies = ["metatune@dev/v1", "metatune@runs/candidate"]
    data = retimed({"metatune@dev/v1": [100.0, 50.0], "metatune@runs/candidate": [200.0, 200.0]})
    table = retimed_markdown(data, strategies, retimed_baselines(strategies))
    # candidate / v1: 2× and 4×, geomean 2.83×; the other way round 0.35×; no xgb ran, so no xgb table
    assert "| metatune@runs/candidate | 2.83× |" in table
    assert "| metatune@dev/v1 | 0.35× |" in table
    assert "over xgb" not in table
