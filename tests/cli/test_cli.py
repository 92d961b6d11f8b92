import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from metatune import __version__


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metatune", *args], capture_output=True, text=True, timeout=300)


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"metatune {__version__}"


def test_workloads_list_json():
    data = json.loads(run("workloads", "list", "--json").stdout)
    assert set(data["families"]) == {
        "conv1d", "conv1d_transpose", "conv2d", "conv2d_bias", "conv2d_bias_relu", "conv2d_bias_add_relu",
        "conv2d_transpose", "conv2d_winograd", "depthwise_conv2d", "dense", "dense_bias_relu", "dense_bias",
        "batch_matmul",
    }
    assert data["families"]["conv2d"]["params"] == ["n", "c", "h", "w", "k", "r", "s", "stride", "pad"]
    assert len(data["suites"]["resnet18"]) == 13 and data["suites"]["resnet18"]["C6"].startswith("conv2d:")
    assert list(data["suites"]["quick"]) == ["dense", "conv2d", "depthwise_conv2d"]  # bench's names
    assert {"other-networks", "search-validation"} <= set(data["suites"])


def test_workloads_list_table_shows_families_and_suites():
    out = run("workloads", "list").stdout
    for name in ("conv1d_transpose", "batch_matmul", "resnet18", "quick", "search-validation", "depthwise_conv2d"):
        assert name in out


@pytest.mark.parametrize(
    "workload, fragment",
    [
        ("nosuchop:m=1", "unknown family"),
        ("conv2d:n=1,c=3,h=2,w=2,k=4,r=7,s=7,stride=1,pad=1", "larger than the padded input"),
        ("dense:m=1,n=2", "missing parameter"),
    ],
)
def test_bad_input_is_one_line_exit_2(workload, fragment):
    out = run("measure", workload, "--random", "2")
    assert out.returncode == 2
    assert fragment in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_every_command_has_help():
    for args in (["--help"], ["workloads", "--help"], ["workloads", "list", "--help"], ["device", "--help"], ["measure", "--help"]):
        out = run(*args)
        assert out.returncode == 0 and "Usage" in out.stdout


