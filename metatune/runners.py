"""Where candidates run: `local` (this machine) or a TVM RPC tracker (`rpc://HOST:PORT/KEY`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import MetatuneError

if TYPE_CHECKING:
    from .device import DeviceFingerprint
    from .measure import MeasureSettings


def make_runner(spec: str, settings: "MeasureSettings") -> tuple[Any, "DeviceFingerprint"]:
    """The runner for `spec` (None means the Measurer's local runner) and its device's fingerprint."""
    from .device import local_fingerprint

    if spec == "local":
        return None, local_fingerprint()
    raise MetatuneError(f"unknown runner {spec!r}: expected 'local'")
