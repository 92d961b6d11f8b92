"""`metatune encode`: random schedules of one workload as super-graph program graphs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from metatune import MAX_SEED
from metatune.cli.common import MAX_RANDOM, TARGET_HELP, check_json_out, write_json

app = typer.Typer()


@app.command()
def encode(
    workload: str = typer.Argument(..., help="Workload text (e.g. 'dense:m=64,n=64,k=64') or a ResNet-18 layer C1..C12."),
    random: int = typer.Option(8, "--random", min=1, max=MAX_RANDOM,
                                help="How many distinct random configurations to encode."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seed for sampling configurations."),
    show: bool = typer.Option(False, "--show", help="Print each graph: slots with roles and loop features."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-graph statistics to this file."),
    target: Optional[str] = typer.Option(None, help=TARGET_HELP + " Any target works: nothing is run."),
) -> None:
    """Encode random schedules of one workload as super-graph program graphs."""
    run_encode(workload, random, seed, show, json_out, target)


def run_encode(text: str, count: int, seed: int, show: bool, json_out: Optional[Path],
               target: Optional[str] = None) -> list[dict[str, Any]]:
    """Encode `count` random configurations of the workload `text`; print a summary and return per-graph rows."""
    from metatune.workload.operators import resolve_workload

    workload = resolve_workload(text)  # bad input fails here, before TVM is loaded
    check_json_out(json_out)
    from metatune.encode.supergraph import GraphEncoder, Template, describe
    from metatune.env.device import fingerprint_for_target
    from metatune.space.knob_space import DesignSpaces, SearchSpace

    tvm_target = fingerprint_for_target(target).tvm_target()
    encoder = GraphEncoder(Template.for_target(tvm_target))
    space = SearchSpace(DesignSpaces(workload, tvm_target))
    candidates = space.sample_candidates(count, seed=seed)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    encoded = []
    for cand in candidates:
        assert cand.config is not None
        enc = encoder.analyse(cand)
        knobs = space.embed(cand.config)
        graph = encoder.augmented(cand, workload=str(workload), knobs=knobs, space=cand.space_index, enc=enc)
        plain = encoder.plain(cand, workload=str(workload), knobs=knobs, space=cand.space_index, enc=enc)
        encoded.append((cand, enc, graph))
        rows.append({
            "space": cand.space_index,
            "config": cand.config.to_json(),
            "num_nodes": int(graph.num_nodes),
            "num_edges": int(graph.edge_index.shape[1]),
            "num_real_nodes": int(graph.mask.sum()),
            "num_real_edges": int(graph.edge_mask.sum()),
            "num_loops": len(enc.program.loops),
            "plain_num_nodes": int(plain.num_nodes),
            "plain_num_edges": int(plain.edge_index.shape[1]),
            "template_version": graph.template_version,
        })
    wall = time.perf_counter() - start
    if show:
        for i, (cand, enc, graph) in enumerate(encoded):
            typer.echo(
                f"--- graph {i}: design space {cand.space_index}, config {cand.config.to_json()[1]}\n"
                f"    {int(graph.mask.sum())}/{graph.num_nodes} real nodes, {int(graph.edge_mask.sum())}/"
                f"{graph.edge_index.shape[1]} real edges, template {graph.template_version}"
            )
            for line in describe(enc):
                typer.echo(f"    {line}")
    rate = len(rows) / wall if wall > 0 else float("inf")
    typer.echo(
        f"{workload}: encoded {len(rows)} graphs in {wall:.2f} s ({rate:.0f} graphs/s); template "
        f"{encoder.version}: {encoder.template.num_nodes} nodes, {encoder.template.num_edges} edges, "
        f"{encoder.width} features per node, {space.embedding_dim} knob features"
    )
    if json_out is not None:
        summary = {
            "workload": str(workload),
            "template_version": encoder.version,
            "node_features": encoder.width,
            "knob_features": space.embedding_dim,
            "graphs_per_s": round(rate, 1),
            "graphs": rows,
        }
        write_json(summary, json_out)
    return rows
