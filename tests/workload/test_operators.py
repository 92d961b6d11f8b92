import numpy as np
import pytest

from metatune.workload.operators import FAMILIES, SUITES, Workload, WorkloadError, get_suite, resolve_workload
from tests.conftest import SMALL_SHAPES


def test_every_family_has_a_small_shape():
    assert set(SMALL_SHAPES) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_text_form_round_trips(family):
    for text in (FAMILIES[family].example, SMALL_SHAPES[family]):
        w = Workload.parse(text)
        assert str(w) == text
        assert Workload.parse(str(w)) == w
        assert w.key == text


def test_parse_ignores_whitespace_but_prints_canonically():
    w = Workload.parse(" dense: m=2 , n=3, k=4 ")
    assert str(w) == "dense:m=2,n=3,k=4"


def test_suites():
    resnet = get_suite("resnet18")
    assert len(resnet) == 13
    assert str(resnet[0]) == "conv2d:n=1,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3"
    assert str(resnet[5]) == "conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,stride=1,pad=1"
    assert str(resnet[-1]) == "dense:m=1024,n=1024,k=1024"
    assert resolve_workload("C6") == resnet[5]
    assert len(get_suite("quick")) == 3
    assert set(SUITES) >= {"resnet18", "quick"}


def test_flops_match_known_values():
    c6 = resolve_workload("C6")
    assert c6.flops == 2 * 128 * 28 * 28 * 128 * 9
    assert Workload.parse("dense:m=1024,n=1024,k=1024").flops == 2 * 1024**3
    assert Workload.parse("batch_matmul:b=2,m=3,n=4,k=5").flops == 2 * 2 * 3 * 4 * 5


def test_epilogue_flops_count_one_op_per_output_element_and_epilogue_op():
    """As dense_bias_relu counts its bias add and ReLU: one FLOP each per output element."""
    conv = "n=1,c=64,h=56,w=56,k=128,r=3,s=3,stride=2,pad=1"
    base, outputs = Workload.parse(f"conv2d:{conv}").flops, 128 * 28 * 28
    assert Workload.parse(f"conv2d_bias:{conv}").flops == base + outputs
    assert Workload.parse(f"conv2d_bias_relu:{conv}").flops == base + 2 * outputs
    assert Workload.parse(f"conv2d_bias_add_relu:{conv}").flops == base + 3 * outputs
    assert Workload.parse("dense_bias:m=1,n=1000,k=512").flops == 2 * 1000 * 512 + 1000
    assert Workload.parse("dense_bias_relu:m=1,n=1000,k=512").flops == 2 * 1000 * 512 + 2 * 1000


def test_fused_families_take_bias_and_residual_in_relax_layout():
    """The argument shapes of Relax's fused conv/linear tasks: bias (1, k, 1, 1) for convolutions,
    a residual of the output's shape, and a linear layer's weight already transposed to k×n."""
    conv = "n=1,c=3,h=9,w=9,k=4,r=3,s=3,stride=2,pad=1"
    assert Workload.parse(f"conv2d_bias_add_relu:{conv}").input_shapes() == [
        (1, 3, 9, 9), (4, 3, 3, 3), (1, 4, 1, 1), (1, 4, 5, 5)
    ]
    assert Workload.parse(f"conv2d_bias_relu:{conv}").input_shapes() == [(1, 3, 9, 9), (4, 3, 3, 3), (1, 4, 1, 1)]
    assert Workload.parse("dense_bias:m=2,n=5,k=3").input_shapes() == [(2, 3), (3, 5), (5,)]
    names = [t.op.name for t in Workload.parse(f"conv2d_bias_add_relu:{conv}").tensors()[:4]]
    assert names == ["data", "weight", "bias", "residual"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("nosuchop:m=1", "unknown family"),
        ("dense", "malformed workload"),
        ("dense:m=1,n=2", "missing parameter"),
        ("dense:m=1,n=2,k=3,q=4", "unknown parameter"),
        ("dense:m=1,n=x,k=3", "not an integer"),
        ("dense:m=1,m=2,n=2,k=3", "given twice"),
        ("dense:m=0,n=2,k=3", "must be >= 1"),
        ("conv2d:n=1,c=3,h=2,w=2,k=4,r=7,s=7,stride=1,pad=1", "larger than the padded input"),
        ("conv2d_winograd:n=1,c=3,h=8,w=8,k=4,r=5,s=5,stride=1,pad=2", "3x3 kernel"),
        ("conv2d_transpose:n=1,c=3,h=8,w=8,k=4,r=3,s=3,stride=1,pad=3", "smaller than"),
        ("conv2d_bias_add_relu:n=1,c=3,h=2,w=2,k=4,r=7,s=7,stride=1,pad=1", "larger than the padded input"),
        ("conv2d_bias_relu:n=1,c=3,h=8,w=8,k=4,r=3,s=3,stride=0,pad=1", "must be >= 1"),
        ("dense_bias:m=1,n=0,k=3", "must be >= 1"),
    ],
)
def test_bad_workloads_name_the_problem(text, fragment):
    with pytest.raises(WorkloadError, match=fragment):
        Workload.parse(text)


