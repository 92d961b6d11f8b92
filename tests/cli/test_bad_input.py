"""Bad input through the real CLI, each in its own process: one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from metatune.env.device import usable_cores
from metatune.fileio import REPO_ROOT
from tests.dataset.gpu_sources import SHIPPED_GPU, write_source
from tests.tune.onnx_models import small_cnn
from tests.processes import run_metatune

ZOO = REPO_ROOT / "zoo"


def shipped_entry() -> dict[str, str]:
    """The newest entry of the shipped zoo's index."""
    return json.loads((ZOO / "index.json").read_text())[-1]


SHIPPED_ID = f"{shipped_entry()['device_id']}/{shipped_entry()['version']}"

SPEC = """name: tiny
seed: 1
samples_per_workload: 4
max_gflop: 0.01
families:
  dense:
    workloads: 1
    params: {m: 16, n: 16, k: [16, 32]}
"""

# A case builds its input in tmp_path and returns the command line and extra environment variables.
Build = Callable[[Path], tuple[list[str], dict[str, str]]]


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in `cwd` (a temporary directory: a default output folder would land there)."""
    return run_metatune(args, env=env, cwd=cwd, timeout=300)


def build_spec(content: str | bytes) -> Build:
    def build(tmp: Path) -> tuple[list[str], dict[str, str]]:
        path = tmp / "spec.yaml"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return ["dataset", "build", "--spec", str(path), "--out", str(tmp / "ds")], {}

    return build


def tune(checkpoint: str, *extra: str) -> list[str]:
    return ["tune", "--workload", "dense:m=16,n=16,k=16", "--trials", "2", "--checkpoint", checkpoint, *extra]


def shipped_weights() -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with safe_open(str(ZOO / shipped_entry()["path"] / "model.safetensors"), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def build_checkpoint(edit: Callable[[dict[str, np.ndarray], dict[str, str]], None]) -> Build:
    """The shipped zoo weights, edited, as a checkpoint file."""

    def build(tmp: Path) -> tuple[list[str], dict[str, str]]:
        tensors, metadata = shipped_weights()
        edit(tensors, metadata)
        path = tmp / "model.safetensors"
        save_file(tensors, str(path), metadata=metadata)
        return tune(str(path), "--db", str(tmp / "db")), {}

    return build


def file_checkpoint(tmp: Path, name: str, data: bytes) -> tuple[list[str], dict[str, str]]:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return tune(str(tmp / name.split("/")[0]), "--db", str(tmp / "db")), {}


def tampered_zoo(tmp: Path) -> Path:
    """A copy of the shipped zoo whose weights lost a byte's worth of bits."""
    zoo = tmp / "zoo"
    shutil.copytree(ZOO, zoo)
    weights = zoo / shipped_entry()["path"] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    return zoo


