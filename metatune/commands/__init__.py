"""Implementations of the CLI sub-commands (kept apart from argument parsing)."""
