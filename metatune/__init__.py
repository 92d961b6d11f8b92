"""metatune: a meta-learned cost model and batch-BO tuner for tensor programs on Apache TVM.

Importing the package is cheap on purpose: TVM, torch and friends are imported by the
modules that need them, so that `metatune --help` answers instantly.
"""

__version__ = "0.1.0"


class MetatuneError(Exception):
    """An error caused by the user's input or environment, reported without a traceback."""