def test_a_name_that_is_no_layer_lists_the_names():
    from metatune.workload.operators import resolve_workload

    assert resolve_workload("C6") == Workload.parse("conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,stride=1,pad=1")
    with pytest.raises(WorkloadError, match=r"unknown workload 'C99': give 'family:name=value,...' .*\(C1, C2, "):
        resolve_workload("C99")


# Shapes off the examples' beaten path: odd sizes, strides above 1, padding, Winograd's partial tiles.
BUFFER_SHAPES = [
    "conv1d:n=2,c=5,l=37,k=3,r=4,stride=3,pad=2",
    "conv1d_transpose:n=1,c=3,l=9,k=4,r=5,stride=3,pad=2",
    "conv2d:n=2,c=3,h=9,w=7,k=4,r=3,s=5,stride=2,pad=2",
    "conv2d_bias_add_relu:n=1,c=3,h=9,w=9,k=2,r=3,s=3,stride=1,pad=1",
    "conv2d_transpose:n=1,c=2,h=5,w=6,k=3,r=4,s=3,stride=3,pad=1",
    "conv2d_winograd:n=2,c=3,h=7,w=10,k=5,r=3,s=3,stride=1,pad=1",
    "conv2d_winograd:n=1,c=70,h=3,w=3,k=2,r=3,s=3,stride=1,pad=0",
    "depthwise_conv2d:n=1,c=3,h=11,w=8,r=5,s=3,stride=2,pad=2",
    "batch_matmul:b=3,m=5,n=7,k=11",
]


def _tir_buffer_sizes(workload: Workload) -> list[int]:
    """Element counts of every buffer of the operator's TIR: parameters and allocations."""
    import re

    script = workload.prim_func().script()
    shapes = re.findall(r"(?:T\.Buffer|T\.sblock_alloc_buffer)\(\(([\d, ]+)\)", script)
    assert shapes
    return [int(np.prod([int(x) for x in s.split(",") if x.strip()])) for s in shapes]


@pytest.mark.parametrize("text", [*(f.example for f in FAMILIES.values()), *BUFFER_SHAPES])
def test_declared_buffers_include_the_largest_one_tvm_allocates(text):
    """The size check at parse time sees the buffer that TVM's int32 indices must address."""
    w = Workload.parse(text)
    declared = [int(np.prod(s)) for s in w.spec.buffers(w.params).values()]
    tir = _tir_buffer_sizes(w)
    assert max(declared) == max(tir)
    assert set(declared) <= set(tir)


