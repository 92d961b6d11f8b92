"""The tuning strategies by name, and what each takes: kept apart from the tuner, which imports TVM, so that
the command line checks a name and writes its help in an instant.

* `metatune` — MetaTuneCostModel (zoo checkpoint, adapted online) + BatchBO search, whose pool holds
  cost-model-guided mutation chains (from the first batch the GP chooses) and whose GP also weighs a prior
  learnt from the task's own measurements;
* its ablations (`ABLATIONS`, measured in docs/BENCHMARKS.md and not adopted): `metatune-evolve`,
  `metatune-task`, `metatune-local` — without the task's own prior, without the mutation chains, without both;
  `metatune-early-chains` — chains also in the first batch, which the cost model alone picks (the default
  before); `metatune-deep-chains` — four generations of mutants a batch instead of two (farther from the
  pool's best); `metatune-space-incumbents` — the best configuration of every design space is an incumbent
  too (neighbours and mutants around it); `metatune-task-chains` — the task's own model (once trained) chooses
  half the mutation chains' parents and kept mutants, the meta-learned model the other half;
  `metatune-task-hedge` — task chains, and 4 picks of every batch go to the task model's favourites (a hedge
  for layers where the GP's trust in the prior misleads it); `metatune-factor-moves` — a neighbour's or
  mutant's tile knob moves one divisor between two of its levels (TVM's MutateTileSize step) instead of
  jumping to any other tiling of the loop; `metatune-recent-gp` — the GP (and so its weights on the
  meta-learned and the task's own model) learns from the incumbents and the last 64 measurements only, not
  the whole run; `metatune-wide-first` — the first batch (the cost model's picks alone) is drawn from 1,024
  random configurations instead of 256;
* `gradient` — the same cost model, searched by gradient descent through its relaxed features (Felix);
* `xgb` — TVM's default: XGBModel + EvolutionarySearch;
* `xgb-transfer` — the same, with the XGBModel pretrained on a dataset's training split;
* `random` — random configurations (MetaSchedule's ReplayTrace), no cost model.
"""

from __future__ import annotations

from typing import Any

from metatune import MetatuneError

# BatchBO's settings (`BatchBOSettings` fields) of the strategies that search with it. `metatune` is
# the design chosen on the search-validation suite (mutation chains scored by the cost model in the pool
# and a second prior learnt from the task's own measurements); the others are its ablations, kept so the
# choice can be measured again: without the task model, without the chains, without both (`metatune-local`:
# random configurations and one-knob neighbours of the incumbents only, the search before).
BATCH_BO_SETTINGS: dict[str, dict[str, Any]] = {
    "metatune": {},
    "metatune-evolve": {"task_model": False},
    "metatune-task": {"evolve_children": 0},
    "metatune-local": {"evolve_children": 0, "task_model": False},
    "metatune-early-chains": {"chains_before_gp": True},  # mutants also in the first batch (the default before)
    "metatune-deep-chains": {"evolve_generations": 4},  # mutation chains twice as long each batch
    "metatune-space-incumbents": {"incumbents_per_space": 1},  # every design space's best searched around too
    "metatune-task-chains": {"evolve_task_share": 0.5},  # the task model picks half the chains' parents and mutants
    "metatune-task-hedge": {"evolve_task_share": 0.5, "task_picks": 4},  # ... and a quarter of each batch
    "metatune-factor-moves": {"tile_moves": "factor"},  # neighbours and mutants move one tile factor at a time
    "metatune-recent-gp": {"gp_recent": 64},  # the GP learns from the incumbents and the last 64 measurements
    "metatune-wide-first": {"first_pool_random": 1024},  # the first batch: the cost model's picks of 1,024 random
}
ABLATIONS = tuple(name for name in BATCH_BO_SETTINGS if name != "metatune")
CHECKPOINT_STRATEGIES = (*BATCH_BO_SETTINGS, "gradient")  # tune with a zoo cost-model checkpoint
STRATEGIES = (*CHECKPOINT_STRATEGIES, "xgb", "xgb-transfer", "random")
MODEL_STRATEGIES = ("metatune", "xgb", "random")  # those that tune a whole network's tasks together


def check_strategy(strategy: str) -> None:
    """One line for an unknown strategy, before a run's folder or logs exist."""
    if strategy not in STRATEGIES:
        raise MetatuneError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def check_model_strategy(strategy: str) -> None:
    """A one-line error for a strategy whole-model tuning does not offer."""
    if strategy not in MODEL_STRATEGIES:
        raise MetatuneError(f"strategy {strategy!r} is not available for --model; choose one of "
                            f"{', '.join(MODEL_STRATEGIES)}")