def test_tune_help_names_every_strategy():
    from metatune.tune.strategies import STRATEGIES

    out = subprocess.run([sys.executable, "-m", "metatune", "tune", "--help"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0
    named = set(re.findall(r"[\w-]+", out.stdout)) | {f"metatune-{word}" for word in re.findall(r"[\w-]+", out.stdout)}
    assert set(STRATEGIES) <= named


# the command run in this process, then its exit status and whether TVM or PyTorch had been imported
SHIPPED_DATASET = Path(__file__).resolve().parents[2] / "datasets" / "x86_64-sapphirerapids-2c"
IMPORTS_ON_EXIT = """import runpy, sys
sys.argv = ["metatune", *sys.argv[1:]]
try:
    runpy.run_module("metatune", run_name="__main__")
except SystemExit as stop:
    print(stop.code, ",".join(m for m in ("tvm", "torch") if m in sys.modules) or "-")
"""


@pytest.mark.parametrize("args, fragment, imported", [
    (["tune", "--workload", "C99"], "unknown workload 'C99'", "-"),
    (["tune", "--workload", "C6", "--strategy", "bogus"], "unknown strategy 'bogus'", "-"),
    (["tune", "--model", "resnet18", "--strategy", "gradient"], "strategy 'gradient' is not available for --model", "-"),
    # the model registry's networks are PyTorch modules
    (["tune", "--model", "resnet81"], "unknown model 'resnet81'", "torch"),
    (["tune", "--model", "missing.onnx"], "missing.onnx", "torch"),
    (["train", "--data", "no-such-dataset", "--config", "x.yaml", "--out", "run"], "no-such-dataset is not a dataset",
     "-"),
    (["train", "--data", str(SHIPPED_DATASET), "--config", "no-such.yaml", "--out", "run"],
     "training config not found: no-such.yaml", "-"),
    (["evaluate", "--data", "no-such-dataset", "--run", "run"], "no-such-dataset is not a dataset", "-"),
    (["learning-curve", "--data", "no-such-dataset", "--config", "x.yaml"], "no-such-dataset is not a dataset", "-"),
    (["bench", "--suite", "resnet81"], "unknown suite 'resnet81'", "-"),
    (["run", "no-such-model.so"], "no such file no-such-model.so", "-"),
])
def test_a_mistyped_name_or_path_is_refused_before_tvm_is_imported(args, fragment, imported):
    """Seconds of imports saved on the most common mistakes."""
    out = subprocess.run([sys.executable, "-c", IMPORTS_ON_EXIT, *args], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["2", imported] and fragment in out.stderr, out.stderr


def test_device_json():
    data = json.loads(run("device", "--json").stdout)
    assert data["device_id"].startswith(data["arch"])
    assert data["target"]["kind"] == "llvm" and data["num_cores"] >= 1


def test_measure_json(tmp_path):
    path = tmp_path / "m.json"
    out = run("measure", "dense:m=16,n=16,k=16", "--random", "4", "--json", str(path))
    assert out.returncode == 0, out.stderr
    data = json.loads(path.read_text())
    assert data["measured"] + sum(data["failures"].values()) == data["sampled"] == 4
    assert len(data["candidates"]) == 4 and data["best_gflops"] > 0


def test_a_warning_is_shown_once_per_process():
    """A bench resolves the same checkpoint for every run: its nearest-device warning is printed once."""
    import io

    from metatune.cli.app import show_warning

    out = io.StringIO()
    for message in ("no zoo checkpoint for device A (once)", "no zoo checkpoint for device A (once)",
                    "another warning (once)"):
        show_warning(UserWarning(message), UserWarning, "tuner.py", 1, file=out)
    assert out.getvalue().splitlines() == ["warning: no zoo checkpoint for device A (once)",
                                           "warning: another warning (once)"]


def test_reference_passes_default_is_the_timing_routines():
    """The CLI states the default without importing the timing module (it loads TVM and torch)."""
    from metatune.cli.common import REFERENCE_PASSES, REFERENCE_PASSES_HELP
    from metatune.measure.reference_timing import MAX_PASSES, PASSES

    assert REFERENCE_PASSES == MAX_PASSES and f"at least {PASSES}" in REFERENCE_PASSES_HELP


def test_json_goes_to_a_file_whole_or_straight_into_a_pipe(tmp_path):
    import os
    import threading
    from pathlib import Path

    from metatune import MetatuneError
    from metatune.cli.common import check_json_out, write_json

    write_json({"best": 2.5}, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == {"best": 2.5} and [p.name for p in tmp_path.iterdir()] \
        == ["r.json"]  # no temporary file left beside it
    pipe = tmp_path / "pipe"  # what `--json >(jq .)` hands over: no folder to put a temporary file in
    os.mkfifo(pipe)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_text()))
    reader.start()
    write_json({"best": 3.5}, pipe)
    reader.join(timeout=10)
    assert json.loads(read[0]) == {"best": 3.5}
    link = tmp_path / "stdout"  # as /dev/stdout is, when the shell redirects it into a file
    link.symlink_to(tmp_path / "r.json")
    write_json({"best": 4.5}, link)
    assert link.is_symlink() and json.loads((tmp_path / "r.json").read_text()) == {"best": 4.5}
    check_json_out(Path("-"), dash_prints=True)
    with pytest.raises(MetatuneError, match="give a file name"):
        check_json_out(Path("-"))


def test_default_tune_folder_is_keyed_by_what_makes_another_run():
    """Re-running a command resumes its folder; another target, runner, seed or checkpoint starts afresh."""
    from metatune.cli.tune import default_db_dir

    base = ("metatune", "dense:m=16,n=16,k=16", None, "local", 0, "auto")
    from metatune.env.device import local_fingerprint

    here = default_db_dir(*base)
    assert here.parent == Path("runs") / "tune" and f"-{local_fingerprint().device_id}-" in here.name
    changed = [base[:2] + ("llvm -mcpu=haswell",) + base[3:], base[:3] + ("rpc://127.0.0.1:9190/cpu",) + base[4:],
               base[:4] + (1, "auto"), base[:5] + ("x86_64-znver5-2c/v2",)]
    assert len({default_db_dir(*base), *(default_db_dir(*args) for args in changed)}) == 5


def test_tune_fails_when_no_trial_succeeded(monkeypatch, tmp_path, capsys):
    """Every trial failed: nothing was tuned, and a script must see it in the exit status."""
    import typer

    from metatune.cli.tune import run_tune
    from metatune.tune import tuner

    failed = tuner.TuneResult(workload="dense:m=16,n=16,k=16", strategy="random", trials=4, best_latency_us=None,
                              best_gflops=None, curve=[0.0] * 4, wall_s=1.0, search_s=0.1, measure_s=0.9, failures=4)
    monkeypatch.setattr(tuner, "tune_workload", lambda *args, **kwargs: failed)
    with pytest.raises(typer.Exit) as stopped:
        run_tune("dense:m=16,n=16,k=16", None, 4, "random", "auto", tmp_path / "db", "local", 4, 0, None)
    assert stopped.value.exit_code == 1
    assert "none of the 4 trials left a kernel to deploy" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["encode", "dense:m=8,n=8,k=8", "--random", "1"],
                                     ["measure", "dense:m=8,n=8,k=8", "--random", "1"],
                                     ["tune", "--workload", "dense:m=8,n=8,k=8", "--trials", "2"],
                                     ["run", "net.so"]])
@pytest.mark.parametrize("seed", ["-1", str(2**31)])
def test_a_seed_numpy_would_refuse_is_refused_before_any_work(command, seed):
    """numpy takes seeds in [0, 2**32) and runs add a repeat's index: a traceback after minutes, otherwise."""
    from typer.testing import CliRunner

    from metatune.cli import app

    result = CliRunner().invoke(app, [*command, "--seed", seed])
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.output, result.output


@pytest.mark.parametrize("command", ["encode", "measure"])
def test_more_random_configurations_than_memory_holds_are_refused(command):
    """Sampling 10**8 of a small space drew for minutes and grew without bound before the first result."""
    from typer.testing import CliRunner

    from metatune.cli import app
    from metatune.cli.common import MAX_RANDOM

    result = CliRunner().invoke(app, [command, "dense:m=8,n=8,k=8", "--random", str(MAX_RANDOM + 1)])
    assert result.exit_code == 2 and "Invalid value for '--random'" in result.output, result.output
