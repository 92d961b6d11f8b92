"""Implementations of the CLI sub-commands (kept apart from argument parsing)."""

from __future__ import annotations

from .. import MetatuneError


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise MetatuneError(f"{what}: expected a comma-separated list, got {text!r}")
    return items


def parse_ints(text: str, what: str, example: str) -> list[int]:
    try:
        return [int(b) for b in parse_list(text, what)]
    except ValueError:
        raise MetatuneError(f"{what}: expected numbers such as {example}, got {text!r}") from None
