"""bench/search_moves.py: how a proposal is classified against the configurations measured before it."""

from __future__ import annotations

from bench.search_moves import FIRST, JUMP, OTHER, STEP, move_kind
from metatune.space.knob_space import CATEGORICAL, TILE, Config, Knob

KNOBS = (Knob(0, 0, TILE, "tile i", ((4, 2, 1), (2, 2, 2), (1, 1, 8), (8, 1, 1))),
         Knob(1, 1, CATEGORICAL, "unroll", (0, 1, 2), (0, 16, 64)))


def test_the_nearest_earlier_configuration_of_the_same_space_decides():
    earlier = [Config(0, ((4, 2, 1), 0)), Config(1, ((2, 2, 2), 0))]
    assert move_kind(Config(0, ((2, 2, 2), 1)), earlier, KNOBS) == STEP  # a 2 moved from level 0 to level 2
    assert move_kind(Config(0, ((1, 1, 8), 0)), earlier, KNOBS) == JUMP  # no single divisor moves 4,2,1 to 1,1,8
    assert move_kind(Config(0, ((4, 2, 1), 2)), earlier, KNOBS) == OTHER  # only the unroll changed
    assert move_kind(Config(2, ((4, 2, 1), 0)), earlier, KNOBS) == FIRST  # nothing measured in space 2 before


def test_a_nearer_configuration_turns_a_jump_into_a_step():
    config = Config(0, ((8, 1, 1), 0))
    assert move_kind(config, [Config(0, ((1, 1, 8), 0))], KNOBS) == STEP  # the whole 8 moved
    assert move_kind(config, [Config(0, ((2, 2, 2), 0))], KNOBS) == JUMP
    assert move_kind(config, [Config(0, ((2, 2, 2), 0)), Config(0, ((4, 2, 1), 0))], KNOBS) == STEP
