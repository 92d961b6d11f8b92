"""`metatune run LIBRARY.so`: load a model exported by `metatune tune --export` and time it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from metatune import MAX_SEED, MetatuneError
from metatune.cli.common import check_json_out, echo_json, write_json

app = typer.Typer()


@app.command("run")
def run_library(
    library: Path = typer.Argument(..., help="A model exported by `metatune tune --model ... --export LIBRARY.so`."),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape", help="Each input's shape, in order "
                                                    "(default: those in LIBRARY.json, written by --export)."),
    repeat: int = typer.Option(10, min=1, help="Timed repeats (each at least 50 ms of runs); the median is reported."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seed of the random inputs."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result (inputs, outputs' shapes, "
                                            "latency) to this file; '-' prints it."),
) -> None:
    """Run an exported model on random inputs in this process (CPU, TVM's thread pool) and report
    its median latency: what a deployment would load, without metatune's tuner."""
    if not library.is_file():  # told before TVM is imported
        raise MetatuneError(f"{library} is a folder; give the exported library (LIBRARY.so)" if library.is_dir()
                            else f"no such file {library}")
    check_json_out(json_out, dash_prints=True)
    import numpy as np

    from metatune.env.device import usable_cores
    from metatune.env.tvm_setup import use_threads
    from metatune.tune.model_runtime import load_library
    from metatune.workload.model_source import InputSpec, parse_shape

    threads = use_threads(usable_cores())  # before TVM's runtime starts its thread pool
    compiled, inputs = load_library(library)
    if input_shape:
        if inputs and len(inputs) != len(input_shape):
            raise MetatuneError(f"{library} takes {len(inputs)} input(s) ({', '.join(i.name for i in inputs)}), "
                                f"and --input-shape gave {len(input_shape)}: give one per input, in order")
        # LIBRARY.json's names and dtypes stay; without it, float32 inputs named by position
        known = inputs or [InputSpec(f"input{i}", (), "float32") for i in range(len(input_shape))]
        inputs = [InputSpec(spec.name, parse_shape(text), spec.dtype) for spec, text in zip(known, input_shape)]
    if not inputs:
        raise MetatuneError(f"{library.with_suffix('.json')} is missing: give each input's shape with --input-shape")
    rng = np.random.default_rng(seed)
    values = [spec.random(rng) for spec in inputs]
    try:
        outputs = compiled(values)
    except Exception as err:  # TVM checks shapes and dtypes against the compiled function's
        raise MetatuneError(f"{library} does not run on inputs {[i.shape for i in inputs]}: "
                            f"{str(err).strip().splitlines()[-1][:300]}") from None
    latency_ms = compiled.latency_ms(values, repeat)
    result = {"library": str(library), "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
                                                  for i in inputs],
              "outputs": [list(out.shape) for out in outputs], "repeat": repeat, "latency_ms": round(latency_ms, 4),
              "threads": threads}
    if json_out is not None and str(json_out) == "-":
        echo_json(result)
        return
    typer.echo(f"{library}: {latency_ms:.4g} ms (median of {repeat} repeats, {threads} threads); "
               f"inputs {', '.join('x'.join(map(str, i.shape)) for i in inputs)} -> outputs "
               f"{', '.join('x'.join(map(str, s)) for s in result['outputs'])}")
    if json_out is not None:
        write_json(result, json_out)
