"""`metatune measure`: random schedules of one workload, measured for real."""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Optional

import typer

from metatune import MAX_SEED
from metatune.cli.common import MAX_RANDOM, RUNNER_HELP, TARGET_HELP, check_json_out, stop_cleanly, write_json

app = typer.Typer()


@app.command()
def measure(
    workload: str = typer.Argument(..., help="Workload text (e.g. 'dense:m=64,n=64,k=64') or a ResNet-18 layer C1..C12."),
    random: int = typer.Option(32, "--random", min=1, max=MAX_RANDOM,
                               help="How many distinct random configurations to measure (more: dataset build)."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seed for sampling configurations."),
    batch: int = typer.Option(32, min=1, help="Candidates built and timed per batch."),
    verify: bool = typer.Option(True, help="Check each timed build against the NumPy reference (after the batch is timed, so the check never runs beside the timing)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-candidate results to this file."),
    runner: str = typer.Option("local", help=RUNNER_HELP),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP),
) -> None:
    """Measure random schedules of one workload and report throughput and failures."""
    with stop_cleanly(resumes=False):
        run_measure(workload, random, seed, batch, verify, json_out, runner, target)


def run_measure(
    text: str, count: int, seed: int, batch: int, verify: bool, json_out: Optional[Path], runner: str = "local",
    target_text: Optional[str] = None,
) -> None:
    """Measure `count` random configurations of the workload `text` in batches, with a live best-GFLOPS bar."""
    from metatune.workload.operators import resolve_workload

    workload = resolve_workload(text)  # bad input fails here, before TVM is loaded
    check_json_out(json_out)
    from metatune.measure.measurer import Measurer, MeasureResult, MeasureSettings
    from metatune.measure.runners import make_runner
    from metatune.progress import progress_bar
    from metatune.space.knob_space import DesignSpaces

    settings = MeasureSettings(verify=verify)
    runner_obj, fingerprint = make_runner(runner, settings, target_text)  # a remote device is asked, not assumed
    target = fingerprint.tvm_target()
    spaces = DesignSpaces(workload, target)
    candidates = spaces.random_candidates(count, seed=seed)
    results: list[MeasureResult] = []
    start = time.perf_counter()
    with Measurer(target, settings, runner=runner_obj) as measurer, progress_bar() as bar:
        task = bar.add_task(f"measure {workload.family}", total=len(candidates), status="")
        for i in range(0, len(candidates), batch):
            chunk = candidates[i : i + batch]
            results += measurer.measure(workload, [c.measure_candidate() for c in chunk])
            best = max((workload.flops / r.median_s / 1e9 for r in results if r.ok), default=0.0)
            bar.update(task, advance=len(chunk), status=f"best {best:.1f} GFLOPS")
    wall = time.perf_counter() - start
    failures = collections.Counter(r.failure.value for r in results if r.failure)
    ok = [r for r in results if r.ok]
    best_s = min((r.median_s for r in ok), default=float("inf"))
    summary = {
        "workload": str(workload),
        "device_id": fingerprint.device_id,
        "runner": runner,
        "requested": count,
        "sampled": len(candidates),
        "measured": len(ok),
        "failures": dict(failures),
        "wall_s": round(wall, 2),
        "candidates_per_min": round(len(results) / wall * 60, 1) if wall else 0.0,
        "best_latency_us": round(best_s * 1e6, 2) if ok else None,
        "best_gflops": round(workload.flops / best_s / 1e9, 2) if ok else None,
        "time_split_s": {k: round(v, 2) for k, v in measurer.timings.items()},
    }
    typer.echo(
        f"{workload}: {len(ok)}/{len(results)} measured in {wall:.1f} s "
        f"({summary['candidates_per_min']} candidates/min); failures: "
        + (", ".join(f"{k}={v}" for k, v in sorted(failures.items())) or "none")
    )
    if ok:
        typer.echo(f"best: {summary['best_latency_us']} us = {summary['best_gflops']} GFLOPS")
    if json_out is not None:
        summary["candidates"] = [
            {
                "space": c.space_index,
                "latencies_s": r.latencies_s,
                "failure": r.failure.value if r.failure else None,
                "message": r.message,
            }
            for c, r in zip(candidates, results)
        ]
        write_json(summary, json_out)
