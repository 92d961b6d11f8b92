"""Bring your own model: ONNX files, FILE.py:CALLABLE and torchvision:NAME through `metatune tune
--model`, `--export` and `metatune run` (real TVM, onnxruntime and PyTorch; small networks)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from metatune import MetatuneError
from metatune.workload.model_source import ModelSource, parse_shape
from tests.tune.onnx_models import small_cnn
from tests.processes import run_metatune

DATA = Path(__file__).parent / "data"
SMALL_NET = f"{DATA / 'small_net.py'}:make"


def metatune(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_metatune(list(args), cwd=cwd, timeout=900)


def test_specs_parse_to_their_kind_and_name(tmp_path: Path) -> None:
    onnx_file = small_cnn(tmp_path / "net.onnx")
    assert ModelSource.parse("tinycnn").kind == "registry"
    assert (ModelSource.parse("torchvision:mobilenet_v2").kind, ModelSource.parse("torchvision:mobilenet_v2").name) \
        == ("torchvision", "mobilenet_v2")
    python = ModelSource.parse(SMALL_NET, [(1, 3, 16, 16)])
    assert (python.kind, python.name, python.input_shapes) == ("python", "small_net-make", ((1, 3, 16, 16),))
    onnx = ModelSource.parse(str(onnx_file))
    assert (onnx.kind, onnx.name, onnx.library) == ("onnx", "net", "onnxruntime")
    assert python.library == "PyTorch eager"
    assert parse_shape("1,3,224,224") == (1, 3, 224, 224)


@pytest.mark.parametrize("spec, fragment", [
    ("nosuchnet", "unknown model 'nosuchnet'"),
    ("missing.onnx", "no such file missing.onnx"),
    ("missing.py:make", "no such file missing.py"),
    (f"{DATA / 'small_net.py'}:9lives", "is not a Python name"),
    ("torchvision:", "name the torchvision model"),
    (str(DATA / "small_net.py"), "as FILE.py:CALLABLE"),  # an existing file, yet not an ONNX model
    ("resnet.pth", "holds weights, not a network"),  # not reported as a broken ONNX file
])
def test_bad_specs_are_named(spec: str, fragment: str) -> None:
    with pytest.raises(MetatuneError, match=re.escape(fragment)):
        ModelSource.parse(spec)


@pytest.mark.parametrize("text", ["1,3,a", "1,0,4", ""])
def test_bad_shapes_are_refused(text: str) -> None:
    with pytest.raises(MetatuneError, match="--input-shape"):
        parse_shape(text)


def test_onnx_inputs_come_from_the_file_or_the_command_line(tmp_path: Path) -> None:
    from metatune.workload.relax_tasks import load_model

    fixed = load_model(ModelSource.parse(str(small_cnn(tmp_path / "fixed.onnx"))))
    assert [(i.name, i.shape, i.dtype) for i in fixed.inputs] == [("x", (1, 3, 16, 16), "float32")]
    dynamic = ModelSource.parse(str(small_cnn(tmp_path / "dyn.onnx", batch="N")))
    with pytest.raises(MetatuneError, match=r"input 'x' of .*dyn.onnx has no fixed shape \(\?, 3, 16, 16\)"):
        load_model(dynamic)
    given = load_model(ModelSource.parse(dynamic.spec, [(4, 3, 16, 16)]))
    assert given.inputs[0].shape == (4, 3, 16, 16)
    x = given.example_inputs()
    assert [o.shape for o in given.expected_outputs(x)] == [(4, 10)] and given.reference_outputs(x) is None
    with pytest.raises(MetatuneError, match="does not fit input 'x'"):
        load_model(ModelSource.parse(dynamic.spec, [(4, 3, 8, 8)]))
    with pytest.raises(MetatuneError, match="given 2 time"):
        load_model(ModelSource.parse(dynamic.spec, [(1, 3, 16, 16)] * 2))


def test_onnx_operator_relax_lacks_is_named(tmp_path: Path) -> None:
    from metatune.workload.relax_tasks import import_model

    with pytest.raises(MetatuneError, match="Relax cannot import .*not supported for frontend ONNX: Celu"):
        import_model(ModelSource.parse(str(small_cnn(tmp_path / "celu.onnx", op="Celu"))))


def test_not_onnx_is_refused(tmp_path: Path) -> None:
    from metatune.workload.relax_tasks import load_model

    path = tmp_path / "notes.onnx"
    path.write_text("these are not protobuf bytes\n" * 20)
    with pytest.raises(MetatuneError, match="is not a valid ONNX model"):
        load_model(ModelSource.parse(str(path)))


@pytest.mark.parametrize("attr, fragment", [
    ("broken", "broken() raised ValueError: weights file not found"),
    ("not_a_module", "returned an object of type int, not a torch.nn.Module"),
    ("nothing", "has no callable 'nothing'"),
    ("exits", "exits() called sys.exit(2)"),  # a SystemExit would have ended metatune itself
])
def test_python_callables_that_fail_are_named(attr: str, fragment: str) -> None:
    from metatune.workload.relax_tasks import load_model

    with pytest.raises(MetatuneError, match=re.escape(fragment)):
        load_model(ModelSource.parse(f"{DATA / 'small_net.py'}:{attr}", [(1, 3, 16, 16)]))


def test_a_script_parsing_its_command_line_at_import_sees_none_of_metatunes(monkeypatch) -> None:
    from metatune.workload.relax_tasks import load_model

    monkeypatch.setattr(sys, "argv", ["metatune", "tune", "--model", "x", "--trials", "4"])
    model = load_model(ModelSource.parse(f"{DATA / 'script_net.py'}:make", [(1, 3, 8, 8)]))
    assert model.expected_outputs(model.example_inputs())[0].shape == (1, 8, 6, 6)
    assert sys.argv == ["metatune", "tune", "--model", "x", "--trials", "4"]


def test_python_model_needs_its_input_shape_and_folds_its_batchnorm() -> None:
    from metatune.workload.relax_tasks import import_model, load_model

    with pytest.raises(MetatuneError, match="input 'input0' of .*small_net.py:make has no fixed shape; give it with "
                                            "--input-shape"):  # a shape it does not declare at all
        load_model(ModelSource.parse(SMALL_NET))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = import_model(ModelSource.parse(SMALL_NET, [(2, 3, 16, 16)]))
    assert not [w for w in caught if "LeafSpec" in str(w.message)], "the frontend's torch deprecation reached the user"
    model = imported.model
    assert (model.folded_batchnorms, model.left_batchnorms) == (1, 0)
    x = model.example_inputs()
    folded, source = model.reference_outputs(x), model.expected_outputs(x)
    assert folded[0].shape == source[0].shape == (2, 10)
    assert np.allclose(folded[0], source[0], atol=1e-5) and not np.allclose(source[0], 0)
    again = load_model(ModelSource.parse(SMALL_NET, [(2, 3, 16, 16)]))  # seeded: the same weights and inputs
    assert np.array_equal(again.expected_outputs(again.example_inputs())[0], source[0])


def test_torchvision_model_with_random_weights() -> None:
    from metatune.workload.relax_tasks import load_model

    model = load_model(ModelSource.parse("torchvision:mobilenet_v3_small", [(1, 3, 32, 32)]))
    assert model.inputs[0].shape == (1, 3, 32, 32) and model.folded_batchnorms > 10
    with pytest.raises(MetatuneError, match="unknown torchvision model 'resnet_nine'"):
        load_model(ModelSource.parse("torchvision:resnet_nine"))


def test_torchvision_backbones_are_random_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segmentation model's backbone defaults to ImageNet weights even with weights=None: none is downloaded."""
    from metatune.workload.torch_model import _torchvision_model, import_torchvision

    def no_download(url: str, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"downloaded {url}")

    monkeypatch.setattr(import_torchvision().models._api, "load_state_dict_from_url", no_download)
    assert sum(p.numel() for p in _torchvision_model("lraspp_mobilenet_v3_large").parameters()) > 1e6


