"""Program encodings for cost models: loop graphs, the super-graph template, AutoTVM-style
loop context features and MetaSchedule's per-store features.

Submodules import TVM and torch lazily; importing this package is cheap.
"""

from metatune.encode.features import FEATURE_NAMES, NUM_FEATURES  # noqa: F401  (numpy only)


def __getattr__(name: str):
    """`TEMPLATE_VERSION`: the super-graph template version every dataset cache and checkpoint
    records (computed on first access, from the template definition)."""
    if name == "TEMPLATE_VERSION":
        from metatune.encode.supergraph import Template

        return Template.load().version
    raise AttributeError(name)