def wrong_shape(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    tensors["model.head.layers.0.weight"] = tensors["model.head.layers.0.weight"][:, :-1].copy()


def bad_model_config(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    metadata["model_config"] = json.dumps({**json.loads(metadata["model_config"]), "hidden": "wide"})


def huge_model_config(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Sizes whose model would need terabytes: the check must compare shapes without building it."""
    metadata["model_config"] = json.dumps({**json.loads(metadata["model_config"]), "hidden": 10**9})


def unknown_model_config_key(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    metadata["model_config"] = json.dumps({**json.loads(metadata["model_config"]), "depth": 3})


def held_out_collision(tmp: Path) -> tuple[list[str], dict[str, str]]:
    text = SPEC.replace("k: [16, 32]", "k: 16") + 'held_out:\n  workloads: ["dense:m=16,n=16,k=16"]\n'
    return build_spec(text)(tmp)


def corrupt_card(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "ds").mkdir()
    (tmp / "ds" / "card.json").write_text('{"dataset_id": ')
    return ["dataset", "info", str(tmp / "ds")], {}


def dataset_import(source: Path, tmp: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
    return ["dataset", "import", str(source), "--out", str(tmp / "ds"), *extra], {}


def torn_source(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """A MetaSchedule run killed in the middle of appending its third record."""
    path = write_source(tmp / "src", records=3, failed=0) / "database_tuning_record.json"
    path.write_text(path.read_text()[:-200])
    return dataset_import(path.parent, tmp)


def card_of(shipped: Path) -> Callable[[Path], Path]:
    """A dataset folder holding only the card of a shipped dataset (its device is what counts)."""

    def make(tmp: Path) -> Path:
        (tmp / "ds").mkdir()
        shutil.copy(shipped / "card.json", tmp / "ds" / "card.json")
        return tmp / "ds"

    return make


def import_into_cpu_dataset(tmp: Path) -> tuple[list[str], dict[str, str]]:
    card_of(REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c")(tmp)
    return dataset_import(write_source(tmp / "src", records=2, failed=0), tmp)


def build_into_gpu_dataset(tmp: Path) -> tuple[list[str], dict[str, str]]:
    card_of(SHIPPED_GPU)(tmp)
    return build_spec(SPEC)(tmp)


def db_is_a_file(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "db").write_text("")
    return ["tune", "--workload", "dense:m=16,n=16,k=16", "--db", str(tmp / "db")], {}


def output_inside_a_file(*args: str) -> Build:
    """A command whose last option is an output folder, given one below a file: refused before any work."""
    def build(tmp: Path) -> tuple[list[str], dict[str, str]]:
        (tmp / "afile").write_text("")
        return [*args, str(tmp / "afile" / "out")], {}
    return build


SMALL_NET = Path(__file__).parents[1] / "tune" / "data" / "small_net.py"


def tune_model(spec: str, *extra: str) -> Build:
    """`tune --model SPEC` on a file that `spec` names under tmp ({tmp} is replaced)."""
    def build(tmp: Path) -> tuple[list[str], dict[str, str]]:
        small_cnn(tmp / "fixed.onnx")
        small_cnn(tmp / "dynamic.onnx", batch="N")
        small_cnn(tmp / "celu.onnx", op="Celu")
        (tmp / "text.onnx").write_text("not an ONNX model\n")
        args = [a.replace("{tmp}", str(tmp)) for a in ("--model", spec, *extra)]
        return ["tune", *args, "--trials", "1", "--db", str(tmp / "db")], {}

    return build


CASES: list[tuple[str, Build, str]] = [
    # workloads
    ("unknown family", lambda tmp: (["measure", "nosuchop:m=1", "--random", "2"], {}), "unknown family"),
    ("workload missing a parameter", lambda tmp: (["measure", "dense:m=1,n=2"], {}), "missing parameter"),
    ("buffer beyond int32 indexing", lambda tmp: (["measure", "dense:m=16,n=16,k=1000000000"], {}),
     "data buffer (16x1000000000) has 16000000000 elements"),
    ("tuning a buffer beyond int32 indexing",
     lambda tmp: (["tune", "--workload", "batch_matmul:b=65536,m=256,n=256,k=1", "--db", str(tmp / "db")], {}),
     "output buffer (65536x256x256)"),
    # dataset specs
    ("spec file missing", lambda tmp: (["dataset", "build", "--spec", str(tmp / "no.yaml"), "--out", str(tmp)], {}),
     "spec file not found"),
    ("spec is a directory", lambda tmp: (["dataset", "build", "--spec", str(tmp), "--out", str(tmp / "ds")], {}),
     "Is a directory"),
    ("spec not UTF-8", build_spec(b"name: \xff\xfe\n"), "not UTF-8"),
    ("spec malformed YAML", build_spec("name: x\n  bad: [\n"), "not valid YAML: line 2"),
    ("spec duplicate key", build_spec(SPEC.replace("m: 16,", "m: 16, m: 32,")), "key 'm' is given twice"),
    ("spec duplicate top-level key", build_spec(SPEC + "seed: 2\n"), "key 'seed' is given twice"),
    ("spec unknown key", build_spec(SPEC + "colour: red\n"), "colour: Extra inputs are not permitted"),
    ("spec no families", build_spec(SPEC.split("families:")[0] + "families: {}\n"), "families: Dictionary should"),
    ("spec negative seed", build_spec(SPEC.replace("seed: 1", "seed: -1")), "seed: Input should be greater"),
    ("spec boolean size", build_spec(SPEC.replace("m: 16", "m: true")), "params.m: Input should be a valid integer"),
    ("spec quoted size", build_spec(SPEC.replace("m: 16", 'm: "16"')), "got '16'"),
    ("spec range of three", build_spec(SPEC.replace("[16, 32]", "[16, 32, 64]")), "params.k: List should have"),
    ("spec held-out collision", held_out_collision, "500 were held-out workloads"),
    # checkpoints
    ("checkpoint missing", lambda tmp: (tune(str(tmp / "nope.safetensors")), {}), "neither a file or directory"),
    ("checkpoint random bytes", lambda tmp: file_checkpoint(tmp, "random.bin", os.urandom(4096)),
     "is not a safetensors checkpoint"),
    ("checkpoint directory of garbage", lambda tmp: file_checkpoint(tmp, "run/model.safetensors", os.urandom(512)),
     "is not a safetensors checkpoint"),
    ("checkpoint is a pickle", lambda tmp: file_checkpoint(tmp, "model.pt", pickle.dumps({"w": np.zeros(3)})),
     "is not a safetensors checkpoint"),
    ("checkpoint wrong tensor shape", build_checkpoint(wrong_shape),
     "tensor model.head.layers.0.weight has shape [64, 127], its model_config implies [64, 128]"),
    ("checkpoint bad model_config", build_checkpoint(bad_model_config),
     "model_config.hidden = 'wide' is not a valid int"),
    ("checkpoint huge model_config", build_checkpoint(huge_model_config), "its model_config implies"),
    ("checkpoint unknown model_config key", build_checkpoint(unknown_model_config_key),
     "metadata 'model_config' is not a model config"),
    ("checkpoint without metadata", build_checkpoint(lambda tensors, metadata: metadata.clear()),
     "not a metatune checkpoint"),
    ("checkpoint unknown zoo id", lambda tmp: (tune("x86_64-nosuchcpu-2c/v1"), {}),
     "no checkpoint 'x86_64-nosuchcpu-2c/v1'"),
    ("zoo checkpoint tampered", lambda tmp: (tune(SHIPPED_ID), {"METATUNE_ZOO": str(tampered_zoo(tmp))}),
     "the weights were modified or corrupted"),
    ("zoo version tampered, named by its path",
     lambda tmp: (tune(str(tampered_zoo(tmp) / shipped_entry()["path"])), {}),
     "the weights were modified or corrupted"),
    ("zoo verify tampered", lambda tmp: (["zoo", "verify", "--zoo", str(tampered_zoo(tmp))], {}), "1 problem(s)"),
    # tuning options
    ("db is a file", db_is_a_file, "is a file; give a new or existing folder"),
    ("db below a file", output_inside_a_file("tune", "--workload", "dense:m=16,n=16,k=16", "--db"),
     "afile is a file, not a folder"),
    ("bench out below a file", output_inside_a_file("bench", "--suite", "quick", "--out"), "afile is a file"),
    ("dataset build out below a file",
     output_inside_a_file("dataset", "build", "--spec", str(REPO_ROOT / "datasets" / "specs" / "adapt-cpu.yaml"),
                          "--out"), "afile is a file"),
    ("train out below a file", output_inside_a_file("train", "--data", "d", "--config", "c", "--out"),
     "afile is a file"),
    ("dataset build with more workers than cores",
     lambda tmp: (["dataset", "build", "--spec", str(REPO_ROOT / "datasets" / "specs" / "adapt-cpu.yaml"), "--out",
                   str(tmp / "ds"), "--workers", str(usable_cores() + 1)], {}), "more than this machine's"),
    ("trials beyond 10**7",
     lambda tmp: (["tune", "--workload", "dense:m=16,n=16,k=16", "--trials", "99999999999999999999999"], {}),
     "--trials 99999999999999999999999 is more than 10000000"),
    ("tune on an unknown runner",
     lambda tmp: (["tune", "--workload", "dense:m=16,n=16,k=16", "--runner", "bogus", "--db", str(tmp / "db")], {}),
     "runner 'bogus': expected 'local' or rpc://HOST:PORT/KEY"),
    ("tune for a GPU this machine does not have",  # no GPU here, or another model than a 2080 Ti
     lambda tmp: (["tune", "--workload", "dense:m=16,n=16,k=16", "--target", "nvidia/geforce-rtx-2080-ti",
                   "--db", str(tmp / "db")], {}),
     "cuda-sm75-rtx2080ti"),
    # datasets
    ("dataset info without a card", lambda tmp: (["dataset", "info", str(tmp)], {}), "is not a dataset"),
    ("dataset card not JSON", corrupt_card, "not a readable dataset card"),
    ("dataset build into another device's dataset", build_into_gpu_dataset, "holds measurements of cuda-sm90-h100"),
    # dataset import
    ("import source missing", lambda tmp: dataset_import(tmp / "nope", tmp), "no such file or directory"),
    ("import not a database", lambda tmp: dataset_import(tmp, tmp), "is not a TVM database"),
    ("import torn record line", torn_source, "line 3 of database_tuning_record.json is not a tuning record"),
    ("import workload mismatch",
     lambda tmp: dataset_import(write_source(tmp / "src", records=2, failed=0, meta=False), tmp,
                                "--workload", "dense:m=1,n=64,k=128"),
     "the database's workload is not dense:m=1,n=64,k=128"),
    ("import without a workload", lambda tmp: dataset_import(write_source(tmp / "src", records=2, meta=False), tmp),
     "has no meta.json naming its workload"),
    ("import bad split",
     lambda tmp: dataset_import(write_source(tmp / "src", records=2, meta=False), tmp, "--workload",
                                "dense:m=1,n=64,k=256", "--split", "test"),
     "split 'test' is neither train nor heldout"),
    ("import into another device's dataset", import_into_cpu_dataset,
     "holds measurements of x86_64-sapphirerapids-2c, these records are of cuda-sm90-h100"),
    # zoo adapt: refused before anything is measured
    ("model file missing", tune_model("{tmp}/none.onnx"), "no such file"),
    ("model file not ONNX", tune_model("{tmp}/text.onnx"), "is not a valid ONNX model"),
    ("model operator Relax lacks", tune_model("{tmp}/celu.onnx"), "not supported for frontend ONNX: Celu"),
    ("model dynamic dimension without --input-shape", tune_model("{tmp}/dynamic.onnx"),
     "input 'x' of"),
    ("model callable missing", tune_model(f"{SMALL_NET}:nothing", "--input-shape", "1,3,16,16"),
     "has no callable 'nothing'"),
    ("model callable raises", tune_model(f"{SMALL_NET}:broken", "--input-shape", "1,3,16,16"),
     "broken() raised ValueError"),
    ("model export into a missing folder", tune_model("{tmp}/fixed.onnx", "--export", "{tmp}/no/net.so"),
     "no such folder"),
    ("model bad input shape", tune_model("{tmp}/fixed.onnx", "--input-shape", "1,3,x"), "--input-shape"),
    ("model on a remote runner", tune_model("{tmp}/fixed.onnx", "--runner", "rpc://127.0.0.1:9190/key"),
     "it takes no --runner"),
    ("model timed in too few passes", tune_model("{tmp}/fixed.onnx", "--reference-passes", "5"),
     "--reference-passes 5: at least 9"),
    ("run a library that is missing", lambda tmp: (["run", str(tmp / "none.so")], {}), "no such file"),
    ("run a folder", lambda tmp: (["run", str(tmp)], {}), "is a folder; give the exported library"),
    ("measure into a missing folder", lambda tmp: (["measure", "dense:m=16,n=16,k=16", "--random", "2", "--json",
                                                    str(tmp / "no" / "out.json")], {}), "no such folder"),
    ("tune into a missing folder", lambda tmp: (["tune", "--workload", "dense:m=16,n=16,k=16", "--trials", "2",
                                                 "--strategy", "random", "--db", str(tmp / "db"), "--json",
                                                 str(tmp / "no" / "out.json")], {}), "no such folder"),
    ("encode into a folder", lambda tmp: (["encode", "dense:m=16,n=16,k=16", "--random", "2", "--json", str(tmp)],
                                          {}), "is a folder"),
    ("adapt from an unknown device", lambda tmp: (["zoo", "adapt", "--from", "x86_64-nosuchcpu-2c",
                                                   "--out", str(tmp / "run")], {}),
     "no checkpoint 'x86_64-nosuchcpu-2c'"),
    ("adapt a GPU checkpoint to a CPU", lambda tmp: (["zoo", "adapt", "--from", "cuda-sm90-h100",
                                                      "--out", str(tmp / "run")], {}),
     "adapt from a checkpoint of the same kind of device"),
    ("adapt for a GPU this machine does not have",
     lambda tmp: (["zoo", "adapt", "--from", SHIPPED_ID, "--target", "nvidia/geforce-rtx-2080-ti",
                   "--out", str(tmp / "run")], {}),
     "cuda-sm75-rtx2080ti"),
]


@pytest.mark.parametrize("build, fragment", [pytest.param(b, f, id=name) for name, b, f in CASES])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, build: Build, fragment: str) -> None:
    args, env = build(tmp_path)
    out = run(args, env, tmp_path)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]


def test_nearest_device_warning_is_one_line_without_code_location(tmp_path: Path) -> None:
    """A zoo whose only checkpoint claims another device of this machine's family: resolving warns
    (printed by -v), then loading stops at the card that disagrees with the index."""
    device = json.loads(run(["device", "--json"], {}, tmp_path).stdout)
    zoo = tmp_path / "zoo"
    shutil.copytree(ZOO, zoo)
    index = [e for e in json.loads((zoo / "index.json").read_text()) if e["isa_family"] == device["arch"]][:1]
    index[0].update(device_id=f"{device['arch']}-elsewhere-1c")
    (zoo / "index.json").write_text(json.dumps(index))
    out = run(tune("auto", "--db", str(tmp_path / "db"), "-v"), {"METATUNE_ZOO": str(zoo)}, tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"warning: no zoo checkpoint for device {device['device_id']}; using "), out.stderr
    assert "make train-zoo" in lines[0] and lines[-1].startswith("error: "), out.stderr
    assert ".py" not in out.stderr and "warnings.warn" not in out.stderr  # Python's default format shows both
