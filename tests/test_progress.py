"""The plain (log) progress lines: their ETA comes from the work done while watching, not work found done."""

from __future__ import annotations

import pytest

from metatune import progress
from metatune.progress import PlainProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress.time, "monotonic", fake)
    return fake


def test_eta_ignores_work_a_resumed_run_found_done(clock, capsys):
    with PlainProgress(interval_s=0) as bar:
        task = bar.add_task("bench", total=1000)
        clock.now += 5
        bar.update(task, completed=200, status="200 trials done")  # an earlier run's: skipped at once
        clock.now += 60
        bar.update(task, completed=260)  # one trial a second since
    lines = capsys.readouterr().err.splitlines()
    assert "200/1000" in lines[0] and "eta unknown" in lines[0]
    assert "260/1000" in lines[1] and "eta 12.3 min" in lines[1]  # 740 trials at 1/s, not 800 at 260/65 s


def test_eta_of_a_fresh_run_counts_from_its_first_report(clock, capsys):
    with PlainProgress(interval_s=0) as bar:
        task = bar.add_task("build", total=100)
        clock.now += 30
        bar.update(task, advance=10)
        clock.now += 30
        bar.update(task, advance=10)
    last = capsys.readouterr().err.splitlines()[-1]
    assert "20/100" in last and "elapsed 1.0 min" in last and "eta 4.0 min" in last
