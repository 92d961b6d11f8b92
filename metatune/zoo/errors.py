"""The zoo's errors and warning: each says what is wrong and what to do about it."""

from __future__ import annotations

from metatune import MetatuneError
from metatune.fileio import INDEX_FILE


class ZooError(MetatuneError):
    """A problem with the zoo or a checkpoint in it."""


class ChecksumError(ZooError):
    """The weights on disk are not the weights that were published."""

    def __init__(self, where: str, expected: str, actual: str, recorded_in: str = INDEX_FILE) -> None:
        self.expected, self.actual = expected, actual
        super().__init__(
            f"{where}: sha256 {actual[:16]}... does not match {expected[:16]}... recorded in {recorded_in}; "
            "the weights were modified or corrupted (restore the file or publish the run again)"
        )


class TemplateVersionError(ZooError):
    """The checkpoint encodes programs with another super-graph template than this code."""

    def __init__(self, where: str, checkpoint_version: str, code_version: str) -> None:
        self.checkpoint_version, self.code_version = checkpoint_version, code_version
        super().__init__(
            f"{where} was trained with super-graph template version {checkpoint_version!r} but this code "
            f"uses template version {code_version!r}; retrain it with `make train-zoo` and publish the new run"
        )


class NoCheckpointError(ZooError):
    """Nothing in the zoo can serve the requested device."""


class ZooWarning(UserWarning):
    """A checkpoint was resolved for a different (nearby) device than the one asked for."""
