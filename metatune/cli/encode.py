"""`metatune encode`: random schedules of one workload as super-graph program graphs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer

from metatune.workload.operators import resolve_workload


def run_encode(text: str, count: int, seed: int, show: bool, json_out: Optional[Path],
               target: Optional[str] = None) -> list[dict[str, Any]]:
    workload = resolve_workload(text)  # bad input fails here, before TVM is loaded
    from metatune.encode.layout import NODE_WIDTH
    from metatune.encode.supergraph import GraphEncoder, describe
    from metatune.env.device import fingerprint_for_target
    from metatune.space.knob_space import DesignSpaces, SearchSpace

    space = SearchSpace(DesignSpaces(workload, fingerprint_for_target(target).tvm_target()))
    candidates = space.sample_candidates(count, seed=seed)
    encoder = GraphEncoder()
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
        f"{NODE_WIDTH} features per node, {space.embedding_dim} knob features"
    )
    if json_out is not None:
        summary = {
            "workload": str(workload),
            "template_version": encoder.version,
            "node_features": NODE_WIDTH,
            "knob_features": space.embedding_dim,
            "graphs_per_s": round(rate, 1),
            "graphs": rows,
        }
        json_out.write_text(json.dumps(summary, indent=2) + "\n")
    return rows
