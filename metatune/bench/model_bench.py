"""End to end: tune every task of a whole model per strategy, compile it, time it against its
source library (PyTorch eager or onnxruntime) and, for a PyTorch model, against onnxruntime too.

Each (strategy, repeat) tunes to each trial total in turn on one database (a later total resumes
the earlier run), so `--trials-total 200,1000` gives the 200-trial and the 1,000-trial model from
one tuning run. A PyTorch model is exported once to ONNX (torch.onnx, BatchNorm folded as TVM
compiles it) so that onnxruntime runs the same network; the tuned library is checked against it
and timed against it in paired passes, like every reference.
Layout: `model/<name>/<strategy>-r<repeat>/` (database, exported library), `<strategy>-r<repeat>-
t<trials>.json` (the `ModelTuneResult`, with `onnxruntime`), `<name>.onnx`, and `model_table.md`.
The strategies' order is reversed every other repeat (the suite bench rotates it per workload).

`replay_at` answers "how soon does a strategy get there": the model as the first N trials of a
longer run left it (that run's database cut to its first N records, which TVM's JSONDatabase
keeps in the order they were measured), compiled, checked and timed like a tuned total, in
`<strategy>-r<repeat>-at<N>/` and `<strategy>-r<repeat>-t<N>-of<total>.json`.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any, Callable

from metatune import MAX_TRIALS, MetatuneError
from metatune.bench.harness import (
    BenchProgress,
    check_continuation,
    check_strategies,
    file_name,
    read_result,
    split_strategy,
    write_json,
)
from metatune.env.device import fingerprint_for_target
from metatune.fileio import RECORD_FILE, WORKLOAD_FILE
from metatune.measure.reference_timing import MAX_PASSES, Comparison, ReferenceSpec, check_max_passes, compare
from metatune.tune import model_runtime
from metatune.tune.model_tuner import tune_model
from metatune.tune.strategies import CHECKPOINT_STRATEGIES, check_model_strategy
from metatune.tune.tuner import DEVICE_FILE, resolve_checkpoint
from metatune.workload.model_source import ModelSource, Shape
from metatune.workload.relax_tasks import ImportedModel, import_model, load_model
from metatune.workload.torch_model import TorchModel


def onnx_twin(imported: ImportedModel, folder: Path) -> ModelSource | None:
    """The PyTorch model as an ONNX file in `folder` (written once), for onnxruntime; None for an
    ONNX model (its own reference is onnxruntime already)."""
    model = imported.model
    if not isinstance(model, TorchModel):
        return None
    path = folder / f"{model.source.name}.onnx"
    if not path.exists():  # written under another name first: a stop mid-export leaves no torn file to reuse
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        model.export_onnx(partial)
        partial.replace(path)
    return ModelSource.parse(str(path), model.source.input_shapes or [i.shape for i in model.inputs])


def against_onnxruntime(library: Path, twin: ModelSource, threads: int, max_passes: int = MAX_PASSES) -> Comparison:
    """The exported library checked against onnxruntime on the ONNX twin, then timed against it."""
    compiled, _ = model_runtime.load_library(library)
    onnx_model = load_model(twin)
    inputs = onnx_model.example_inputs()
    _, run_s = model_runtime.verify(compiled, onnx_model, inputs)  # raises WrongResultError
    spec = ReferenceSpec.model(twin, threads)
    repeat = model_runtime.repeats_for(run_s, spec.pass_s)
    return compare(spec, lambda: compiled.latency_ms(inputs, repeat), max_passes=max_passes)


MODEL_FILE = "model.json"


def model_identity(source: ModelSource) -> dict[str, str]:
    """What makes two specs the same network: its kind and, for a file (ONNX, or the Python file that
    builds it), the file's bytes; a spec may be another path to the same file."""
    identity = {"kind": source.kind}
    if source.kind in ("onnx", "python"):
        path = source.spec.rpartition(":")[0] if source.kind == "python" else source.spec
        identity["sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return identity


def claim_folder(folder: Path, imported: ImportedModel) -> None:
    """A model's bench folder holds one model (by `model_identity`; folders from before it was recorded:
    by inputs only) with one set of input shapes: resuming it with another would report the finished
    runs of the first as the second's (`resnet18` and `torchvision:resnet18` share a name)."""
    source = imported.model.source
    what = {"model": source.spec, "inputs": [list(i.shape) for i in imported.model.inputs],
            "identity": model_identity(source)}
    path = folder / MODEL_FILE
    if path.exists():
        held = json.loads(path.read_text())
        if held["inputs"] != what["inputs"] or held.get("identity", what["identity"]) != what["identity"]:
            raise MetatuneError(f"{folder} holds a bench of {held['model']} with inputs {held['inputs']}, not of "
                                f"{what['model']} with inputs {what['inputs']}"
                                + ("" if held["inputs"] != what["inputs"] else " (another network of that name)")
                                + ": use another --out")
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, what)