@pytest.mark.parametrize(
    "text, buffer",
    [
        ("dense:m=16,n=16,k=1000000000", "data buffer (16x1000000000) has 16000000000 elements"),
        ("batch_matmul:b=65536,m=256,n=256,k=1", "output buffer (65536x256x256)"),
        ("conv2d_winograd:n=1,c=1024,h=1024,w=1024,k=1,r=3,s=3,stride=1,pad=1", "data tiles buffer"),
        ("conv2d_transpose:n=1,c=64,h=2048,w=2048,k=1,r=2,s=2,stride=16,pad=0", "dilated data buffer"),
    ],
)
def test_buffers_beyond_int32_indexing_are_rejected_when_parsed(text, buffer):
    with pytest.raises(WorkloadError, match=r"int32") as err:
        Workload.parse(text)
    assert buffer in str(err.value)


def test_the_largest_addressable_buffer_is_accepted():
    w = Workload.parse(f"dense:m=1,n=1,k={2**31 - 1}")
    assert max(int(np.prod(s)) for s in w.spec.buffers(w.params).values()) == 2**31 - 1
    with pytest.raises(WorkloadError, match="2147483648 elements"):
        Workload.parse(f"dense:m=1,n=1,k={2**31}")


def test_references_agree_with_each_other():
    """conv1d is conv2d with h=1; transposed conv is the adjoint of conv:
    <conv(x), y> == <x, conv_transpose(y)> with the same weight."""
    rng = np.random.default_rng(0)
    c1 = Workload.parse("conv1d:n=1,c=3,l=9,k=4,r=3,stride=2,pad=1")
    x, w = c1.random_inputs(1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))  # conv2d's pad would pad h too: pre-pad w only
    c2 = Workload.parse("conv2d:n=1,c=3,h=1,w=11,k=4,r=1,s=3,stride=2,pad=0")
    expected = c2.reference([xp[:, :, None, :], w[:, :, None, :]])[:, :, 0]
    np.testing.assert_allclose(c1.reference([x, w]), expected, rtol=1e-12)

    conv = Workload.parse("conv2d:n=1,c=3,h=7,w=7,k=5,r=3,s=3,stride=2,pad=1")
    tconv = Workload.parse("conv2d_transpose:n=1,c=5,h=4,w=4,k=3,r=3,s=3,stride=2,pad=1")
    x = rng.standard_normal((1, 3, 7, 7))
    y = rng.standard_normal((1, 5, 4, 4))
    wt = rng.standard_normal((5, 3, 3, 3))  # conv weight (k, c, r, s) == transpose weight (c', k', r, s)
    lhs = np.sum(conv.reference([x, wt]) * y)
    rhs = np.sum(x * tconv.reference([y, wt]))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_fused_references_are_the_plain_ones_plus_their_epilogue():
    conv = "n=1,c=3,h=7,w=7,k=5,r=3,s=3,stride=2,pad=1"
    x, w, b, res = Workload.parse(f"conv2d_bias_add_relu:{conv}").random_inputs(2)
    plain = Workload.parse(f"conv2d:{conv}").reference([x, w])
    np.testing.assert_allclose(Workload.parse(f"conv2d_bias:{conv}").reference([x, w, b]), plain + b, rtol=1e-12)
    np.testing.assert_allclose(Workload.parse(f"conv2d_bias_relu:{conv}").reference([x, w, b]),
                               np.maximum(plain + b, 0), rtol=1e-12)
    fused = Workload.parse(f"conv2d_bias_add_relu:{conv}").reference([x, w, b, res])
    np.testing.assert_allclose(fused, np.maximum(plain + b + res, 0), rtol=1e-12)
    assert (fused == 0).any() and (fused > 0).any()  # the ReLU really clips

    a, wt, bias = Workload.parse("dense_bias:m=3,n=4,k=5").random_inputs(3)
    dense = Workload.parse("dense:m=3,n=4,k=5").reference([a, wt.T])  # dense stores its weight n×k
    np.testing.assert_allclose(Workload.parse("dense_bias:m=3,n=4,k=5").reference([a, wt, bias]), dense + bias,
                               rtol=1e-12)
