"""Checkpoint weights: safetensors only (never pickle), and their sha256."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import TYPE_CHECKING

from metatune.zoo.errors import ZooError

if TYPE_CHECKING:
    import torch


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors buffer (its header is 8-byte length + JSON)."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]).get("__metadata__") or {}


def load_weights(data: bytes, where: str) -> tuple[dict[str, "torch.Tensor"], dict[str, str]]:
    """Deserialise safetensors bytes (never pickle); any malformation is a ZooError."""
    from safetensors.torch import load

    try:
        tensors = load(data)
        metadata = _safetensors_metadata(data)
    except Exception as err:  # safetensors raises its own SafetensorError / struct / JSON errors
        raise ZooError(f"{where} does not load with safetensors: {err}") from err
    if not tensors:
        raise ZooError(f"{where} holds no tensors")
    for key in ("model_config", "normalization"):
        if key in metadata:
            try:
                json.loads(metadata[key])
            except ValueError as err:
                raise ZooError(f"{where}: safetensors metadata {key!r} is not JSON: {err}") from err
    return tensors, metadata


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
