"""Loop graphs, loop context features and the super-graph template."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from metatune.encode import supergraph
from metatune.encode.features import FEATURE_NAMES, NUM_FEATURES
from metatune.encode.layout import FIRST_FEATURE, NODE_WIDTH, interval_node, num_edges, template_edges, width
from metatune.encode.loopgraph import extract
from metatune.encode.supergraph import TEMPLATE_PATH, GraphEncoder, Template, TemplateMismatch, build_template
from metatune.fileio import REPO_ROOT
from metatune.space.knob_space import CATEGORICAL
from metatune.workload.operators import FAMILIES
from tests.conftest import SMALL_SHAPES
from tests.encode import golden
from tests.conftest import local_target as target
from tests.conftest import small_search_space as search_space

SMALL = {family: text.split(":", 1)[1] for family, text in SMALL_SHAPES.items()}


@functools.lru_cache(maxsize=None)
def encoder() -> GraphEncoder:
    return GraphEncoder()


def log(x: float) -> float:
    return math.log2(1 + x)


# ---------------------------------------------------------------------------------------------
# The walk


@pytest.mark.parametrize("family", ["conv2d", "conv2d_winograd", "dense_bias_relu", "conv2d_bias_add_relu"])
def test_walk_finds_the_loops_tvm_reports(family):
    from tvm.s_tir import Schedule

    space = search_space(family)
    for cand in space.sample_candidates(3, seed=4):
        program = extract(cand.sch.mod["main"])
        fresh = Schedule(cand.sch.mod)
        for block in program.blocks:
            tvm_loops = fresh.get_loops(fresh.get_sblock(block.name))
            assert [program.loops[i].extent for i in block.chain] == [int(fresh.get(x).extent) for x in tvm_loops]
            assert [program.loops[i].name for i in block.chain] == [fresh.get(x).loop_var.name for x in tvm_loops]
        every_loop = {
            fresh.get(x).__chandle__() for b in program.blocks for x in fresh.get_loops(fresh.get_sblock(b.name))
        }
        assert len(program.loops) == len(every_loop)


# ---------------------------------------------------------------------------------------------
# Features against an independent reference (dense, design space without a cache write)

M, N, K = 16, 32, 24


def _dense_space():
    space = search_space("dense")
    ks = next(k for k in space.knob_spaces if not any(i.kind.name == "CacheWrite" for i in k.insts))
    return space, ks


def _dense_config(ks, i_tiles, j_tiles, k_tiles, unroll_index):
    return ks.default._replace(decisions=(tuple(i_tiles), tuple(j_tiles), tuple(k_tiles), unroll_index))


def _reference(i_t, j_t, k_t, unroll_step):
    """Expected features per slot, derived from the tiles alone.

    The outer tiles are chosen so that RewriteParallelVectorizeUnroll fuses i0 j0 i1 j1 into
    one parallel loop (its product stays <= 32), which takes the slot of its innermost
    constituent j1 (S0.1); the innermost j3 is vectorized; the unroll pragma sits on the
    outermost loop.
    """
    inner = lambda t, level: math.prod(t[level + 1 :])  # noqa: E731
    strides = {  # element strides per (axis, level) in T[i, j], data[i, k], weight[j, k]
        ("i", lv): (N * inner(i_t, lv), K * inner(i_t, lv), 0) for lv in range(4)
    } | {("j", lv): (inner(j_t, lv), 0, K * inner(j_t, lv)) for lv in range(4)} | {
        ("k", lv): (0, inner(k_t, lv), inner(k_t, lv)) for lv in range(2)
    }
    assert i_t[0] * j_t[0] * i_t[1] * j_t[1] <= 32 and j_t[1] > 1 and j_t[3] > 1
    fused = dict(ext=i_t[0] * j_t[0] * i_t[1] * j_t[1], kind="parallel", strides=strides[("j", 1)], slot="main/S0.1")
    update = [fused] + [
        dict(ext=t[lv], kind="vectorized" if (ax, lv) == ("j", 3) else "serial", strides=strides[(ax, lv)],
             slot=f"main/{ {'i': 'S1', 'j': 'S0', 'k': 'R0'}[ax] }.{lv}".replace(" ", ""))
        for ax, lv, t in [("k", 0, k_t), ("i", 2, i_t), ("j", 2, j_t), ("k", 1, k_t), ("i", 3, i_t), ("j", 3, j_t)]
    ]
    init = [
        dict(ext=t[lv], kind="vectorized" if ax == "j" and lv == 3 else "serial", strides=strides[(ax, lv)][:1],
             slot=f"main.init/{'S1' if ax == 'i' else 'S0'}.{lv}")
        for ax, lv, t in [("i", 2, i_t), ("j", 2, j_t), ("i", 3, i_t), ("j", 3, j_t)]
    ]
    expected: dict[str, dict[str, float]] = {}
    for chain, prefix in ((update, 1), (init, fused["ext"])):
        topdown = prefix
        for pos, loop in enumerate(chain):
            if chain is init or pos > 0:
                topdown *= loop["ext"]
            else:
                topdown = loop["ext"]
            bottom = math.prod(x["ext"] for x in chain[pos:])
            f = {name: 0.0 for name in FEATURE_NAMES}
            f["length"] = log(loop["ext"])
            f[loop["kind"]] = 1.0
            if pos == 0 and chain is update and unroll_step:
                f["unroll_max_step"], f["unroll_explicit"] = log(unroll_step), 1.0
            f["topdown"], f["bottomup"] = log(topdown), log(bottom)
            for b, stride in enumerate(loop["strides"]):
                touch = math.prod(x["ext"] for x in chain[pos:] if x["strides"][b])
                f[f"buf{b}.touch"], f[f"buf{b}.reuse"] = log(touch), log(bottom / touch)
                f[f"buf{b}.stride"] = log(abs(stride))
            expected[loop["slot"]] = f
    return expected


def _interval_features(data, enc, slot):
    return data.x[interval_node(enc.template.slots.index(slot), enc.template.num_slots)].numpy()


def test_dense_features_match_an_independent_reference():
    _, ks = _dense_space()
    enc = encoder()
    for tiles, unroll in [(((1, 1, 2, 8), (1, 2, 4, 4), (4, 6)), 1), (((1, 2, 8, 1), (1, 8, 2, 2), (24, 1)), 0)]:
        cand = ks.schedule(_dense_config(ks, *tiles, unroll), strict=True)
        assert cand is not None
        data = enc.augmented(cand)
        expected = _reference(*tiles, ks.knobs[3].categories[unroll])
        assert int(data.mask.sum()) == 1 + 2 * len(expected)
        for slot, feats in expected.items():
            got = _interval_features(data, enc, slot)
            want = np.array([1 if n == "is_interval" else 0 for n in ("is_root", "is_for", "is_interval")]
                            + [feats[n] for n in FEATURE_NAMES] + [1], dtype=np.float32)  # present
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=slot)


def test_changing_one_tile_changes_exactly_the_dependent_features():
    _, ks = _dense_space()
    enc = encoder()
    a = ((1, 1, 2, 8), (1, 2, 4, 4), (4, 6))
    b = ((1, 1, 4, 4), (1, 2, 4, 4), (4, 6))  # one knob: the inner tiles of i
    xa = enc.augmented(ks.schedule(_dense_config(ks, *a, 0), strict=True)).x.numpy()
    xb = enc.augmented(ks.schedule(_dense_config(ks, *b, 0), strict=True)).x.numpy()
    ra, rb = _reference(*a, 0), _reference(*b, 0)
    want = {(slot, name) for slot in ra for name in FEATURE_NAMES if not math.isclose(ra[slot][name], rb[slot][name])}
    rows, cols = np.nonzero(~np.isclose(xa, xb))
    tpl = enc.template
    first_interval = interval_node(0, tpl.num_slots)
    got = {(tpl.slots[r - first_interval], FEATURE_NAMES[c - FIRST_FEATURE]) for r, c in zip(rows, cols)}
    assert got == want
    lengths = {slot for slot, name in got if name == "length"}
    assert lengths == {"main/S1.2", "main/S1.3", "main.init/S1.2", "main.init/S1.3"}
    assert not any(name.startswith("buf2") for _, name in got if name != "buf2.reuse")  # weight ignores i


# ---------------------------------------------------------------------------------------------
# Graphs


def test_encoding_is_deterministic():
    space = search_space("conv2d")
    enc = encoder()
    for cand in space.sample_candidates(3, seed=9):
        again = space.schedule(cand.config)
        d1, d2 = enc.augmented(cand), enc.augmented(again)
        assert np.array_equal(d1.x.numpy(), d2.x.numpy())
        assert np.array_equal(d1.edge_index.numpy(), d2.edge_index.numpy())
        assert np.array_equal(d1.mask.numpy(), d2.mask.numpy())
        p1, p2 = enc.plain(cand), enc.plain(again)
        assert np.array_equal(p1.x.numpy(), p2.x.numpy())
        assert np.array_equal(p1.edge_index.numpy(), p2.edge_index.numpy())


def test_supergraph_gives_every_family_the_same_structure():
    enc = encoder()
    tpl = enc.template
    reference_edges = None
    masks = set()
    for family in sorted(SMALL):
        space = search_space(family)
        rng = np.random.default_rng(1)
        for ks in space.knob_spaces:
            cand = ks.sample(rng)
            analysed = enc.analyse(cand)
            data = enc.augmented(cand, workload=str(space.spaces.workload), knobs=space.embed(cand.config),
                                 space=cand.space_index, enc=analysed)
            assert data.x.shape == (tpl.num_nodes, NODE_WIDTH) and data.num_nodes == tpl.num_nodes
            edges = data.edge_index.numpy()
            if reference_edges is None:
                reference_edges = edges
            assert np.array_equal(edges, reference_edges)
            loops = len(analysed.program.loops)
            mask = data.mask.numpy()
            assert mask.sum() == 1 + 2 * loops
            assert not data.x.numpy()[~mask].any()  # null slots are all zero
            down, up = np.split(data.edge_mask.numpy(), 2)  # every edge is also there reversed
            assert np.array_equal(down, up) and down[tpl.num_slots :].sum() == loops
            assert data.template_version == tpl.version and data.workload == str(space.spaces.workload)
            assert data.knobs.shape == (1, space.embedding_dim)
            masks.add(mask.tobytes())
            plain = enc.plain(cand, enc=analysed)
            assert plain.num_nodes == 1 + 2 * loops and plain.edge_index.shape == (2, num_edges(loops))
            assert np.array_equal(np.sort(plain.x.numpy(), axis=0), np.sort(data.x.numpy()[mask], axis=0))
    assert len(masks) > 9  # families and design spaces really differ


def test_template_edges_form_a_tree_rooted_at_the_root():
    tpl = encoder().template
    down, up = template_edges(tpl.parents).chunk(2, dim=1)
    assert sorted(down[1].tolist()) == list(range(1, tpl.num_nodes))  # every node but the root has one parent
    assert up.equal(down.flip(0))  # and messages flow back up
    assert len(set(tpl.slots)) == tpl.num_slots
    assert all(p < i for i, p in enumerate(tpl.parents))


def test_graphs_batch_with_torch_geometric():
    from torch_geometric.data import Batch

    space = search_space("batch_matmul")
    enc = encoder()
    graphs = [enc.augmented(c, str(space.spaces.workload), space.embed(c.config), c.space_index)
              for c in space.sample_candidates(4, seed=0)]
    batch = Batch.from_data_list(graphs)
    assert batch.x.shape == (4 * enc.template.num_nodes, NODE_WIDTH)
    assert batch.knobs.shape == (4, space.embedding_dim)
    assert batch.template_version == [enc.version] * 4


def test_encoder_graphs_are_the_tensors_training_feeds_the_model():
    """What `metatune encode` shows is what the cost model is trained on: GraphBuilder's x, edges
    and mask for the same programs (without feature standardisation), in both modes."""
    import torch
    from torch_geometric.data import Batch

    from metatune.encode.graphs import GraphBuilder, encode_programs

    enc = encoder()
    builders = {"supergraph": GraphBuilder(enc.template, "supergraph"), "plain": GraphBuilder(enc.template, "plain")}
    for family in sorted(SMALL):
        cands = search_space(family).sample_candidates(2, seed=5)
        programs = encode_programs(enc, cands, family, family, "train", [0.0] * len(cands))
        graphs = {"supergraph": [enc.augmented(c) for c in cands], "plain": [enc.plain(c) for c in cands]}
        for mode, builder in builders.items():
            for i, graph in enumerate(graphs[mode]):
                batch = builder.batch(programs, [i])
                assert torch.equal(graph.x, batch.x[0]), (family, mode)
                assert torch.equal(graph.edge_index, batch.edge_index), (family, mode)
                assert torch.equal(graph.mask, batch.mask[0]), (family, mode)
        # torch_geometric batches super-graphs as the batcher does
        together = Batch.from_data_list(graphs["supergraph"])
        batch = builders["supergraph"].batch(programs, range(len(cands)))
        assert torch.equal(together.x, batch.x.flatten(0, 1)) and torch.equal(together.edge_index, batch.edge_index)


# ---------------------------------------------------------------------------------------------
# The template


def test_a_program_outside_the_template_names_the_missing_slot():
    space = search_space("dense")
    cand = space.sample(np.random.default_rng(0))
    smaller = GraphEncoder(encoder().template.without("main/S0.3"))
    with pytest.raises(TemplateMismatch, match=r"slot 'main/S0.3'.*--rebuild"):
        smaller.augmented(cand)


def test_a_new_operator_raises_instead_of_encoding_zeros():
    """conv3d tiles five spatial axes; the template's main block has four."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.tvm_setup import import_tensor_intrinsics

    import_tensor_intrinsics()
    data = te.placeholder((1, 4, 6, 6, 6), name="data")
    weight = te.placeholder((4, 4, 3, 3, 3), name="weight")
    func = te.create_prim_func([data, weight, topi.nn.conv3d_ncdhw(data, weight, 1, 1, 1, 1)])
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    ctx = ms.TuneContext(mod=mod, target=target(), space_generator="post-order-apply")
    sch = ctx.space_generator.generate_design_space(mod)[0]
    sch.enter_postproc()
    assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
    # the first loop without a slot is the 5-D padding stage's or the main block's fifth axis
    message = r"slot '[^']*(i4|S4)[^']*' \(loop .*not in super-graph template.*--rebuild"  # the 5th axis
    with pytest.raises(TemplateMismatch, match=message):
        encoder().augmented(sch)
    assert encoder().plain(sch).num_nodes > 1  # the ablation graph needs no template


