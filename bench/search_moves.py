"""Where did each tuner search? Design spaces and step sizes of a bench's runs, read from their databases.

    .venv/bin/python bench/search_moves.py runs/resnet18-late --after 64 [--target "llvm -mcpu=znver5 -num-cores=2"]

For every workload and strategy of a bench output directory: how many trials went to each design
space and the best latency found there; and, for the trials after `--after`, how far each proposal
was from what the run had measured before: its nearest earlier configuration of the same design
space (of equally near ones, the nearest kind) either differs in tile knobs by factor moves only (one divisor moved between two levels of a
loop's tiling, TVM's MutateTileSize step), or by at least one jump to an unrelated tiling. A tuner
that refines late takes steps; one that keeps sampling takes jumps. Records that map to no design
space of metatune's knob spaces (e.g. TVM's MutateParallel changes an annotation the design spaces
fix) are counted apart. `--target` must be the target the bench tuned for (default: this machine).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from metatune.measure.measurer import median_latency
from metatune.space.knob_space import TILE, Config, Knob, is_factor_move

STEP, JUMP, OTHER, FIRST = "tile steps only", "a tile jump", "no tile change", "first of its space"


def move_kind(config: Config, earlier: Sequence[Config], knobs: Sequence[Knob]) -> str:
    """How `config` relates to the nearest (fewest differing knobs) earlier configurations of its
    space; of several equally near ones, the nearest kind counts (no tile change, steps, a jump)."""
    same = [c for c in earlier if c.space == config.space]
    if not same:
        return FIRST

    def differing(c: Config) -> int:
        return sum(a != b for a, b in zip(c.decisions, config.decisions))

    fewest = min(differing(c) for c in same)
    kinds = {_kind(c, config, knobs) for c in same if differing(c) == fewest}
    return next(kind for kind in (OTHER, STEP, JUMP) if kind in kinds)


def _kind(before: Config, after: Config, knobs: Sequence[Knob]) -> str:
    tiles = [(a, b) for k, a, b in zip(knobs, before.decisions, after.decisions) if k.kind == TILE and a != b]
    if not tiles:
        return OTHER
    return STEP if all(is_factor_move(a, b) for a, b in tiles) else JUMP


def read_records(run_dir: Path) -> list[Any]:
    """A run's tuning records in the order they were measured (the JSON database appends)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.database import Workload as TvmWorkload

    workloads = [TvmWorkload.from_json(json.loads(line)) for line in open(run_dir / "database_workload.json")]
    records = []
    for line in open(run_dir / "database_tuning_record.json"):
        index, record = json.loads(line)
        records.append(TuningRecord.from_json(record, workloads[index]))
    return records


def latency(record: Any) -> float:
    """The record's median run time (infinite for a failed measurement, which TVM stores as 1e10 s)."""
    secs = [float(x) for x in record.run_secs] if record.run_secs else []
    return median_latency(secs, high=True) if secs and secs[0] < 1e9 else float("inf")


def summarize(records: Sequence[Any], space: Any, after: int) -> dict[str, Any]:
    configs: list[Config | None] = []
    for record in records:
        try:
            configs.append(space.config_of(record.trace))
        except Exception:  # a trace of no design space (see the module docstring)
            configs.append(None)
    per_space: dict[str, list[float]] = {}
    for config, record in zip(configs, records):
        per_space.setdefault("unmapped" if config is None else f"space {config.space}", []).append(latency(record))
    kinds: Counter[str] = Counter()
    for i in range(after, len(records)):
        config = configs[i]
        if config is None:
            kinds["unmapped"] += 1
            continue
        earlier = [c for c in configs[:i] if c is not None]
        kinds[move_kind(config, earlier, space[config.space].knobs)] += 1
    return {"trials": len(records), "moves_after": dict(kinds),
            "spaces": {name: {"trials": len(lat), "best_us": round(min(lat) * 1e6, 1)}
                       for name, lat in sorted(per_space.items())}}


def main() -> None:
    from metatune.env.device import fingerprint_for_target
    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import resolve_workload

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a `metatune bench --out` directory")
    parser.add_argument("--after", type=int, default=64, help="classify the proposals after this many trials")
    parser.add_argument("--target", default=None, help="the target the bench tuned for (default: this machine)")
    parser.add_argument("--json", type=Path, help="write the per-run numbers here")
    args = parser.parse_args()
    target = fingerprint_for_target(args.target).tvm_target()
    totals: dict[str, Counter[str]] = {}
    report: dict[str, Any] = {}
    for result_file in sorted((args.out / "runs").glob("*/*.json")):
        run_dir = result_file.with_suffix("")
        if not (run_dir / "database_tuning_record.json").exists():
            continue
        result = json.loads(result_file.read_text())
        space = SearchSpace(DesignSpaces(resolve_workload(result["workload"]), target))
        summary = summarize(read_records(run_dir), space, args.after)
        report[f"{result_file.parent.name}/{run_dir.name}"] = summary
        totals.setdefault(result["strategy"], Counter()).update(summary["moves_after"])
        spaces = ", ".join(f"{name}: {s['trials']} trials, best {s['best_us']} us" for name, s in summary["spaces"].items())
        print(f"{result_file.parent.name:>12} {result['strategy']:<24} {spaces}")
    print(f"\nproposals after trial {args.after}, by their nearest earlier configuration of the same design space:")
    for strategy, kinds in totals.items():
        total = sum(kinds.values()) or 1
        print(f"  {strategy:<24} " + ", ".join(f"{kind} {n} ({n / total:.0%})" for kind, n in kinds.most_common()))
    if args.json:
        args.json.write_text(json.dumps({"after": args.after, "runs": report,
                                         "totals": {s: dict(k) for s, k in totals.items()}}, indent=1))


if __name__ == "__main__":
    main()
