import numpy as np
import pytest

from metatune.workloads import FAMILIES, SUITES, Workload, WorkloadError, get_suite, resolve_workload

from .conftest import SMALL_SHAPES


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
    ],
)
def test_bad_workloads_name_the_problem(text, fragment):
    with pytest.raises(WorkloadError, match=fragment):
        Workload.parse(text)


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
