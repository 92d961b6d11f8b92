"""Model zoo: publish / verify / resolve / load, on fake runs made of tiny safetensors files."""

from __future__ import annotations

import json
import os
import sys
import threading
import types
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file
from typer.testing import CliRunner

from metatune import MetatuneError, zoo
from metatune.env.device import DeviceFingerprint
from metatune.zoo import ChecksumError, NoCheckpointError, TemplateVersionError, ZooError, ZooWarning

TV = "test-template-1"
REAL_CODE_TEMPLATE_VERSION = zoo.index.code_template_version

SPR = {
    "arch": "x86_64", "vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) Platinum 8481C",
    "isa_class": "sapphirerapids", "num_cores": 2, "llvm_host_cpu": "sapphirerapids",
    "flags": ["avx", "avx2", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512bw", "avx512f", "avx512vl", "fma"],
    "target": {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2},
}
HASWELL = {**SPR, "cpu_model": "Intel(R) Core(TM) i7-4770", "isa_class": "haswell", "num_cores": 4,
           "llvm_host_cpu": "haswell", "flags": ["avx", "avx2", "fma", "sse4_2"]}
SKYLAKE = {**SPR, "cpu_model": "Intel(R) Xeon(R) Gold 6148", "isa_class": "skylake-avx512",
           "llvm_host_cpu": "skylake-avx512", "flags": ["avx", "avx2", "avx512bw", "avx512f", "avx512vl", "fma"]}
ARM = {"arch": "aarch64", "vendor": "ARM", "cpu_model": "Neoverse-N1", "isa_class": "generic", "num_cores": 8,
       "llvm_host_cpu": "neoverse-n1", "flags": ["asimd", "neon"], "target": {}}


@pytest.fixture(autouse=True)
def code_version(monkeypatch):
    """The encoder is written elsewhere: pin the code's template version for these tests."""
    monkeypatch.setattr(zoo.index, "code_template_version", lambda arch: TV)
    monkeypatch.delenv(zoo.ZOO_ENV, raising=False)


def make_run(base: Path, device: dict, name: str = "run", *, seed: int = 0, template: str = TV, **card_updates) -> Path:
    run = base / name
    run.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    tensors = {"conv.weight": torch.randn(4, 3, generator=g), "head.bias": torch.randn(3, generator=g)}
    metadata = {"model_config": json.dumps({"hidden": 4, "layers": 2}), "normalization": json.dumps({"mean": 1.5})}
    save_file(tensors, str(run / zoo.WEIGHTS_FILE), metadata=metadata)
    card = {
        "device": dict(device), "template_version": template,
        "dataset": {"id": "x86_64-sapphirerapids-2c", "records": 1200, "workloads": 40, "spec_hash": "abc123"},
        "train_config": {"epochs": 3, "lr": 0.001},
        "metrics": {"heldout": {"conv2d": {"spearman": 0.81, "top1_ratio": 0.9}, "dense": {"spearman": 0.77}},
                    "spearman_mean": 0.79},
        "versions": {"metatune": "0.1.0", "tvm": "0.27.0", "torch": "2.13.0"},
        "created": "2025-11-22T03:00:00+00:00", "train_wall_s": 12.5,
    }
    card.update(card_updates)
    (run / zoo.CARD_FILE).write_text(json.dumps(card))
    (run / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    return run


def device_id(fp: dict) -> str:
    return f"{fp['arch']}-{fp['isa_class']}-{fp['num_cores']}c"


# -- publish ----------------------------------------------------------------------------------


def test_publish_twice_gives_v1_v2_and_never_overwrites(tmp_path):
    root = tmp_path / "zoo"
    e1 = zoo.publish(make_run(tmp_path, SPR, "a", seed=1), root)
    v1_bytes = e1.weights_path.read_bytes()
    e2 = zoo.publish(make_run(tmp_path, SPR, "b", seed=2), root)
    assert (e1.id, e2.id) == ("x86_64-sapphirerapids-2c/v1", "x86_64-sapphirerapids-2c/v2")
    assert e1.sha256 != e2.sha256 and e1.weights_path.read_bytes() == v1_bytes
    index = json.loads((root / "index.json").read_text())
    assert [(e["device_id"], e["version"], e["path"]) for e in index] == [
        ("x86_64-sapphirerapids-2c", "v1", "x86_64-sapphirerapids-2c/v1"),
        ("x86_64-sapphirerapids-2c", "v2", "x86_64-sapphirerapids-2c/v2"),
    ]
    assert index[0]["sha256"] == e1.sha256 and index[0]["template_version"] == TV
    assert index[0]["metrics"] == {"spearman_mean": 0.79, "heldout/dense/spearman": 0.77,
                                   "heldout/conv2d/spearman": 0.81, "heldout/conv2d/top1_ratio": 0.9}
    assert next(iter(index[0]["metrics"])) == "spearman_mean"  # shallowest first
    assert sorted(p.name for p in e2.directory.iterdir()) == ["README.md", "card.json", "loss.png",
                                                              "model.safetensors"]
    # an orphan directory (crash after rename) keeps its number: the next publish skips it
    (root / "x86_64-sapphirerapids-2c" / "v3").mkdir()
    (root / "x86_64-sapphirerapids-2c" / "v3" / "keep").write_text("mine")
    assert zoo.publish(make_run(tmp_path, SPR, "c"), root).version == "v4"
    assert (root / "x86_64-sapphirerapids-2c" / "v3" / "keep").read_text() == "mine"


def test_publishing_the_same_weights_again_names_their_entry(tmp_path):
    root = tmp_path / "zoo"
    again = make_run(tmp_path, SPR, "a", seed=1)
    first = zoo.publish(again, root)
    assert zoo.publish(again, root) == first  # e.g. re-run after its --hf-repo upload failed
    assert [e.id for e in zoo.read_index(root)] == [first.id]
    assert sorted(p.name for p in (root / device_id(SPR)).iterdir()) == ["v1"]  # no staging left either
    out = cli("zoo", "publish", again, "--zoo", root)
    assert out.exit_code == 0 and f"already published as {first.id}" in out.output


def test_zoo_card_and_readme(tmp_path):
    entry = zoo.publish(make_run(tmp_path, SPR), tmp_path / "zoo")
    card = json.loads((entry.directory / "card.json").read_text())
    assert card["zoo"]["weights_sha256"] == entry.sha256 and card["zoo"]["version"] == "v1"
    assert card["zoo"]["weights_size_bytes"] == entry.size_bytes == entry.weights_path.stat().st_size
    assert card["dataset"]["spec_hash"] == "abc123" and card["device"]["device_id"] == entry.device_id
    readme = (entry.directory / "README.md").read_text()
    _, front, body = readme.split("---\n", 2)
    meta = yaml.safe_load(front)
    metrics = {m["name"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"heldout/conv2d/spearman": 0.81, "heldout/conv2d/top1_ratio": 0.9,
                       "heldout/dense/spearman": 0.77, "spearman_mean": 0.79}
    assert meta["datasets"] == ["x86_64-sapphirerapids-2c"]
    for section in ("## Intended use", "## Training data", "## Metrics", "## Limitations", "## How to reproduce"):
        assert section in body
    assert "make train-zoo" in body and "| heldout/conv2d | 0.81 | 0.9 |" in body and "![loss.png](loss.png)" in body
    assert "## Metrics (held-out)" in body


def test_an_adapted_checkpoints_readme_says_its_metrics_chose_it(tmp_path):
    """`zoo adapt` scores its candidates on the validation workloads that then choose one: optimistic."""
    adapted = make_run(tmp_path, SPR, adapted_from={"id": "x86_64-znver5-2c/v2"})
    readme = (zoo.publish(adapted, tmp_path / "zoo").directory / "README.md").read_text()
    assert "## Metrics (validation workloads that chose the adaptation)" in readme and "(held-out)" not in readme


def test_publish_rejects_invalid_runs_and_publishes_nothing(tmp_path):
    root = tmp_path / "zoo"
    bad = make_run(tmp_path, SPR, "bad")
    card = json.loads((bad / "card.json").read_text())
    del card["metrics"], card["dataset"]["spec_hash"]
    card["created"] = "yesterday"
    (bad / "card.json").write_text(json.dumps(card))
    with pytest.raises(ZooError) as err:
        zoo.publish(bad, root)
    for fragment in ("'metrics'", "dataset.spec_hash", "not an ISO date"):
        assert fragment in str(err.value)

    pickled = make_run(tmp_path, SPR, "pickled")
    torch.save({"w": torch.zeros(2)}, pickled / zoo.WEIGHTS_FILE)  # a pickle under the safetensors name
    with pytest.raises(ZooError, match="does not load with safetensors"):
        zoo.publish(pickled, root)

    with pytest.raises(TemplateVersionError) as err:
        zoo.publish(make_run(tmp_path, SPR, "old", template="test-template-0"), root)
    assert "test-template-0" in str(err.value) and TV in str(err.value)
    assert zoo.read_index(root) == []
    assert not [p for p in (root / device_id(SPR)).iterdir()]  # no staging or version left behind


def test_index_is_written_atomically(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    zoo.publish(make_run(tmp_path, SPR, "a"), root)
    before = (root / "index.json").read_bytes()
    run = make_run(tmp_path, SPR, "b", seed=2)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    for name in ("fsync", "replace"):  # crash while the temp file is written, and just before the rename
        with monkeypatch.context() as m:
            m.setattr(os, name, crash)
            with pytest.raises(OSError, match="disk full"):
                zoo.publish(run, root)
        assert (root / "index.json").read_bytes() == before
        assert sorted(p.name for p in root.iterdir()) == ["index.json", device_id(SPR)]  # no temp files
        assert sorted(p.name for p in (root / device_id(SPR)).iterdir()) == ["v1"]  # rolled back
    assert zoo.publish(run, root).version == "v2"
    assert zoo.verify(root).ok


def test_concurrent_publishes_get_distinct_versions(tmp_path):
    root = tmp_path / "zoo"
    runs = [make_run(tmp_path, SPR, f"r{i}", seed=i) for i in range(4)]
    results: list = []
    threads = [threading.Thread(target=lambda r=r: results.append(zoo.publish(r, root))) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e.version for e in results) == ["v1", "v2", "v3", "v4"]
    assert sorted(e.version for e in zoo.read_index(root)) == ["v1", "v2", "v3", "v4"]
    assert zoo.verify(root).ok


# -- verify and load --------------------------------------------------------------------------


def test_verify_passes_and_load_checkpoint_returns_weights(tmp_path):
    root = tmp_path / "zoo"
    run = make_run(tmp_path, SPR)
    zoo.publish(run, root)
    zoo.publish(make_run(tmp_path, HASWELL, "h"), root)
    report = zoo.verify(root)
    assert report.ok and report.checked == ["x86_64-haswell-4c/v1", "x86_64-sapphirerapids-2c/v1"]
    report.raise_if_failed()
    state, card = zoo.load_checkpoint(zoo.get_entry(root, device_id(SPR)))
    from safetensors.torch import load_file

    expected = load_file(str(run / zoo.WEIGHTS_FILE))
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in state)
    assert card["weights_metadata"]["model_config"] == {"hidden": 4, "layers": 2}
    assert card["weights_metadata"]["normalization"] == {"mean": 1.5}


def test_tampered_weights_raise_checksum_error_before_loading(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    entry = zoo.publish(make_run(tmp_path, SPR), root)
    data = bytearray(entry.weights_path.read_bytes())
    data[-1] ^= 0xFF  # still a valid safetensors file: only a tensor value changes
    entry.weights_path.write_bytes(bytes(data))

    import safetensors.torch

    def never(*args, **kwargs):
        raise AssertionError("weights were deserialised before the checksum was checked")

    with monkeypatch.context() as m:
        m.setattr(safetensors.torch, "load", never)
        with pytest.raises(ChecksumError) as err:
            zoo.load_checkpoint(entry)
    assert err.value.expected == entry.sha256 and err.value.actual != entry.sha256
    report = zoo.verify(root)
    assert [type(p) for p in report.problems] == [ChecksumError]
    assert list(report.failed) == [entry.id]
    with pytest.raises(ZooError, match="1 problem"):
        report.raise_if_failed()


def test_template_version_mismatch(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    entry = zoo.publish(make_run(tmp_path, SPR), root)
    monkeypatch.setattr(zoo.index, "code_template_version", lambda arch: "test-template-2")  # the encoder moved on
    with pytest.raises(TemplateVersionError) as err:
        zoo.load_checkpoint(entry)
    message = str(err.value)
    assert TV in message and "test-template-2" in message and "make train-zoo" in message
    assert (err.value.checkpoint_version, err.value.code_version) == (TV, "test-template-2")
    assert [type(p) for p in zoo.verify(root).problems] == [TemplateVersionError]
    with pytest.raises(TemplateVersionError):  # stale checkpoints are never resolved
        zoo.resolve(device_id(SPR), root)


@pytest.mark.parametrize("updates, fragment", [
    ({"device": "spr"}, "device must be an object"),
    ({"device": {**SPR, "device_id": "x86_64-haswell-2c"}}, "disagrees with the fingerprint"),
    ({"device": {**SPR, "sockets": 2}}, "device is not a DeviceFingerprint"),
    ({"template_version": ""}, "template_version: String should have at least 1 character"),
    ({"dataset": {"id": "d", "records": 1, "workloads": 1}}, "missing field 'dataset.spec_hash'"),
    ({"versions": {"metatune": "0.1.0", "tvm": "0.27.0"}}, "missing field 'versions.torch'"),
    ({"metrics": [0.8]}, "metrics must be an object"),
    ({"train_wall_s": "12.5"}, "train_wall_s: Input should be a valid number"),
])
def test_run_card_problems_name_the_field(tmp_path, updates, fragment):
    run = make_run(tmp_path, SPR)
    card = json.loads((run / "card.json").read_text())
    (run / "card.json").write_text(json.dumps({**card, **updates}))
    with pytest.raises(ZooError, match="is not a valid run card") as err:
        zoo.read_run_card(run)
    assert fragment in str(err.value)


def test_verify_lists_every_problem(tmp_path):
    root = tmp_path / "zoo"
    a = zoo.publish(make_run(tmp_path, SPR, "a"), root)
    b = zoo.publish(make_run(tmp_path, HASWELL, "b"), root)
    (a.directory / "README.md").unlink()
    card = json.loads((b.directory / "card.json").read_text())
    del card["dataset"]
    (b.directory / "card.json").write_text(json.dumps(card))
    (root / "x86_64-haswell-4c" / "v7").mkdir()
    report = zoo.verify(root)
    text = "\n".join(map(str, report.problems))
    assert len(report.problems) == 3 and set(report.failed) == {a.id, b.id}
    assert "README.md is missing" in text and "'dataset'" in text
    assert "x86_64-haswell-4c/v7 is not in index.json" in text
    assert zoo.verify(root, a.id).checked == [a.id]
    assert zoo.verify(root, "nosuch-device-1c").problems  # unknown id is a problem, not a crash


# -- resolve ----------------------------------------------------------------------------------


def test_resolve_exact_device_takes_newest_version_silently(tmp_path):
    root = tmp_path / "zoo"
    for i in range(2):
        zoo.publish(make_run(tmp_path, SPR, f"r{i}", seed=i), root)
    zoo.publish(make_run(tmp_path, HASWELL, "h"), root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = zoo.resolve(device_id(SPR), root)
    assert res.exact and res.entry.id == "x86_64-sapphirerapids-2c/v2" and res.warning is None


def test_a_bare_device_id_names_its_newest_version_this_code_can_load(tmp_path, monkeypatch):
    """A newer version trained for another encoder (another template) is passed over, not loaded to fail."""
    root = tmp_path / "zoo"
    current = zoo.publish(make_run(tmp_path, SPR, "current"), root)
    zoo.publish(make_run(tmp_path, SPR, "other", template="test-template-9"), root, template_version="test-template-9")
    assert zoo.get_entry(root, device_id(SPR)).id == current.id
    assert zoo.get_entry(root, f"{device_id(SPR)}/v2").template_version == "test-template-9"  # named: as asked
    monkeypatch.setattr(zoo.index, "code_template_version", lambda arch: "test-template-8")  # none loadable:
    assert zoo.get_entry(root, device_id(SPR)).version == "v2"  # the newest, whose loading says why


def test_resolve_other_device_warns_naming_both(tmp_path):
    root = tmp_path / "zoo"
    zoo.publish(make_run(tmp_path, HASWELL, "h"), root)
    zoo.publish(make_run(tmp_path, SKYLAKE, "s"), root)
    zoo.publish(make_run(tmp_path, ARM, "arm"), root)
    with pytest.warns(ZooWarning) as caught:
        res = zoo.resolve(device_id(SPR), root)
    message = str(caught[0].message)
    assert "x86_64-sapphirerapids-2c" in message and "x86_64-skylake-avx512-2c" in message
    assert not res.exact and res.entry.device_id == "x86_64-skylake-avx512-2c"  # nearest ISA class
    assert res.warning == message and "make train-zoo" in message
    assert "metatune zoo adapt --from x86_64-skylake-avx512-2c/v1" in message  # the quick route, runnable as printed
    assert "train/configs/x86_64-sapphirerapids-2c.yaml" in message  # the native route names this device
    # a full fingerprint ranks by flag overlap too; a haswell box gets the haswell model exactly
    fp = DeviceFingerprint.from_json({**HASWELL, "num_cores": 4})
    assert zoo.resolve(fp, root).exact


@pytest.mark.parametrize(
    "published, wanted, expected",
    [
        ([SPR, HASWELL], "x86_64-skylake-avx512-2c", "x86_64-sapphirerapids-2c"),  # AVX-512 beats list order
        ([SPR, SKYLAKE], "x86_64-haswell-8c", "x86_64-skylake-avx512-2c"),  # then the nearer ISA class
        ([SPR, {**SPR, "num_cores": 16}], "x86_64-sapphirerapids-4c", "x86_64-sapphirerapids-2c"),  # then cores
        ([HASWELL, {**HASWELL, "num_cores": 2}], "x86_64-haswell-8c", "x86_64-haswell-4c"),
    ],
)
def test_resolve_ranks_nearest_device(tmp_path, published, wanted, expected):
    root = tmp_path / "zoo"
    for i, fp in enumerate(published):
        zoo.publish(make_run(tmp_path, fp, f"r{i}"), root)
    with pytest.warns(ZooWarning, match=wanted):
        assert zoo.resolve(wanted, root).entry.device_id == expected


def test_resolve_without_any_checkpoint_is_a_clear_error(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    root.mkdir()  # the shipped zoo/: a directory without index.json
    monkeypatch.setattr(zoo.index, "code_template_version", lambda arch: 1 / 0)  # not needed to say "nothing here"
    with pytest.raises(NoCheckpointError) as err:
        zoo.resolve(device_id(SPR), root)
    assert "make train-zoo DEVICES=" in str(err.value) and "train/configs/DEVICE.yaml" in str(err.value)
    assert "empty" in str(err.value)
    assert zoo.verify(root).ok
    zoo.publish(make_run(tmp_path, ARM), root, template_version=TV)  # another architecture is no fallback
    with pytest.raises(NoCheckpointError, match=r"aarch64-generic-8c \(v1\)"):
        zoo.resolve(device_id(SPR), root)


def test_ids_and_fingerprints_from_ids():
    assert zoo.parse_id("x86_64-haswell-4c/v2") == ("x86_64-haswell-4c", "v2")
    assert zoo.parse_id("x86_64-haswell-4c") == ("x86_64-haswell-4c", None)
    for bad in ("../etc/v1", "x86_64-haswell-4c/v0", "x86_64-haswell-4c/latest", ""):
        with pytest.raises(ZooError):
            zoo.parse_id(bad)
    fp = zoo.fingerprint_from_id("x86_64-skylake-avx512-16c")
    assert (fp.arch, fp.isa_class, fp.num_cores) == ("x86_64", "skylake-avx512", 16)
    assert {"avx512f", "avx2", "fma"} <= set(fp.flags) and "avx512_fp16" not in fp.flags
    with pytest.raises(ZooError, match="bad device id"):
        zoo.fingerprint_from_id("haswell")


def test_default_zoo_dir(monkeypatch, tmp_path):
    assert zoo.default_zoo_dir() == Path(zoo.__file__).resolve().parents[2] / "zoo"
    monkeypatch.setenv(zoo.ZOO_ENV, str(tmp_path))
    assert zoo.default_zoo_dir() == tmp_path


def test_the_shipped_zoo_verifies_with_this_code(monkeypatch):
    """Every shipped checkpoint loads with the current encoder of its device kind (CPU or CUDA): a
    template change must come with a retrained zoo (`make train-zoo`), and checkpoints it made
    unloadable must be retired."""
    shipped = Path(zoo.__file__).resolve().parents[2] / "zoo"
    monkeypatch.setattr(zoo.index, "code_template_version", REAL_CODE_TEMPLATE_VERSION)  # the fixture fakes it

    report = zoo.verify(shipped)
    assert report.ok, [str(p) for p in report.problems]
    assert {e.split("/")[0].split("-")[0] for e in report.checked} >= {"cuda", "x86_64"}


# -- CLI --------------------------------------------------------------------------------------

from metatune.cli import app  # noqa: E402  (the real CLI, zoo commands included)


def cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_user_error(result, fragment: str) -> None:
    """What metatune.cli.main turns into one line on stderr and exit status 2."""
    assert isinstance(result.exception, MetatuneError), result.output
    assert fragment in str(result.exception)


def test_cli_publish_list_show_verify_resolve(tmp_path):
    root = tmp_path / "zoo"
    out = cli("zoo", "publish", make_run(tmp_path, SPR, "a"), "--zoo", root)
    assert out.exit_code == 0 and "published x86_64-sapphirerapids-2c/v1" in out.stdout
    out = cli("zoo", "publish", make_run(tmp_path, HASWELL, "h"), "--zoo", root, "--json")
    assert json.loads(out.stdout)["version"] == "v1"

    listed = json.loads(cli("zoo", "list", "--zoo", root, "--json").stdout)
    assert [e["device_id"] for e in listed] == ["x86_64-haswell-4c", "x86_64-sapphirerapids-2c"]
    assert "x86_64-haswell-4c/v1" in cli("zoo", "list", "--zoo", root).stdout

    shown = json.loads(cli("zoo", "show", "x86_64-haswell-4c", "--zoo", root, "--json").stdout)
    assert shown["entry"]["version"] == "v1" and shown["card"]["zoo"]["weights_sha256"] == shown["entry"]["sha256"]
    assert "sha256" in cli("zoo", "show", "x86_64-haswell-4c/v1", "--zoo", root).stdout
    assert_user_error(cli("zoo", "show", "x86_64-haswell-4c/v9", "--zoo", root), "available: x86_64-haswell-4c (v1)")

    out = cli("zoo", "verify", "--zoo", root)
    assert out.exit_code == 0 and "2 checkpoint(s) verified" in out.stdout

    out = cli("zoo", "resolve", "--device-id", "x86_64-skylake-avx512-2c", "--zoo", root, "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["checkpoint"] == "x86_64-sapphirerapids-2c/v1"
    assert "warning: no zoo checkpoint for device x86_64-skylake-avx512-2c" in out.stderr
    out = cli("zoo", "resolve", "--device-id", "x86_64-haswell-4c", "--zoo", root)
    assert out.stdout.startswith("x86_64-haswell-4c/v1\t") and not out.stderr


def test_cli_errors_are_user_errors(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    out = cli("zoo", "verify", "--zoo", root)  # a mistyped --zoo never passes
    assert_user_error(out, "1 problem(s)")
    assert "does not exist" in out.stdout
    assert_user_error(cli("zoo", "list", "--zoo", root), "does not exist")
    root.mkdir()
    assert "no checkpoints" in cli("zoo", "list", "--zoo", root).stdout
    assert "0 checkpoint(s) verified" in cli("zoo", "verify", "--zoo", root).stdout
    assert_user_error(cli("zoo", "resolve", "--device-id", "x86_64-haswell-4c", "--zoo", root), "make train-zoo")
    entry = zoo.publish(make_run(tmp_path, SPR), root)
    entry.weights_path.write_bytes(entry.weights_path.read_bytes()[:-1] + b"\0")
    out = cli("zoo", "verify", "--zoo", root)
    assert "FAIL  x86_64-sapphirerapids-2c/v1" in out.stdout and "ChecksumError" in out.stdout
    assert_user_error(out, "1 problem(s)")
    assert len(str(out.exception).splitlines()) == 1
    out = cli("zoo", "verify", "--zoo", root, "--json")
    assert json.loads(out.stdout)["problems"][0]["kind"] == "ChecksumError"
    monkeypatch.setenv(zoo.ZOO_ENV, str(root))  # the env var picks the zoo when --zoo is absent
    assert json.loads(cli("zoo", "list", "--json").stdout)[0]["device_id"] == device_id(SPR)


# -- Hugging Face Hub (offline: argument handling and a fake client only) ---------------------


def test_hf_hub_is_optional_and_checked_before_publishing(tmp_path, monkeypatch):
    root = tmp_path / "zoo"
    run = make_run(tmp_path, SPR)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    assert_user_error(cli("zoo", "publish", run, "--zoo", root, "--hf-repo", "me/metatune-zoo"),
                      "pip install huggingface_hub")
    assert_user_error(cli("zoo", "publish", run, "--zoo", root, "--hf-repo", "not a repo"), "OWNER/NAME")
    assert_user_error(cli("zoo", "pull", "--hf-repo", "me/zoo", "--zoo", root), "huggingface_hub")
    assert cli("zoo", "pull", "--zoo", root).exit_code != 0  # --hf-repo is required
    assert not root.exists()  # nothing was published locally


def test_hf_push_and_pull_with_a_fake_client(tmp_path, monkeypatch):
    source = tmp_path / "remote-zoo"
    entry = zoo.publish(make_run(tmp_path, SPR), source)
    calls: dict = {}

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls["create"] = repo_id

        def upload_folder(self, **kw):
            calls["upload"] = kw

    def snapshot_download(repo_id, revision, local_dir, allow_patterns):
        import shutil

        shutil.copytree(source / entry.path, Path(local_dir) / entry.path)
        return local_dir

    fake = types.SimpleNamespace(HfApi=FakeApi, snapshot_download=snapshot_download)
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    url = zoo.push_to_hub(entry, "me/metatune-zoo")
    assert calls["upload"]["path_in_repo"] == "x86_64-sapphirerapids-2c/v1"
    assert calls["upload"]["folder_path"] == str(entry.directory) and url.endswith(entry.path)

    local = tmp_path / "zoo"
    zoo.publish(make_run(tmp_path, SPR, "other", seed=5), local)
    added = zoo.pull_from_hub("me/metatune-zoo", local)
    assert [e.id for e in added] == ["x86_64-sapphirerapids-2c/v2"] and added[0].sha256 == entry.sha256
    assert zoo.pull_from_hub("me/metatune-zoo", local) == []  # same weights are not imported twice
    assert zoo.verify(local).ok


def fake_hub(monkeypatch, source: Path, entries: list) -> None:
    """A Hub repo (offline) holding these entries of the zoo at `source`."""

    def snapshot_download(repo_id, revision, local_dir, allow_patterns):
        import shutil

        for entry in entries:
            shutil.copytree(source / entry.path, Path(local_dir) / entry.path)
        return local_dir

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))


def test_a_pull_leaves_out_a_checkpoint_this_code_cannot_load_and_publishes_the_rest(tmp_path, monkeypatch):
    """One stale checkpoint on the Hub (another template version) must not block, nor half-publish, a pull."""
    source = tmp_path / "remote-zoo"
    stale = zoo.publish(make_run(tmp_path, SPR, "old", template="test-template-0"), source,
                        template_version="test-template-0")
    current = zoo.publish(make_run(tmp_path, SPR, "new", seed=3), source)
    fake_hub(monkeypatch, source, [stale, current])
    local = tmp_path / "zoo"
    with pytest.warns(zoo.ZooWarning, match="v1 left out: .*test-template-0"):
        added = zoo.pull_from_hub("me/metatune-zoo", local)
    assert [e.sha256 for e in added] == [current.sha256] and [e.sha256 for e in zoo.read_index(local)] == [current.sha256]
    assert zoo.verify(local).ok


def test_a_staging_folder_left_by_a_killed_publish_is_reported(tmp_path):
    root = tmp_path / "zoo"
    entry = zoo.publish(make_run(tmp_path, SPR), root)
    (root / entry.device_id / ".staging-abc123").mkdir()
    report = zoo.verify(root)
    assert not report.ok and any(".staging-abc123" in str(problem) for problem in report.problems)


def test_a_pull_with_one_bad_checkpoint_publishes_none(tmp_path, monkeypatch):
    source = tmp_path / "remote-zoo"
    good = zoo.publish(make_run(tmp_path, SPR), source)
    bad = zoo.publish(make_run(tmp_path, SPR, "other", seed=5), source)
    data = bytearray(bad.weights_path.read_bytes())
    data[-1] ^= 0xFF
    bad.weights_path.write_bytes(bytes(data))
    fake_hub(monkeypatch, source, [good, bad])
    local = tmp_path / "zoo"
    with pytest.raises(ChecksumError, match="v2"):
        zoo.pull_from_hub("me/metatune-zoo", local)
    assert zoo.read_index(local) == []  # v1 was fine, but nothing is published from a pull that failed