def check_totals_reachable(out: Path, name: str, runs: list[tuple[str, int]], totals: list[int],
                           trials_per_iter: int) -> None:
    """A trial total below what a run's database already holds cannot be tuned to any more (tuning to it
    would compile the best of all the records, the longer run's model, labelled as the shorter one).
    TVM stops a run at the first batch that reaches its total, so a run killed before writing its result
    may hold up to a batch more than the total: that run is finished, not longer."""
    for strategy, repeat in runs:
        records = out / "model" / name / f"{file_name(strategy)}-r{repeat}" / RECORD_FILE
        held = sum(1 for line in records.read_text().splitlines() if line.strip()) if records.exists() else 0
        for trials in totals:
            if held >= trials + trials_per_iter and read_result(result_path(out, name, strategy, repeat, trials)) is None:
                raise MetatuneError(f"{records.parent} already holds {held} trials, more than --trials-total {trials}: "
                                    f"time the model its first {trials} trials left with --replay-at {trials}")


def check_runs_continue_alike(out: Path, name: str, runs: list[tuple[str, int]], totals: list[int], checkpoint: str,
                              trials_per_iter: int, target: str | None) -> None:
    """A run tuned to an earlier total resumes its database for the next: with another --trials-per-iter or
    checkpoint the next total's model would come from two searches (see `check_continuation`)."""
    resolved: dict[str, str] = {}
    for strategy, repeat in runs:
        done = [r for t in totals if (r := read_result(result_path(out, name, strategy, repeat, t))) is not None]
        if not done or len(done) == len(totals):
            continue  # nothing tuned yet, or nothing more to tune
        tuner, named = split_strategy(strategy)
        spec = named or checkpoint
        if tuner in CHECKPOINT_STRATEGIES and spec not in resolved:
            resolved[spec] = resolve_checkpoint(spec, fingerprint_for_target(target))[1]
        check_continuation(f"{name} [{strategy}] r{repeat} in {out}", done[-1], trials_per_iter, spec,
                           resolved.get(spec) if tuner in CHECKPOINT_STRATEGIES else None,
                           from_strategy=named is not None)


def result_path(out: Path, name: str, strategy: str, repeat: int, trials: int) -> Path:
    return out / "model" / name / f"{file_name(strategy)}-r{repeat}-t{trials}.json"


def check_request(model: str, trials_totals: list[int], strategies: list[str],
                  input_shapes: list[Shape] | None = None, replay_at: list[int] | None = None,
                  reference_passes: int = MAX_PASSES) -> ModelSource:
    """The parsed model SPEC, or a one-line error for a bad request, before anything is written or measured."""
    largest = max(trials_totals)
    if min(trials_totals) < 1:
        raise MetatuneError(f"--trials-total {','.join(map(str, trials_totals))}: each must be at least 1")
    if largest > MAX_TRIALS:
        raise MetatuneError(f"--trials-total {largest} is more than {MAX_TRIALS}")
    if any(n < 1 or n > largest for n in replay_at or []):
        raise MetatuneError(f"--replay-at {','.join(map(str, sorted(set(replay_at or []))))}: each must be between 1 "
                            f"and the largest --trials-total ({largest}); at the largest, the finished model is timed "
                            "again (so that runs timed at different times can be compared in one)")
    check_strategies(strategies)
    check_max_passes(reference_passes)
    for spec in strategies:
        check_model_strategy(split_strategy(spec)[0])
    return ModelSource.parse(model, input_shapes or [])


