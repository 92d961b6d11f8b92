"""Implementations of the CLI sub-commands (kept apart from argument parsing)."""

from __future__ import annotations

from metatune import MetatuneError


def parse_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise MetatuneError(f"{what}: expected a comma-separated list, got {text!r}")
    return items


def parse_ints(text: str, what: str, example: str) -> list[int]:
    return _parse_numbers(text, what, example, int)


def parse_floats(text: str, what: str, example: str) -> list[float]:
    return _parse_numbers(text, what, example, float)


def _parse_numbers(text: str, what: str, example: str, kind: type) -> list:
    try:
        return [kind(b) for b in parse_list(text, what)]
    except ValueError:
        raise MetatuneError(f"{what}: expected numbers such as {example}, got {text!r}") from None
