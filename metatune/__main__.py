"""`python -m metatune`: the same as the `metatune` command."""

from metatune.cli import main

main()
