"""The committed benchmark tables are reproducible: `--report-only` re-renders them byte for byte
from the committed per-run results, with the budgets its runs reached when none are given."""

from __future__ import annotations

import shutil

import pytest

from metatune.fileio import REPO_ROOT
from tests.processes import run_metatune

COMMITTED = ["resnet18-256", "resnet18-64"]  # to 256 trials, and to 64 (no empty 128/256 columns by default)


@pytest.mark.parametrize("name", COMMITTED)
def test_report_only_rerenders_the_committed_tables_byte_for_byte(name, tmp_path):
    committed = REPO_ROOT / "docs" / "bench" / name
    out = tmp_path / name
    shutil.copytree(committed, out)
    for rendered in ("table.md", "results.csv"):
        (out / rendered).unlink()
    done = run_metatune(["bench", "--suite", "resnet18", "--report-only", "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr
    for rendered in ("table.md", "results.csv"):
        assert (out / rendered).read_bytes() == (committed / rendered).read_bytes(), rendered
