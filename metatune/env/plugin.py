"""MetaSchedule plug-in classes built from plain Python logic, on first use.

MetaSchedule is extended through its `Py<X>` interfaces (`PyCostModel`, `PySearchStrategy`,
`PyRunner`, ...) and TVM's `derived_object` decorator. metatune keeps each plug-in's behaviour in
a plain class and builds the TVM class from it the first time it is needed, so that importing
metatune's modules never imports TVM (seconds). The interface must be the first base, and its
methods are `NotImplementedError` stubs that would shadow the logic's, so the interface's methods
are bound from the logic explicitly.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

COST_MODEL = "tvm.s_tir.meta_schedule.cost_model.PyCostModel"
SEARCH_STRATEGY = "tvm.s_tir.meta_schedule.search_strategy.PySearchStrategy"
BUILDER = "tvm.s_tir.meta_schedule.builder.PyBuilder"
RUNNER = "tvm.s_tir.meta_schedule.runner.PyRunner"
RUNNER_FUTURE = "tvm.s_tir.meta_schedule.runner.PyRunnerFuture"
MEASURE_CALLBACK = "tvm.s_tir.meta_schedule.measure_callback.PyMeasureCallback"
FEATURE_EXTRACTOR = "tvm.s_tir.meta_schedule.feature_extractor.PyFeatureExtractor"


@functools.cache
def plugin_class(interface: str, logic: type, name: str) -> Any:
    """The MetaSchedule class `name`: TVM's `interface` (a dotted path, e.g. `COST_MODEL`) whose
    methods are `logic`'s (a method `logic` leaves out stays the interface's `NotImplementedError`).
    Built once per (interface, logic); `logic`'s docstring becomes the class's."""
    from tvm.ir.utils import derived_object

    module, _, class_name = interface.rpartition(".")
    py_interface = getattr(importlib.import_module(module), class_name)
    methods = ("__init__", *py_interface._tvm_metadata.get("methods", ()))
    namespace = {m: getattr(logic, m) for m in methods if m in _defined(logic)}
    namespace.update(__doc__=logic.__doc__, __module__=logic.__module__, __qualname__=name)
    return derived_object(type(name, (py_interface, logic), namespace))


def _defined(logic: type) -> set[str]:
    """Attribute names `logic` or one of its own bases defines (not `object`)."""
    return {name for cls in logic.__mro__ if cls is not object for name in vars(cls)}
