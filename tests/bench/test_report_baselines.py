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


def retimed_repeats(gflops: dict[tuple[str, int, int], list[float]], budgets: list[int]) -> dict:
    """Two workloads; (strategy, repeat, budget) -> the kernel's re-timed GFLOPS on each workload."""
    runs = {name: {"kernels": len(gflops), "runs": [{"strategy": s, "repeat": rep, "budget": b, "gflops": g[i]}
                                                      for (s, rep, b), g in gflops.items()]}
            for i, name in enumerate(["conv", "dense"])}
    return {"device_id": "x86_64-test-2c", "rounds": 3, "budgets": budgets, "workloads": runs}


def test_each_repeat_is_compared_with_the_baselines_run_of_the_same_repeat():
    data = retimed_repeats({("metatune", 0, 16): [200.0, 200.0], ("xgb", 0, 16): [100.0, 100.0],
                            ("metatune", 1, 16): [150.0, 150.0], ("xgb", 1, 16): [150.0, 150.0]}, [16])
    table = retimed_markdown(data, ["metatune", "xgb"])
    # repeat 0: 2×, repeat 1: 1×; the medians of repeats (175 / 125) give 1.40×
    assert "| metatune | 0 | 2.00× |" in table
    assert "| metatune | 1 | 1.00× |" in table
    assert "| metatune | 1.40× |" in table


def test_one_repeat_has_no_repeat_table():
    data = retimed_repeats({("metatune", 0, 16): [200.0, 200.0], ("xgb", 0, 16): [100.0, 100.0]}, [16])
    assert "repeat by repeat" not in retimed_markdown(data, ["metatune", "xgb"])


def test_every_budget_is_set_against_the_baselines_largest():
    data = retimed_repeats({("metatune", 0, 16): [100.0, 100.0], ("metatune", 0, 64): [400.0, 100.0],
                            ("xgb", 0, 16): [50.0, 50.0], ("xgb", 0, 64): [200.0, 200.0]}, [16, 64])
    table = retimed_markdown(data, ["metatune", "xgb"])
    # @16: 0.5× and 0.5×; @64: 2× and 0.5×, geomean 1×
    assert "| metatune | 0.50× | 1.00× |" in table.split("after its largest budget (64 trials)")[1]