def test_template_version_is_a_hash_of_its_definition():
    stored = json.loads(TEMPLATE_PATH.read_text())
    tpl = Template.load()
    assert stored["version"] == tpl.version and len(tpl.version) == 12
    assert NODE_WIDTH == width(NUM_FEATURES) == width(len(stored["features"]))
    stored["slots"][-1][0] = "renamed/x"  # a leaf: the definition stays well formed
    with pytest.raises(TemplateMismatch, match="edited by hand"):
        Template.from_json(stored)
    stored["slots"][-1][1] = "no/such/slot"
    with pytest.raises(TemplateMismatch, match="not an earlier slot"):
        Template.from_json(stored)
    stored["slots"][-1][1] = stored["slots"][-2][0]
    del stored["version"]
    assert Template.from_json(stored).version != tpl.version


def test_template_ships_as_package_data():
    """A normal install copies only the data files pyproject.toml names, not everything beside the code."""
    import tomllib
    from pathlib import Path

    import metatune.encode

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert TEMPLATE_PATH.parent == Path(metatune.encode.__file__).parent
    assert TEMPLATE_PATH.name in pyproject["tool"]["setuptools"]["package-data"]["metatune.encode"]


@pytest.mark.slow
def test_stored_template_is_what_the_build_produces():
    assert build_template().definition == Template.load().definition


