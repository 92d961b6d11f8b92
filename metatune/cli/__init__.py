"""The `metatune` command line: one sub-command per pipeline stage."""

from metatune.cli.app import app, main

__all__ = ["app", "main"]
