"""Every CPU target class: device ids, target parsing, and programs the super-graph template covers.

Design spaces depend on the target (vector width, arm_cpu rules, rfactor of short reductions),
so these tests generate them for each class in `CPU_TARGET_CLASSES`. Nothing is compiled to
machine code, so they hold on any machine.
"""

from __future__ import annotations

import functools
import platform

import numpy as np
import pytest

from metatune import MetatuneError
from metatune.env.target import CPU_TARGET_CLASSES
from tests.conftest import SMALL_SHAPES
from tests.processes import run_metatune

CLASSES = sorted(CPU_TARGET_CLASSES)
x86_host = pytest.mark.skipif(platform.machine() not in ("x86_64", "amd64"),
                              reason="uses aarch64 as the architecture this host cannot run")


@pytest.fixture(scope="module")
def encoder():
    from metatune.encode.supergraph import GraphEncoder
    from metatune.env.tvm_setup import import_tensor_intrinsics

    import_tensor_intrinsics()
    return GraphEncoder()


def _target(name: str):
    import tvm

    return tvm.target.Target(CPU_TARGET_CLASSES[name])


@pytest.mark.parametrize("target_class", CLASSES)
@pytest.mark.parametrize("family", sorted(SMALL_SHAPES))
def test_random_configurations_of_every_family_encode_on_every_target_class(family, target_class, encoder):
    from metatune.space.knob_space import DesignSpaces, SearchSpace
    from metatune.workload.operators import Workload

    space = SearchSpace(DesignSpaces(Workload.parse(SMALL_SHAPES[family]), _target(target_class)))
    rng = np.random.default_rng(3)
    encoded = 0
    for ks in space.knob_spaces:
        for _ in range(2):
            cand = ks.sample(rng)
            assert cand is not None, f"{family} on {target_class}, space {ks.index}: {dict(ks.rejected)}"
            graph = encoder.augmented(cand, workload=family, knobs=space.embed(cand.config))
            assert graph.num_nodes == encoder.template.num_nodes and int(graph.mask.sum()) > 1
            encoded += 1
    assert encoded == 2 * len(space)


@functools.lru_cache(maxsize=None)
def imported_module(model: str):
    """A shipped model's Relax module, imported once for all target classes (the import does not
    depend on the target; task extraction, which does, transforms a copy)."""
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import import_model

    return import_model(ModelSource.parse(model)).mod


@pytest.mark.parametrize("target_class", CLASSES)
@pytest.mark.parametrize("model", ["resnet18", "tinycnn"])
def test_metatune_encodes_every_task_of_the_shipped_models_on_every_target_class(model, target_class):
    """`tune --model` reports these as fallback_tasks: none may fall back to XGBModel."""
    import tvm

    from metatune.tune.model_tuner import task_coverage
    from metatune.workload.relax_tasks import extract_tasks

    target = _target(target_class)
    mod = imported_module(model)
    before = tvm.ir.save_json(mod)
    tasks = extract_tasks(mod, target)
    assert tvm.ir.save_json(mod) == before  # the shared module is not changed by the extraction
    uncovered = {name: why for name, why in task_coverage(tasks, target).items() if why is not None}
    assert len(tasks) == {"resnet18": 19, "tinycnn": 4}[model] and uncovered == {}


def test_device_ids_name_the_microarchitecture_and_tell_vendors_apart():
    from metatune.env.device import classify_isa

    spr = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16", "avx512_vnni"}
    zen3 = {"avx", "avx2", "fma", "sse4_2", "vaes"}
    assert classify_isa("x86_64", spr, "GenuineIntel") == "sapphirerapids"
    assert classify_isa("x86_64", zen3, "AuthenticAMD", cpu_family=25, model=1) == "znver3"
    assert classify_isa("x86_64", zen3 | {"avx512f", "avx512bw", "avx512vl"}, "AuthenticAMD", 25, 17) == "znver4"
    assert classify_isa("x86_64", zen3, "AuthenticAMD", cpu_family=23, model=49) == "znver2"
    assert classify_isa("x86_64", zen3, "AuthenticAMD", llvm_host_cpu="znver3") == "znver3"  # family unknown (RPC)
    # AVX-512 hidden by the hypervisor: kernels for a Zen 4/5 class would die on an illegal instruction
    assert classify_isa("x86_64", zen3, "AuthenticAMD", cpu_family=26, model=2) == "znver3"
    assert classify_isa("x86_64", zen3, "AuthenticAMD", llvm_host_cpu="znver5") == "znver3"
    assert classify_isa("x86_64", zen3 | {"avx512f"}, "AuthenticAMD", cpu_family=26, model=2) == "znver5"
    assert classify_isa("x86_64", {"sse4_2"}, "AuthenticAMD", cpu_family=26, model=2) == "x86-64"
    assert classify_isa("x86_64", {"avx2", "fma"}, "GenuineIntel") == "haswell"
    assert classify_isa("x86_64", {"sse4_2"}, "GenuineIntel") == "x86-64"
    assert classify_isa("aarch64", {"asimd"}, "ARM") == "generic"


@x86_host
def test_this_machine_is_its_own_target_and_others_are_named_by_their_target():
    from metatune.env.device import fingerprint_for_target, local_fingerprint

    host = local_fingerprint()
    assert fingerprint_for_target(None, host) == host
    same = fingerprint_for_target(f"llvm -mcpu={host.target['mcpu']} -num-cores={host.num_cores}", host)
    assert same.device_id == host.device_id
    plain = fingerprint_for_target("llvm", host)  # LLVM alone would compile for a generic x86-64 (SSE2)
    assert plain.device_id == host.device_id and plain.tvm_target().attrs["mcpu"] == host.target["mcpu"]
    arm = fingerprint_for_target('{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}', host)
    assert arm.device_id == "aarch64-generic-1c" and "neon" in arm.flags
    n1 = fingerprint_for_target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -num-cores=4", host)
    assert n1.device_id == "aarch64-neoverse-n1-4c"
    # other features than the class's: named by them (in any order alike), not filed as this machine's own class
    if {"avx2", "fma"} <= set(host.flags):
        from metatune.zoo.index import SAFE_ID_RE

        features = fingerprint_for_target("llvm -mattr=+fma,+avx2", host)
        assert features.device_id == f"{host.arch}-{host.isa_class}-as-generic_avx2_fma-{host.num_cores}c"
        assert "avx512f" not in features.flags and SAFE_ID_RE.fullmatch(features.device_id)
        assert fingerprint_for_target("llvm -mattr=+avx2,+fma", host).device_id == features.device_id


def test_a_guest_that_does_not_report_amx_still_runs_its_own_class():
    """LLVM's sapphirerapids features include AMX, which tensor programs never use and some guests do not
    report: `--target llvm` there is the machine's own class, as measuring without --target is."""
    from metatune.env.device import fingerprint_for_target, fingerprint_from_flags, require_runnable

    flags = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
             "avx512_bf16", "avx512_fp16"}
    guest = fingerprint_from_flags("x86_64", "GenuineIntel", "Sapphire Rapids guest", flags, 2, "sapphirerapids")
    assert guest.target["mcpu"] == "sapphirerapids"
    for target in ("llvm", "llvm -mcpu=sapphirerapids -num-cores=2"):
        device = fingerprint_for_target(target, guest)
        assert device.device_id == guest.device_id == "x86_64-sapphirerapids-2c"
        require_runnable(device, host=guest)


def test_a_target_with_other_cores_than_this_process_may_use_is_not_measured_here():
    """Kernels run on the cores the process may use whatever `-num-cores` says: such timings would be
    filed under another device."""
    from metatune.env.device import fingerprint_for_target, fingerprint_from_flags, require_runnable

    guest = fingerprint_from_flags("x86_64", "AuthenticAMD", "AMD EPYC", {"sse4_2", "avx", "avx2", "fma"}, 2, "znver3")
    require_runnable(fingerprint_for_target("llvm -mcpu=znver3 -num-cores=2", guest), host=guest)
    for cores in (1, 4):
        device = fingerprint_for_target(f"llvm -mcpu=znver3 -num-cores={cores}", guest)
        assert device.device_id == f"x86_64-znver3-{cores}c"
        with pytest.raises(MetatuneError, match=f"is a {cores}-core device, but kernels here run on 2 threads"):
            require_runnable(device, host=guest)


@x86_host
def test_tvm_num_threads_is_the_core_count_kernels_run_on(monkeypatch):
    """A TVM_NUM_THREADS the user set wins (`use_threads`): the device is one of that many cores."""
    from metatune.env.device import fingerprint_for_target, local_fingerprint, require_runnable

    host = local_fingerprint()
    if host.num_cores < 2:
        pytest.skip("needs two usable cores")
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    with pytest.raises(MetatuneError, match="kernels here run on 1 threads \\(TVM_NUM_THREADS says"):
        require_runnable(fingerprint_for_target(None, host))
    require_runnable(fingerprint_for_target(f"llvm -mcpu={host.target['mcpu']} -num-cores=1", host))


@x86_host
def test_a_target_this_machine_cannot_run_is_a_one_line_error_with_exit_2():
    import subprocess

    def measure(target: str) -> subprocess.CompletedProcess:
        return run_metatune(["measure", "dense:m=16,n=16,k=16", "--random", "1", "--target", target], timeout=300)

    for target, message in [("llvm -mtriple=aarch64-linux-gnu -mattr=+neon", "cannot run its kernels"),
                            ("nvidia/nvidia-h100", "has none"), ("llvm -mcpu=nosuchcpu", "not a CPU LLVM knows"),
                            ("{bad json", "bad target JSON"),
                            ("vulkan", "metatune measures CPUs (llvm) and NVIDIA GPUs (cuda)")]:
        res = measure(target)
        assert res.returncode == 2 and message in res.stderr, (target, res.stderr)
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) <= 2


def test_target_strings_parse_in_every_form():
    from metatune.env.target import parse_target, target_json

    cli = parse_target("llvm -mcpu=znver3 -num-cores=2 -mattr=+avx2,+fma")
    assert target_json(cli) == {"kind": "llvm", "mcpu": "znver3", "num-cores": 2, "mattr": ["+avx2", "+fma"]}
    assert target_json(parse_target('{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}'))["mcpu"] == "znver3"
    assert parse_target("nvidia/nvidia-h100").kind.name == "cuda"
    assert target_json(parse_target(target_json(cli))) == target_json(cli)  # round trip
    for cores in (0, -2):
        with pytest.raises(MetatuneError, match=f"num-cores is {cores}, and a device has at least 1 core"):
            parse_target(f'{{"kind": "llvm", "mcpu": "znver3", "num-cores": {cores}}}')


def test_encode_command_encodes_for_a_target_this_machine_cannot_run(tmp_path):
    import json

    from metatune.cli.encode import run_encode

    out = tmp_path / "graphs.json"
    run_encode("conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,stride=2,pad=1", 2, 0, False, out,
               target="llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    graphs = json.loads(out.read_text())["graphs"]
    assert len(graphs) == 2 and all(g["num_real_nodes"] > 1 for g in graphs)
