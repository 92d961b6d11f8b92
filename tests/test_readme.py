"""The README's contract: it opens with the two commands a new user runs, and both are Makefile targets."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_two_make_targets_that_exist():
    readme = (ROOT / "README.md").read_text()
    opening = re.match(r"# metatune\n\n```bash\n(.*?)```\n", readme, re.S)
    assert opening, "README must start with its title and one bash block"
    commands = [line.split("#")[0].strip() for line in opening.group(1).splitlines()]
    assert [c.split()[0] for c in commands] == ["make", "make"], commands
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert {c.split()[1] for c in commands} <= targets


def test_readme_paragraphs_are_not_duplicated():
    paragraphs = [p.strip() for p in (ROOT / "README.md").read_text().split("\n\n") if len(p.strip()) > 80]
    assert len(paragraphs) == len(set(paragraphs))


def test_every_make_target_writes_only_into_folders_that_exist_or_it_makes():
    """A fresh clone has no runs/: a command given `--json runs/x.json` refuses a missing folder (before
    its work), so the recipe must make it first. `--db` and `--out` folders are made by the commands."""
    recipes = re.findall(r"^([a-z][\w-]*):.*\n((?:\t.*\n)*)", (ROOT / "Makefile").read_text(), re.M)
    tracked = {p.parts[0] for p in ROOT.iterdir()}
    for target, recipe in recipes:
        made: set[str] = set()
        for line in recipe.splitlines():
            made |= set(re.findall(r"mkdir -p (\S+)", line))
            for path in re.findall(r"--json (\S+)", line.split("#")[0]):
                parent = str(Path(path).parent)
                assert parent == "." or parent in made or (parent in tracked and (ROOT / parent).is_dir()
                                                           and parent != "runs"), (target, path)