def test_a_model_file_may_define_dataclasses(tmp_path: Path) -> None:
    """Python's dataclasses look their class's module up in sys.modules while the file runs."""
    from metatune.workload.torch_model import _python_model

    file = tmp_path / "configured.py"
    file.write_text("from __future__ import annotations\nimport dataclasses\nimport torch\n\n"
                    "@dataclasses.dataclass\nclass Config:\n    width: int = 4\n\n"
                    "def build():\n    return torch.nn.Linear(Config().width, 2)\n")
    assert _python_model(f"{file}:build").out_features == 2


def test_a_model_callable_may_import_its_neighbours(tmp_path: Path) -> None:
    """CALLABLE() runs with the file's folder on sys.path, as the file itself does; not after."""
    from metatune.workload.torch_model import _python_model

    (tmp_path / "layers_of_mine.py").write_text("import torch\n\ndef head():\n    return torch.nn.Linear(3, 5)\n")
    file = tmp_path / "lazy.py"
    file.write_text("def build():\n    import layers_of_mine\n    return layers_of_mine.head()\n")
    assert _python_model(f"{file}:build").out_features == 5
    assert str(tmp_path) not in sys.path


def test_onnx_model_tunes_exports_and_runs_in_a_fresh_process(tmp_path: Path) -> None:
    """The whole path a user takes: tune an ONNX file, check it against onnxruntime, export it,
    and load the library in another process, with metatune and with TVM alone."""
    onnx_file = small_cnn(tmp_path / "net.onnx")
    library = tmp_path / "net.so"
    res = metatune("tune", "--model", str(onnx_file), "--strategy", "random", "--trials", "8", "--db",
                   str(tmp_path / "db"), "--json", str(tmp_path / "r.json"), "--export", str(library),
                   "--reference-passes", "9", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["verified"] and result["max_rel_error"] < 1e-4 and result["reference"] == "onnxruntime"
    assert result["model_ms"] > 0 and result["reference_ms"] > 0 and result["trials"] >= 8
    assert result["comparison"]["library"] == "onnxruntime" and result["comparison"]["reference"]["max_rel_error"] \
        is None  # onnxruntime runs the file itself: nothing to check it against
    assert result["inputs"] == [{"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert "Scope Saving" not in res.stderr
    assert json.loads(library.with_suffix(".json").read_text())["inputs"] == result["inputs"]

    ran = metatune("run", str(library), "--repeat", "3", "--json", "-", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["outputs"] == [[1, 10]] and report["latency_ms"] > 0 and "Scope Loaded" not in ran.stderr

    import onnxruntime

    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    code = ("import sys, numpy as np, tvm\nfrom tvm import relax\n"
            f"vm = relax.VirtualMachine(tvm.runtime.load_module({str(library)!r}), tvm.cpu())\n"
            f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
            "out = vm['main'](tvm.runtime.tensor(x))\n"
            "np.save(sys.argv[1], (out if hasattr(out, 'numpy') else out[0]).numpy())\n")
    np.save(tmp_path / "x.npy", x)
    alone = subprocess.run([sys.executable, "-c", code, str(tmp_path / "y.npy")], capture_output=True, text=True,
                           timeout=120)
    assert alone.returncode == 0, alone.stderr
    expected = onnxruntime.InferenceSession(str(onnx_file)).run(None, {"x": x})[0]
    assert np.allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)

    wrong = metatune("run", str(library), "--input-shape", "2,3,16,16", cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: ") and "Traceback" not in wrong.stderr
    two = metatune("run", str(library), "--input-shape", "1,3,16,16", "--input-shape", "1,3,16,16", cwd=tmp_path)
    assert two.returncode == 2 and "takes 1 input(s) (x)" in two.stderr and "Traceback" not in two.stderr


def test_python_model_reference_is_built_from_its_spec_in_a_fresh_process() -> None:
    """The reference process gets the SPEC and the --input-shape values, not the network."""
    from metatune.measure.reference_timing import MIN_PASSES, ReferenceSpec, compare

    comparison = compare(ReferenceSpec.model(ModelSource.parse(SMALL_NET, [(2, 3, 16, 16)]), threads=1), None,
                         passes=MIN_PASSES, max_passes=MIN_PASSES)
    assert comparison.spec.inputs == ((2, 3, 16, 16),) and comparison.spec.library == "PyTorch eager"
    assert len(comparison.reference.passes_ms) == MIN_PASSES and comparison.reference.median_ms > 0
    assert comparison.max_rel_error is not None and comparison.max_rel_error < 1e-4  # BatchNorm folding checked


# Slow: after loading (the tests above, for real), these take the path tinycnn's end-to-end test
# and the ONNX test above take; kept to show the whole command on each kind of PyTorch source.
@pytest.mark.slow
@pytest.mark.parametrize("spec, shape", [(SMALL_NET, "1,3,16,16"), ("torchvision:mobilenet_v3_small", "1,3,32,32")],
                         ids=["python-callable", "torchvision"])
def test_pytorch_models_tune_and_verify(tmp_path: Path, spec: str, shape: str) -> None:
    res = metatune("tune", "--model", spec, "--input-shape", shape, "--strategy", "random", "--trials", "4",
                   "--db", str(tmp_path / "db"), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["verified"] and result["max_rel_error"] < 1e-4 and result["reference"] == "PyTorch eager"
    assert result["model"] == spec and result["inputs"][0]["shape"] == [int(d) for d in shape.split(",")]
    assert result["trials"] >= 4 and result["comparison"]["reference"]["max_rel_error"] < 1e-4  # BN folding


def test_a_model_torch_export_cannot_run_is_one_line_without_torchs_traceback() -> None:
    from metatune.workload.relax_tasks import import_model

    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    logger = logging.getLogger("torch._subclasses.fake_tensor")  # where torch logs its traceback of the failed op
    logger.addHandler(handler)
    try:
        with pytest.raises(MetatuneError, match=r"torch.export cannot capture .* for inputs \[\(3, 7\)\]: RuntimeError"):
            import_model(ModelSource.parse(f"{DATA / 'small_net.py'}:head", [(3, 7)]))  # it takes 10 features
    finally:
        logger.removeHandler(handler)
    assert not logged, [r.getMessage() for r in logged]