def test_encode_command(tmp_path, capsys):
    from metatune.cli.encode import run_encode

    out = tmp_path / "graphs.json"
    run_encode("dense:m=16,n=32,k=24", 3, 0, True, out)
    text = capsys.readouterr().out
    assert "main/S0.3" in text and "graphs/s" in text
    summary = json.loads(out.read_text())
    assert len(summary["graphs"]) == 3
    for g in summary["graphs"]:
        assert g["num_nodes"] == encoder().template.num_nodes and g["num_edges"] == encoder().template.num_edges
        assert g["num_real_nodes"] == 1 + 2 * g["num_loops"] == g["plain_num_nodes"]
        assert g["template_version"] == encoder().version


def test_every_family_is_in_the_template_workloads():
    from metatune.encode.supergraph import TEMPLATE_WORKLOADS

    assert {w.split(":")[0] for w in TEMPLATE_WORKLOADS} == set(FAMILIES)
    assert any(k.kind == CATEGORICAL for k in search_space("dense")[0].knobs)


def test_a_feature_that_never_varied_in_training_reaches_the_model_as_zero():
    """No training program had a fourth buffer (the shipped checkpoints' `buf3` columns are constant):
    divided by the std's floor, a program with one reached the model with those features 1000 times
    their value, on weights that never learnt. Such a feature is 0 instead; the others are standardised."""
    from types import SimpleNamespace

    from metatune.encode.graphs import MIN_STD, FeatureStats

    stats = FeatureStats.fit([SimpleNamespace(features=torch.tensor([[1.0, 0.0], [3.0, 0.0]]))])
    assert float(stats.std[1]) == pytest.approx(MIN_STD)
    normalized = stats.normalize(torch.tensor([[2.0, 12.0], [1.0, 0.0]]))
    assert torch.allclose(normalized, torch.tensor([[0.0, 0.0], [-2.0 ** -0.5, 0.0]]))