def run_model_bench(model: str, trials_totals: list[int], strategies: list[str], repeats: int, out: Path,
                    checkpoint: str = "auto", runner: str = "local", trials_per_iter: int = 16,
                    progress: BenchProgress | None = None, target: str | None = None,
                    input_shapes: list[Shape] | None = None, replay_at: list[int] | None = None,
                    reference_passes: int = MAX_PASSES) -> None:
    """Each (strategy, repeat) tunes the model to each of `trials_totals` in turn; finished runs
    are skipped. Then each run is replayed at each of `replay_at` (up to its largest total). Every
    timing against a reference takes at most `reference_passes` pass pairs."""
    imported = import_model(check_request(model, trials_totals, strategies, input_shapes, replay_at,
                                          reference_passes))
    totals, replays = sorted(set(trials_totals)), sorted(set(replay_at or []))
    name = imported.name
    claim_folder(out / "model" / name, imported)
    runs = [(s, r) for r in range(repeats) for s in (strategies if r % 2 == 0 else strategies[::-1])]
    check_totals_reachable(out, name, runs, totals, trials_per_iter)
    check_runs_continue_alike(out, name, runs, totals, checkpoint, trials_per_iter, target)
    twin = onnx_twin(imported, out / "model" / name)
    progress = progress or BenchProgress(total=len(runs) * totals[-1])
    for i, (strategy, repeat) in enumerate(runs):
        base = i * totals[-1]
        run_dir = out / "model" / name / f"{file_name(strategy)}-r{repeat}"
        tuner, named_checkpoint = split_strategy(strategy)
        run_checkpoint = named_checkpoint or checkpoint
        for trials in totals:
            path = result_path(out, name, strategy, repeat, trials)
            previous = read_result(path)
            if previous and previous["trials"] >= trials:
                progress.set(base + trials, f"{name} [{strategy}] {trials} trials done")
                continue

            def report(n: int, total: int, status: str, base: int = base, strategy: str = strategy) -> None:
                progress.set(base + min(n, total), f"{name} [{strategy}] {status}")

            library = run_dir / f"{name}-t{trials}.so"
            tuned = tune_model(imported, trials, tuner, run_dir, checkpoint=run_checkpoint, runner=runner,
                               trials_per_iter=trials_per_iter, seed=repeat, report=report, target=target,
                               export=library, reference_passes=reference_passes)
            result = tuned.to_json()
            if twin is not None:
                result["onnxruntime"] = against_onnxruntime(library, twin, tuned.threads, reference_passes).to_json()
            result["strategy"], result["repeat"], result["trials_total"] = strategy, repeat, trials
            result["trials_per_iter"] = trials_per_iter
            write_json(path, result)
            progress.set(base + trials, f"{name} [{strategy}] {trials} trials: {result['model_ms']} ms")
        for trials in replays:
            path = replay_path(out, name, strategy, repeat, trials, totals[-1])
            if not path.exists():
                progress.set(base + totals[-1], f"{name} [{strategy}] compiling and timing its first {trials} trials")
                result = replay(imported, tuner, repeat, trials, run_dir, totals[-1], twin, run_checkpoint, runner,
                                target, reference_passes)
                result["strategy"] = strategy
                write_json(path, result)


def replay_path(out: Path, name: str, strategy: str, repeat: int, trials: int, of: int) -> Path:
    return out / "model" / name / f"{file_name(strategy)}-r{repeat}-t{trials}-of{of}.json"


