"""metatune: a meta-learned cost model and batch-BO tuner for tensor programs on Apache TVM.

Importing the package is cheap on purpose: TVM, torch and friends are imported by the
modules that need them, so that `metatune --help` answers instantly.
"""

__version__ = "0.1.0"

# More trials than any tuning run could measure: a larger number is a typo, and TVM takes only int32 counts.
MAX_TRIALS = 10**7
# The largest seed a user may give: numpy takes seeds below 2**32, and runs add a repeat's index to theirs.
MAX_SEED = 2**31 - 1


class MetatuneError(Exception):
    """An error caused by the user's input or environment, reported without a traceback."""


def first_line(err: BaseException, limit: int = 300) -> str:
    """An exception as one short line for a MetatuneError: its type and its message's first line
    (a library's error can run to pages)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:limit]}" if lines else type(err).__name__
