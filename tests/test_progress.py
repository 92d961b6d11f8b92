"""Progress output: the plain (log) lines' ETA comes from the work done while watching, not work found done;
the bar and the lines go to stderr, whatever the terminal, so that stdout stays the command's output."""

from __future__ import annotations

import io
import sys

import pytest

from metatune import progress
from metatune.progress import PlainProgress, progress_bar


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


def test_a_command_refused_before_its_work_began_prints_no_progress_line(capsys):
    with pytest.raises(ValueError):
        with PlainProgress(interval_s=0) as bar:
            bar.add_task("tune", total=64)
            raise ValueError("unknown runner")  # set-up refused: the one-line error says it all
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError):
        with PlainProgress(interval_s=30) as bar:
            task = bar.add_task("tune", total=64)
            bar.update(task, completed=0)
            bar.update(task, completed=16)  # work done, not yet shown: its last state is shown
            raise ValueError("a batch failed")
    assert "16/64" in capsys.readouterr().err.splitlines()[-1]


def test_work_found_all_done_has_nothing_left(capsys):
    with PlainProgress(interval_s=0) as bar:
        task = bar.add_task("tune", total=64)
        bar.update(task, completed=64)  # a re-run of a finished run
    line = capsys.readouterr().err.strip()
    assert "64/64" in line and "eta 0.0 min" in line, line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_stays_off_stdout_when_stdout_is_redirected(monkeypatch, capsys):
    console = Terminal()
    monkeypatch.setattr(sys, "stderr", console)
    with progress_bar() as bar:
        task = bar.add_task("measure dense", total=3, status="")
        bar.update(task, completed=3, status="best 2.0")
    assert capsys.readouterr().out == ""
    assert "measure dense" in console.getvalue() and "3/3" in console.getvalue()


def test_plain_lines_go_to_stderr(capsys):
    with progress_bar() as bar:  # stderr captured: not a terminal
        task = bar.add_task("measure dense", total=2, status="")
        bar.update(task, completed=2, status="best 2.0")
    out = capsys.readouterr()
    assert out.out == "" and "measure dense: 2/2" in out.err