@pytest.mark.parametrize("kind", sorted(golden.TARGETS))
def test_the_encoding_is_what_its_template_version_recorded(kind):
    """Caches and checkpoints are keyed on the template version: the same version must mean the same features."""
    version, encoded, programs = golden.encodings(kind)
    path = golden.golden_path(kind, version)
    assert path.exists(), (f"no recorded encodings for {kind} template {version}: record them with "
                           "`python -m tests.encode.golden --write`")
    changed = sorted(n for n, h in golden.recorded_programs(path).items() if programs.get(n) != h)
    assert not changed and sorted(golden.recorded_programs(path)) == sorted(programs), (
        f"the programs encoded are not those recorded ({', '.join(changed) or 'other names'}): TVM's sampling or "
        "the operators changed, not necessarily the encoder. Check the encoder did not change in the same change, "
        "then record again with `python -m tests.encode.golden --write --replace`")
    recorded = load_file(str(path))
    assert sorted(recorded) == sorted(encoded), "other programs than those recorded: record them again"
    for name, values in encoded.items():
        if name.endswith("/features"):
            np.testing.assert_allclose(values, recorded[name], rtol=1e-5, atol=1e-6, err_msg=(
                f"{name}: the encoder's features changed under template {version}. Caches and checkpoints would "
                "mix encodings: bump TEMPLATE_FORMAT (a new version: rebuild the templates, retrain), then record "
                "with `python -m tests.encode.golden --write`"))
        else:
            np.testing.assert_array_equal(values, recorded[name], err_msg=f"{name} changed under template {version}")


def test_the_encoding_check_sees_a_changed_feature(monkeypatch):
    """The check above compares real values: a feature computed differently fails it."""
    original = supergraph.loop_features

    def one_feature_doubled(*args, **kwargs):
        features = original(*args, **kwargs)
        features[:, 0] *= 2
        return features

    monkeypatch.setattr(supergraph, "loop_features", one_feature_doubled)
    with pytest.raises(AssertionError, match="the encoder's features changed"):
        test_the_encoding_is_what_its_template_version_recorded("cpu")


def test_the_encoding_check_tells_changed_programs_from_a_changed_encoder(monkeypatch):
    """Other programs (another shape, TVM sampling otherwise) fail as such: not blamed on the encoder."""
    monkeypatch.setitem(golden.SHAPES, "dense", "dense:m=16,n=32,k=32")
    with pytest.raises(AssertionError, match=r"not those recorded \(dense/0, dense/1\)"):
        test_the_encoding_is_what_its_template_version_recorded("cpu")