def replay(imported: ImportedModel, strategy: str, repeat: int, trials: int, run_dir: Path, of: int,
           twin: ModelSource | None, checkpoint: str, runner: str, target: str | None,
           reference_passes: int = MAX_PASSES) -> dict[str, Any]:
    """The model as the first `trials` of the `of` trials in `run_dir` left it: the database cut to
    those records, compiled (tuning nothing more), checked and timed against its references."""
    records = [line for line in (run_dir / RECORD_FILE).read_text().splitlines() if line.strip()]
    if len(records) < trials:
        raise MetatuneError(f"{run_dir} holds {len(records)} trials, fewer than the {trials} to replay")
    replay_dir = run_dir.parent / f"{run_dir.name}-at{trials}"
    replay_dir.mkdir(parents=True, exist_ok=True)
    (replay_dir / WORKLOAD_FILE).write_text((run_dir / WORKLOAD_FILE).read_text())
    (replay_dir / RECORD_FILE).write_text("\n".join(records[:trials]) + "\n")
    if (run_dir / DEVICE_FILE).exists():  # the records' device: a replay on another one is refused
        (replay_dir / DEVICE_FILE).write_text((run_dir / DEVICE_FILE).read_text())
    library = replay_dir / f"{imported.name}-t{trials}.so"
    tuned = tune_model(imported, trials, strategy, replay_dir, checkpoint=checkpoint, runner=runner, seed=repeat,
                       target=target, export=library, reference_passes=reference_passes)
    result = tuned.to_json()
    if twin is not None:
        result["onnxruntime"] = against_onnxruntime(library, twin, tuned.threads, reference_passes).to_json()
    result["repeat"], result["trials_total"], result["replay_of"] = repeat, trials, of
    return result


def model_table(out: Path) -> str:
    """Model latency per strategy and trial total (median of repeats) against the source library
    and, where measured, onnxruntime, from the run JSONs; a speed-up is the median of the runs'
    paired-pass speed-ups, `unstable` when any run's timing was."""
    runs = [json.loads(p.read_text()) for p in sorted((out / "model").glob("*/*.json")) if p.name != MODEL_FILE]
    if not runs:
        return ""
    lines = ["| model | strategy | trials | repeats | TVM ms | reference | reference ms | reference / TVM | "
             "onnxruntime ms | onnxruntime / TVM | tasks (untuned) | tuning wall s | verified |", "|" + "---|" * 13]
    groups = _groups(runs, lambda r: (r["model"], r["strategy"], r.get("trials_total", r["trials"]),
                                      r.get("replay_of", 0)))
    for (model, strategy, _, of), group in sorted(groups.items(), key=lambda item: (item[0][0], item[0][2],
                                                                                    item[0][1], item[0][3])):
        trials = f"{statistics.median(r['trials'] for r in group):.0f}" + (f" (first of {of})" if of else "")
        tuning = "–" if of else f"{statistics.median(r['tune_s'] for r in group):.0f}"  # a replay tunes nothing
        tvm_ms = statistics.median(r["model_ms"] for r in group)
        reference_ms = statistics.median(r["reference_ms"] for r in group)
        ort = [r["onnxruntime"] for r in group if "onnxruntime" in r]
        ort_ms = f"{statistics.median(c['reference']['median_ms'] for c in ort):.2f}" if ort else "–"
        lines.append(
            f"| {model} | {strategy} | {trials} | {len(group)} | "
            f"{tvm_ms:.2f} | {group[0].get('reference', 'PyTorch eager')} | {reference_ms:.2f} | "
            f"{_speedup([r.get('comparison', {}) for r in group], reference_ms / tvm_ms)} | {ort_ms} | "
            f"{_speedup(ort) if ort else '–'} | {len(group[0]['tasks'])} "
            f"({max(len(r['untuned']) for r in group)}) | {tuning} | "
            f"{all(r['verified'] for r in group)} |")
    return "\n".join(lines) + "\n"


def _speedup(comparisons: list[dict[str, Any]], medians_ratio: float | None = None) -> str:
    """The median of the comparisons' speed-ups, or `unstable`; runs from before paired passes
    were kept have no speed-up, and their ratio of medians is shown instead."""
    if any(c.get("unstable") for c in comparisons):
        return "unstable"
    speedups = [c["speedup"] for c in comparisons if c.get("speedup") is not None]
    if len(speedups) == len(comparisons):
        return f"{statistics.median(speedups):.2f}×"
    return "–" if medians_ratio is None else f"{medians_ratio:.2f}×"


def _groups(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict[str, Any]]]:
    groups: dict[Any, list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups
