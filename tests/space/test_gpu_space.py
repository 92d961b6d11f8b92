"""CUDA knob spaces beyond the shared round trips (test_knob_space.py): thread limits checked on
decisions, records measured on an H100 mapped back to configurations, and winograd's missing
CUDA design space as a typed error.

data/gpu-h100/ holds a cut of the seed dataset (/work/shared/data/gpu-h100: random MetaSchedule
schedules measured on an H100): four workloads, two records per design space, in its form (one
folder per tar.gz with TVM's JSONDatabase files and meta.json).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm

from metatune.cli.common import one_line_errors
from metatune.space.knob_space import DesignSpaces, SearchSpace, SpaceError, UnsupportedOnTarget
from metatune.workload.operators import Workload
from tests.conftest import SMALL_SHAPES
from tests.conftest import small_search_space as search_space
from tests.space.cuda import H100, cuda_search_space

SEED = Path(__file__).parent / "data" / "gpu-h100"
WINOGRAD = SMALL_SHAPES["conv2d_winograd"]


def _replay(ks, decisions, seed: int = 1):
    """TVM's own replay of the design-space trace with these decisions, bypassing `KnobSpace`'s
    checks: the postprocessed candidate, or None when TVM rejects it."""
    from tvm.s_tir import Trace

    trace = Trace(ks.insts, {ks.insts[k.inst_index]: value for k, value in zip(ks.knobs, decisions)})
    return ks.spaces.replay(ks.index, trace, seed)


def test_thread_limits_come_from_the_trace():
    ks = cuda_search_space("dense")[0]  # 16x32: at least a warp of threads
    (limit,) = ks.limits
    assert (limit.block, limit.low, limit.high) == ("T_matmul_NT", 32, 1024)
    # the third factor of both spatial tiles is bound to threadIdx.x
    assert limit.factors == ((0, 2), (1, 2))
    tiny = SearchSpace(DesignSpaces(Workload.parse("dense:m=2,n=8,k=4"), tvm.target.Target(H100)))
    assert {(lim.low, lim.high) for ks in tiny.knob_spaces for lim in ks.limits} == {(1, 1024)}  # 16 outputs in all
    assert not any(ks.limits for ks in search_space("dense").knob_spaces)


def test_thread_limits_exclude_only_what_tvm_rejects():
    """Every drawn configuration that breaks a limit is rejected by TVM's postprocessors too, so
    checking it first loses nothing; without the check most draws would be thrown away."""
    ks = cuda_search_space("conv2d")[0]
    rng = np.random.default_rng(3)
    broken = kept = 0
    while broken < 12:
        decisions = [k.choices[int(rng.integers(len(k.choices)))] for k in ks.knobs]
        if ks.check(ks.default._replace(decisions=tuple(decisions))) is None:
            kept += 1
            continue
        broken += 1
        assert _replay(ks, decisions) is None
    assert broken > kept


def test_shared_memory_check_turns_down_what_verifygpucode_rejects_and_nothing_else():
    """Tilings whose shared buffers cannot fit a thread block (pipeline stages included) are
    turned down before the postprocessors: VerifyGPUCode rejects every one of them too, and on
    ResNet-18 C6 they are all it rejects (small shapes never reach the limit)."""
    from tvm.s_tir import Schedule, Trace

    from metatune.space.shared_memory import shared_memory_bytes

    space = SearchSpace(DesignSpaces(Workload.parse("conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,stride=1,pad=1"),
                                     tvm.target.Target(H100)))
    spaces, limit = space.knob_spaces[0].spaces, space.knob_spaces[0].spaces.shared_memory_limit
    assert limit == 49152
    rng = np.random.default_rng(0)
    replayed = rejected = rejected_over = 0
    for i in range(20000):
        ks = space.knob_spaces[i % len(space.knob_spaces)]
        decisions = [k.choices[int(rng.integers(len(k.choices)))] for k in ks.knobs]
        if ks.check(ks.default._replace(decisions=tuple(decisions))) is not None:
            continue  # outside the thread limits: turned down before any replay
        if replayed == 40:
            break
        replayed += 1
        sch = Schedule(spaces.mod, seed=1)
        Trace(ks.insts, {ks.insts[k.inst_index]: v for k, v in zip(ks.knobs, decisions)}).apply_to_schedule(
            sch, remove_postproc=True)
        size = shared_memory_bytes(sch.mod)
        assert size is not None
        too_large = size > limit
        sch.enter_postproc()
        accepted = all(p.apply(sch) for p in spaces.postprocs)
        assert not (too_large and accepted), "a schedule VerifyGPUCode accepts was turned down"
        rejected += not accepted
        rejected_over += too_large and not accepted
    assert rejected >= 20 and rejected_over == rejected, (rejected, rejected_over)
    space.sample_candidates(4, seed=0)
    assert sum(ks.rejected["shared memory"] for ks in space.knob_spaces) > 0


def test_sampling_and_neighbours_keep_the_thread_limits():
    space = cuda_search_space("dense")
    rng = np.random.default_rng(0)
    for cand in space.sample_candidates(6, seed=4):
        ks = space[cand.config.space]
        assert all(lim.low <= lim.threads(cand.config.decisions) <= lim.high for lim in ks.limits)
        nb = space.neighbour(cand.config, rng)
        assert nb is not None and ks.check(nb.config) is None
    ks = space[0]
    assert not ks.rejected.get("thread limits")


def test_a_configuration_outside_the_thread_limit_is_reported():
    ks = cuda_search_space("dense")[0]
    decisions = list(ks.default.decisions)
    decisions[0], decisions[1] = (16, 1, 1, 1, 1), (32, 1, 1, 1, 1)  # one thread
    config = ks.default._replace(decisions=tuple(decisions))
    assert ks.check(config) == "threads of T_matmul_NT: 1 not in [32, 1024]"
    assert ks.schedule(config) is None
    assert ks.rejected["config: threads of T_matmul_NT"] >= 1


def test_autobind_thread_count_is_a_named_knob():
    """dense_bias_relu's bias-add + ReLU block is bound by AutoBind: its threads per block are a
    categorical knob named after the thread axis, and a plain categorical in the embedding."""
    space = cuda_search_space("dense_bias_relu")
    knob = space[0].knobs[-1]
    assert knob.name == "threadIdx.x of T_add"
    assert knob.categories == (32, 64, 128, 256, 512)
    assert f"{knob.name} = 512" in space[0].embedding_names()


def _seed_records(archive: Path, into: Path):
    from tvm.s_tir import meta_schedule as ms

    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    folder = into / archive.name.removesuffix(".tar.gz")
    meta = json.loads((folder / "meta.json").read_text())
    db = ms.database.JSONDatabase(path_workload=str(folder / "database_workload.json"),
                                  path_tuning_record=str(folder / "database_tuning_record.json"))
    return meta, db.get_all_tuning_records()


@pytest.mark.parametrize("archive", sorted(SEED.glob("*.tar.gz")), ids=lambda p: p.name.split(".")[0])
def test_records_measured_on_an_h100_map_to_configurations(archive, tmp_path):
    """Each record's trace is one configuration of the workload's H100 search space, and
    scheduling that configuration gives the record's decisions and its exact program."""
    from tvm.s_tir import Schedule

    meta, records = _seed_records(archive, tmp_path)
    space = SearchSpace(DesignSpaces(Workload.parse(meta["workload"]), tvm.target.Target(H100)))
    assert records and {space.config_of(r).space for r in records} == set(range(len(space)))
    for record in records:
        config = space.config_of(record)
        ks = space[config.space]
        assert ks.check(config) is None  # inside the thread limits: TVM accepted it
        cand = space.schedule(config, strict=True)
        assert cand is not None, dict(ks.rejected)
        assert cand.config == config == (config.space, ks.decisions_of(record.trace))
        replayed = Schedule(record.workload.mod)
        record.trace.apply_to_schedule(replayed, remove_postproc=False)
        tvm.ir.assert_structural_equal(cand.sch.mod, replayed.mod)


def test_winograd_on_cuda_is_unsupported_on_target():
    with pytest.raises(UnsupportedOnTarget, match=r"conv2d_winograd:.* has no MetaSchedule design space on cuda"
                                                  r" \(TVM .*'s space generation fails: IndexError: Index 3"):
        DesignSpaces(Workload.parse(WINOGRAD), tvm.target.Target(H100))
    assert issubclass(UnsupportedOnTarget, SpaceError)


def test_winograd_on_cuda_is_one_error_line_in_the_cli(capsys):
    with pytest.raises(SystemExit) as exit_info, one_line_errors():
        DesignSpaces(Workload.parse(WINOGRAD), tvm.target.Target(H100))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: conv2d_winograd:") and err.count("\n") == 1 and "Traceback" not in err


def test_other_index_errors_are_not_taken_for_an_unsupported_target():
    def generate(mod):
        raise IndexError("list index out of range")  # a bug of ours, not TVM's space generation

    context = SimpleNamespace(task_name="t", target=tvm.target.Target(H100), mod=None,
                              space_generator=SimpleNamespace(generate_design_space=generate))
    with pytest.raises(IndexError, match="list index"):
        DesignSpaces.from_context(context)
