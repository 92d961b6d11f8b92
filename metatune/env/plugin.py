"""MetaSchedule plug-in classes built from plain Python logic, on first use.

TVM's `derived_object` needs the `Py*` interface as the first base, whose methods are
`NotImplementedError` stubs, so the logic's methods are bound explicitly; building the class
lazily keeps importing metatune's modules free of TVM.
"""

from __future__ import annotations

import functools
from typing import Any

SEARCH_STRATEGY_METHODS = ("__init__", "_initialize_with_tune_context", "pre_tuning", "post_tuning",
                           "generate_measure_candidates", "notify_runner_results", "clone")


@functools.cache
def search_strategy_class(logic: type, name: str, doc: str) -> Any:
    """A `PySearchStrategy` named `name` whose behaviour is `logic`'s (built once per logic)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    namespace = {m: getattr(logic, m) for m in SEARCH_STRATEGY_METHODS}
    namespace.update(__doc__=doc, __module__=logic.__module__, __qualname__=name)
    return derived_object(type(name, (PySearchStrategy, logic), namespace))
