"""Operator families, their shapes and their one-line text form.

A workload is a family name plus integer shape parameters, written
`conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1`. The text form is the workload's
stable key: it parses and prints back identically. Every family knows its FLOP count (exact;
for transposed convolutions the usual scatter count, every input element times every kernel tap,
as fvcore counts them: it includes the taps landing in the border `pad` crops, e.g. 3.7% more
than the kept ones for conv2d_transpose's example shape), its TVM compute (te, mostly through
tvm.topi), and a NumPy reference used to check compiled schedules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from metatune import MetatuneError

if TYPE_CHECKING:  # TVM is imported lazily: listing workloads must not pay for it.
    import tvm


class WorkloadError(MetatuneError):
    """A workload text or shape that cannot be built."""


Shape = dict[str, int]
Buffers = dict[str, tuple[int, ...]]

# TVM indexes a buffer whose extents all fit in int32 with int32 element offsets: a larger
# buffer overflows them and fails to build, so such shapes are rejected when parsed.
MAX_BUFFER_ELEMENTS = 2**31 - 1
INPUT_NAMES = ("data", "weight", "bias", "residual")


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _transpose_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size - 1) * stride - 2 * pad + kernel


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise WorkloadError(message)


def _check_positive(p: Shape, names: tuple[str, ...]) -> None:
    for name in names:
        _require(p[name] >= 1, f"{name}={p[name]} must be >= 1")


def _check_conv(p: Shape, spatial: tuple[tuple[str, str], ...]) -> None:
    _require(p["pad"] >= 0, f"pad={p['pad']} must be >= 0")
    for size, kernel in spatial:
        _require(
            p[size] + 2 * p["pad"] >= p[kernel],
            f"kernel {kernel}={p[kernel]} is larger than the padded input "
            f"({size}={p[size]} + 2*pad={2 * p['pad']})",
        )


def _check_transpose(p: Shape, spatial: tuple[tuple[str, str], ...]) -> None:
    _require(p["pad"] >= 0, f"pad={p['pad']} must be >= 0")
    for size, kernel in spatial:
        _require(p["pad"] < p[kernel], f"pad={p['pad']} must be smaller than {kernel}={p[kernel]}")
        out = _transpose_out(p[size], p[kernel], p["stride"], p["pad"])
        _require(out >= 1, f"output size {out} along {size} is empty")


# ---------------------------------------------------------------------------------------------
# NumPy references (float64 accumulation, so they are an independent check of TVM's output)


Pad2 = int | tuple[int, int]


def _pair(pad: Pad2) -> tuple[int, int]:
    return (pad, pad) if isinstance(pad, int) else pad


def _pad_hw(x: np.ndarray, pad: Pad2) -> np.ndarray:
    ph, pw = _pair(pad)
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def _ref_conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: Pad2) -> np.ndarray:
    """x: (n, c, h, w); w: (k, c, r, s)."""
    xp = _pad_hw(x.astype(np.float64), pad)
    k, _, r, s = w.shape
    oh = (xp.shape[2] - r) // stride + 1
    ow = (xp.shape[3] - s) // stride + 1
    out = np.zeros((x.shape[0], k, oh, ow))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j].astype(np.float64))
    return out


def _ref_conv2d_transpose(x: np.ndarray, w: np.ndarray, stride: int, pad: Pad2) -> np.ndarray:
    """x: (n, c, h, w); w: (c, k, r, s); scatter form of the transposed convolution."""
    n, _, h, wd = x.shape
    _, k, r, s = w.shape
    full = np.zeros((n, k, (h - 1) * stride + r, (wd - 1) * stride + s))
    for i in range(r):
        for j in range(s):
            contrib = np.einsum("nchw,ck->nkhw", x.astype(np.float64), w[:, :, i, j].astype(np.float64))
            full[:, :, i : i + stride * h : stride, j : j + stride * wd : stride] += contrib
    ph, pw = _pair(pad)
    return full[:, :, ph : full.shape[2] - ph, pw : full.shape[3] - pw]


def _ref_depthwise(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x: (n, c, h, w); w: (c, 1, r, s)."""
    xp = _pad_hw(x.astype(np.float64), pad)
    _, _, r, s = w.shape
    oh = (xp.shape[2] - r) // stride + 1
    ow = (xp.shape[3] - s) // stride + 1
    out = np.zeros((x.shape[0], x.shape[1], oh, ow))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += patch * w[None, :, 0, i, j, None, None]
    return out


# ---------------------------------------------------------------------------------------------
# Buffers the computes allocate besides their inputs and output (TOPI's padding, Winograd's tiles)


def _padded_2d(p: Shape) -> Buffers:
    return {"padded data": (p["n"], p["c"], p["h"] + 2 * p["pad"], p["w"] + 2 * p["pad"])}


def _transpose_scratch(p: Shape, spatial: tuple[tuple[str, str], ...]) -> Buffers:
    """conv*_transpose dilates the input by the stride, then pads it by kernel - 1 - pad per side."""
    dilated = tuple((p[size] - 1) * p["stride"] + 1 for size, _ in spatial)
    padded = tuple(d + 2 * (p[kernel] - 1 - p["pad"]) for d, (_, kernel) in zip(dilated, spatial))
    return {"dilated data": (p["n"], p["c"], *dilated), "padded data": (p["n"], p["c"], *padded)}


def _winograd_scratch(p: Shape) -> Buffers:
    """F(4x4, 3x3): 6x6 tiles over 4x4 output blocks (tvm.topi.nn.conv2d_winograd_nchw)."""
    _, _, oh, ow = _conv2d_out_shape(p)
    tiles = p["n"] * -(-oh // 4) * -(-ow // 4)
    return {**_padded_2d(p), "data tiles": (p["c"], tiles, 6, 6), "kernel tiles": (6, 6, p["c"], p["k"]),
            "product tiles": (6, 6, p["k"], tiles), "output tiles": (p["k"], tiles, 4, 4)}


def _no_scratch(p: Shape) -> Buffers:
    return {}


# ---------------------------------------------------------------------------------------------
# Families


@dataclass(frozen=True)
class Family:
    """One operator family: parameter names, compute, FLOPs, validity, buffers and reference."""

    name: str
    params: tuple[str, ...]
    description: str
    example: str
    check: Callable[[Shape], None]
    flops: Callable[[Shape], int]
    input_shapes: Callable[[Shape], list[tuple[int, ...]]]
    output_shape: Callable[[Shape], tuple[int, ...]]
    compute: Callable[[Shape, list["tvm.te.Tensor"]], "tvm.te.Tensor"]
    reference: Callable[[Shape, list[np.ndarray]], np.ndarray]
    # intermediate buffers that can outgrow every input and the output
    scratch_shapes: Callable[[Shape], Buffers] = field(default=_no_scratch)

    def buffers(self, p: Shape) -> Buffers:
        """Shapes of the buffers that can be the program's largest: inputs, output and scratch."""
        inputs = dict(zip(INPUT_NAMES, self.input_shapes(p)))
        return {**inputs, "output": self.output_shape(p), **self.scratch_shapes(p)}


def _conv1d_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.conv1d_ncw(ins[0], ins[1], p["stride"], p["pad"], 1, "float32")


def _conv1d_transpose_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.conv1d_transpose_ncw(ins[0], ins[1], p["stride"], p["pad"], "float32", 0)


def _conv2d_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.conv2d_nchw(ins[0], ins[1], p["stride"], p["pad"], 1, "float32")


def _conv2d_transpose_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.conv2d_transpose_nchw(ins[0], ins[1], (p["stride"],) * 2, (p["pad"],) * 2, "float32", (0, 0))


def _winograd_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.conv2d_winograd_nchw(ins[0], ins[1], p["stride"], p["pad"], 1, "float32")


def _depthwise_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.depthwise_conv2d_nchw(ins[0], ins[1], p["stride"], p["pad"], 1, "float32")


def _conv2d_bias_compute(p: Shape, ins):
    from tvm import topi

    # Relax adds a convolution's bias as a separate (1, k, 1, 1) tensor after TOPI's conv2d.
    return topi.add(_conv2d_compute(p, ins), ins[2])


def _conv2d_bias_relu_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.relu(_conv2d_bias_compute(p, ins))


def _conv2d_bias_add_relu_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.relu(topi.add(_conv2d_bias_compute(p, ins), ins[3]))


def _dense_compute(p: Shape, ins):
    from tvm import topi

    # `ins[1]` is stored n×k (TVM's dense layout); the text form's "k×n weight" is its transpose.
    return topi.nn.dense(ins[0], ins[1], out_dtype="float32")


def _dense_bias_relu_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.relu(topi.nn.dense(ins[0], ins[1], ins[2], out_dtype="float32"))


def _dense_bias_compute(p: Shape, ins):
    """`nn.Linear` as Relax runs it: torch.export turns it into addmm(bias, x, weight.T), Relax
    legalizes the matmul with its own te compute (not TOPI's dense) and the add with topi.add,
    bias first; FoldConstant stores the transposed weight, so the kernel reads a k×n weight."""
    from tvm import te, topi

    data, weight, bias = ins
    k = te.reduce_axis((0, p["k"]), name="k")
    matmul = te.compute(
        (p["m"], p["n"]), lambda i0, i1: te.sum(data[i0, k] * weight[k, i1], axis=k), name="matmul"
    )
    return topi.add(bias, matmul)


def _batch_matmul_compute(p: Shape, ins):
    from tvm import topi

    return topi.nn.batch_matmul(ins[0], ins[1], out_dtype="float32", transpose_b=True)


def _conv2d_flops(p: Shape) -> int:
    oh = _conv_out(p["h"], p["r"], p["stride"], p["pad"])
    ow = _conv_out(p["w"], p["s"], p["stride"], p["pad"])
    return 2 * p["n"] * p["k"] * oh * ow * p["c"] * p["r"] * p["s"]


def _check_conv2d(p: Shape) -> None:
    _check_positive(p, ("n", "c", "h", "w", "k", "r", "s", "stride"))
    _check_conv(p, (("h", "r"), ("w", "s")))


def _conv2d_out_shape(p: Shape) -> tuple[int, int, int, int]:
    return (p["n"], p["k"], _conv_out(p["h"], p["r"], p["stride"], p["pad"]),
            _conv_out(p["w"], p["s"], p["stride"], p["pad"]))


def _conv2d_epilogue_flops(ops: int) -> Callable[[Shape], int]:
    """Convolution FLOPs plus `ops` elementwise operations (bias add, residual add, ReLU) per output."""
    return lambda p: _conv2d_flops(p) + ops * int(np.prod(_conv2d_out_shape(p)))


def _conv2d_bias_inputs(p: Shape) -> list[tuple[int, ...]]:
    return [(p["n"], p["c"], p["h"], p["w"]), (p["k"], p["c"], p["r"], p["s"]), (1, p["k"], 1, 1)]


def _ref_conv2d_bias(p: Shape, a: list[np.ndarray]) -> np.ndarray:
    return _ref_conv2d(a[0], a[1], p["stride"], p["pad"]) + a[2]


def _check_winograd(p: Shape) -> None:
    _check_conv2d(p)
    _require(p["r"] == 3 and p["s"] == 3, f"winograd needs a 3x3 kernel, got r={p['r']}, s={p['s']}")
    _require(p["stride"] == 1, f"winograd needs stride=1, got stride={p['stride']}")


def _conv2d_transpose_flops(p: Shape) -> int:
    """The scatter count (module docstring): GFLOPS of these families are on that scale, in the
    datasets' labels as in the benches."""
    return 2 * p["n"] * p["c"] * p["h"] * p["w"] * p["k"] * p["r"] * p["s"]


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family(
            "conv1d", ("n", "c", "l", "k", "r", "stride", "pad"), "1-D convolution, NCW layout",
            "conv1d:n=1,c=64,l=256,k=128,r=3,stride=1,pad=1",
            check=lambda p: (_check_positive(p, ("n", "c", "l", "k", "r", "stride")), _check_conv(p, (("l", "r"),)))[-1],
            flops=lambda p: 2 * p["n"] * p["k"] * _conv_out(p["l"], p["r"], p["stride"], p["pad"]) * p["c"] * p["r"],
            input_shapes=lambda p: [(p["n"], p["c"], p["l"]), (p["k"], p["c"], p["r"])],
            output_shape=lambda p: (p["n"], p["k"], _conv_out(p["l"], p["r"], p["stride"], p["pad"])),
            scratch_shapes=lambda p: {"padded data": (p["n"], p["c"], p["l"] + 2 * p["pad"])},
            compute=_conv1d_compute,
            reference=lambda p, a: _ref_conv2d(a[0][:, :, None, :], a[1][:, :, None, :], p["stride"], (0, p["pad"]))[:, :, 0],
        ),
        Family(
            "conv1d_transpose", ("n", "c", "l", "k", "r", "stride", "pad"), "1-D transposed convolution, NCW layout",
            "conv1d_transpose:n=1,c=64,l=256,k=32,r=4,stride=2,pad=1",
            check=lambda p: (_check_positive(p, ("n", "c", "l", "k", "r", "stride")), _check_transpose(p, (("l", "r"),)))[-1],
            flops=lambda p: 2 * p["n"] * p["c"] * p["l"] * p["k"] * p["r"],
            input_shapes=lambda p: [(p["n"], p["c"], p["l"]), (p["c"], p["k"], p["r"])],
            output_shape=lambda p: (p["n"], p["k"], _transpose_out(p["l"], p["r"], p["stride"], p["pad"])),
            scratch_shapes=lambda p: _transpose_scratch(p, (("l", "r"),)),
            compute=_conv1d_transpose_compute,
            reference=lambda p, a: _ref_conv2d_transpose(a[0][:, :, None, :], a[1][:, :, None, :], p["stride"], (0, p["pad"]))[:, :, 0],
        ),
        Family(
            "conv2d", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"), "2-D convolution, NCHW layout",
            "conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1",
            check=_check_conv2d,
            flops=_conv2d_flops,
            input_shapes=lambda p: [(p["n"], p["c"], p["h"], p["w"]), (p["k"], p["c"], p["r"], p["s"])],
            output_shape=_conv2d_out_shape,
            scratch_shapes=_padded_2d,
            compute=_conv2d_compute,
            reference=lambda p, a: _ref_conv2d(a[0], a[1], p["stride"], p["pad"]),
        ),
        Family(
            "conv2d_bias", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
            "2-D convolution plus a (1, k, 1, 1) bias, NCHW layout (a convolution with folded BatchNorm)",
            "conv2d_bias:n=1,c=64,h=56,w=56,k=128,r=1,s=1,stride=2,pad=0",
            check=_check_conv2d,
            flops=_conv2d_epilogue_flops(1),
            input_shapes=_conv2d_bias_inputs,
            output_shape=_conv2d_out_shape,
            scratch_shapes=_padded_2d,
            compute=_conv2d_bias_compute,
            reference=_ref_conv2d_bias,
        ),
        Family(
            "conv2d_bias_relu", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
            "2-D convolution, bias add and ReLU (fused epilogue), NCHW layout",
            "conv2d_bias_relu:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1",
            check=_check_conv2d,
            flops=_conv2d_epilogue_flops(2),
            input_shapes=_conv2d_bias_inputs,
            output_shape=_conv2d_out_shape,
            scratch_shapes=_padded_2d,
            compute=_conv2d_bias_relu_compute,
            reference=lambda p, a: np.maximum(_ref_conv2d_bias(p, a), 0.0),
        ),
        Family(
            "conv2d_bias_add_relu", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
            "2-D convolution, bias add, residual add and ReLU (fused epilogue of a residual block), NCHW layout",
            "conv2d_bias_add_relu:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1",
            check=_check_conv2d,
            flops=_conv2d_epilogue_flops(3),
            input_shapes=lambda p: [*_conv2d_bias_inputs(p), _conv2d_out_shape(p)],
            output_shape=_conv2d_out_shape,
            scratch_shapes=_padded_2d,
            compute=_conv2d_bias_add_relu_compute,
            reference=lambda p, a: np.maximum(_ref_conv2d_bias(p, a) + a[3], 0.0),
        ),
        Family(
            "conv2d_transpose", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
            "2-D transposed convolution, NCHW layout, weight (c, k, r, s)",
            "conv2d_transpose:n=1,c=64,h=28,w=28,k=32,r=4,s=4,stride=2,pad=1",
            check=lambda p: (_check_positive(p, ("n", "c", "h", "w", "k", "r", "s", "stride")),
                             _check_transpose(p, (("h", "r"), ("w", "s"))))[-1],
            flops=_conv2d_transpose_flops,
            input_shapes=lambda p: [(p["n"], p["c"], p["h"], p["w"]), (p["c"], p["k"], p["r"], p["s"])],
            output_shape=lambda p: (p["n"], p["k"], _transpose_out(p["h"], p["r"], p["stride"], p["pad"]),
                                    _transpose_out(p["w"], p["s"], p["stride"], p["pad"])),
            scratch_shapes=lambda p: _transpose_scratch(p, (("h", "r"), ("w", "s"))),
            compute=_conv2d_transpose_compute,
            reference=lambda p, a: _ref_conv2d_transpose(a[0], a[1], p["stride"], p["pad"]),
        ),
        Family(
            "conv2d_winograd", ("n", "c", "h", "w", "k", "r", "s", "stride", "pad"),
            "2-D convolution by Winograd F(4x4, 3x3), NCHW layout (3x3 kernel, stride 1)",
            "conv2d_winograd:n=1,c=64,h=56,w=56,k=64,r=3,s=3,stride=1,pad=1",
            check=_check_winograd,
            flops=_conv2d_flops,
            input_shapes=lambda p: [(p["n"], p["c"], p["h"], p["w"]), (p["k"], p["c"], p["r"], p["s"])],
            output_shape=_conv2d_out_shape,
            scratch_shapes=_winograd_scratch,
            compute=_winograd_compute,
            reference=lambda p, a: _ref_conv2d(a[0], a[1], p["stride"], p["pad"]),
        ),
        Family(
            "depthwise_conv2d", ("n", "c", "h", "w", "r", "s", "stride", "pad"),
            "depthwise 2-D convolution (channel multiplier 1), NCHW layout",
            "depthwise_conv2d:n=1,c=64,h=56,w=56,r=3,s=3,stride=1,pad=1",
            check=lambda p: (_check_positive(p, ("n", "c", "h", "w", "r", "s", "stride")),
                             _check_conv(p, (("h", "r"), ("w", "s"))))[-1],
            flops=lambda p: 2 * p["n"] * p["c"] * _conv_out(p["h"], p["r"], p["stride"], p["pad"])
            * _conv_out(p["w"], p["s"], p["stride"], p["pad"]) * p["r"] * p["s"],
            input_shapes=lambda p: [(p["n"], p["c"], p["h"], p["w"]), (p["c"], 1, p["r"], p["s"])],
            output_shape=lambda p: (p["n"], p["c"], _conv_out(p["h"], p["r"], p["stride"], p["pad"]),
                                    _conv_out(p["w"], p["s"], p["stride"], p["pad"])),
            scratch_shapes=_padded_2d,
            compute=_depthwise_compute,
            reference=lambda p, a: _ref_depthwise(a[0], a[1], p["stride"], p["pad"]),
        ),
        Family(
            "dense", ("m", "n", "k"), "dense / matmul: an m×k input times a k×n weight",
            "dense:m=128,n=512,k=256",
            check=lambda p: _check_positive(p, ("m", "n", "k")),
            flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
            input_shapes=lambda p: [(p["m"], p["k"]), (p["n"], p["k"])],
            output_shape=lambda p: (p["m"], p["n"]),
            compute=_dense_compute,
            reference=lambda p, a: a[0].astype(np.float64) @ a[1].astype(np.float64).T,
        ),
        Family(
            "dense_bias_relu", ("m", "n", "k"), "dense followed by a bias add and ReLU (fused epilogue)",
            "dense_bias_relu:m=128,n=512,k=256",
            check=lambda p: _check_positive(p, ("m", "n", "k")),
            flops=lambda p: 2 * p["m"] * p["n"] * p["k"] + 2 * p["m"] * p["n"],
            input_shapes=lambda p: [(p["m"], p["k"]), (p["n"], p["k"]), (p["n"],)],
            output_shape=lambda p: (p["m"], p["n"]),
            compute=_dense_bias_relu_compute,
            reference=lambda p, a: np.maximum(a[0].astype(np.float64) @ a[1].astype(np.float64).T + a[2], 0.0),
        ),
        Family(
            "dense_bias", ("m", "n", "k"),
            "matmul plus bias, as Relax runs nn.Linear: an m×k input times a k×n weight (stored k×n, unlike dense)",
            "dense_bias:m=1,n=1000,k=512",
            check=lambda p: _check_positive(p, ("m", "n", "k")),
            flops=lambda p: 2 * p["m"] * p["n"] * p["k"] + p["m"] * p["n"],
            input_shapes=lambda p: [(p["m"], p["k"]), (p["k"], p["n"]), (p["n"],)],
            output_shape=lambda p: (p["m"], p["n"]),
            compute=_dense_bias_compute,
            reference=lambda p, a: a[0].astype(np.float64) @ a[1].astype(np.float64) + a[2],
        ),
        Family(
            "batch_matmul", ("b", "m", "n", "k"), "batched matmul: b × (m×k times k×n)",
            "batch_matmul:b=8,m=128,n=128,k=64",
            check=lambda p: _check_positive(p, ("b", "m", "n", "k")),
            flops=lambda p: 2 * p["b"] * p["m"] * p["n"] * p["k"],
            input_shapes=lambda p: [(p["b"], p["m"], p["k"]), (p["b"], p["n"], p["k"])],
            output_shape=lambda p: (p["b"], p["m"], p["n"]),
            compute=_batch_matmul_compute,
            reference=lambda p, a: np.einsum("bmk,bnk->bmn", a[0].astype(np.float64), a[1].astype(np.float64)),
        ),
    ]
}


# ---------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True)
class Workload:
    """A family plus its shape; `str(w)` is the canonical text form and stable key."""

    family: str
    shape: tuple[tuple[str, int], ...]

    @classmethod
    def create(cls, family: str, **shape: int) -> "Workload":
        """Validate a shape for a family and return the workload."""
        fam = get_family(family)
        missing = [name for name in fam.params if name not in shape]
        extra = [name for name in shape if name not in fam.params]
        if missing:
            raise WorkloadError(f"{family}: missing parameter(s) {', '.join(missing)}; expected {','.join(fam.params)}")
        if extra:
            raise WorkloadError(f"{family}: unknown parameter(s) {', '.join(extra)}; expected {','.join(fam.params)}")
        for name, value in shape.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise WorkloadError(f"{family}: {name}={value!r} is not an integer")
        params = {name: int(shape[name]) for name in fam.params}
        fam.check(params)
        _check_addressable(fam, params)
        return cls(family, tuple(params.items()))

    @classmethod
    def parse(cls, text: str) -> "Workload":
        """Parse `family:name=value,...` (whitespace around tokens is ignored)."""
        family, sep, rest = text.strip().partition(":")
        if not sep:
            raise WorkloadError(f"malformed workload {text!r}: expected 'family:name=value,...'")
        family = family.strip()
        get_family(family)
        shape: dict[str, int] = {}
        for item in filter(None, (tok.strip() for tok in rest.split(","))):
            name, eq, value = item.partition("=")
            name = name.strip()
            if not eq or not name:
                raise WorkloadError(f"malformed parameter {item!r} in {text!r}: expected name=value")
            if name in shape:
                raise WorkloadError(f"parameter {name!r} given twice in {text!r}")
            try:
                shape[name] = int(value.strip())
            except ValueError:
                raise WorkloadError(f"parameter {name}={value.strip()!r} in {text!r} is not an integer") from None
        return cls.create(family, **shape)

    def __str__(self) -> str:
        return f"{self.family}:" + ",".join(f"{k}={v}" for k, v in self.shape)

    @property
    def key(self) -> str:
        return str(self)

    @property
    def params(self) -> Shape:
        return dict(self.shape)

    @property
    def spec(self) -> Family:
        return FAMILIES[self.family]

    @property
    def flops(self) -> int:
        return self.spec.flops(self.params)

    def input_shapes(self) -> list[tuple[int, ...]]:
        return self.spec.input_shapes(self.params)

    def tensors(self) -> list["tvm.te.Tensor"]:
        """Placeholders followed by the output tensor."""
        from tvm import te

        ins = [te.placeholder(s, name=name, dtype="float32") for name, s in zip(INPUT_NAMES, self.input_shapes())]
        return [*ins, self.spec.compute(self.params, ins)]

    def prim_func(self) -> "tvm.tirx.PrimFunc":
        """The operator as TIR; weights keep their declared layout.

        TOPI marks dense/batch_matmul weights "layout free", which lets MetaSchedule's
        RewriteLayout postprocessor change the kernel's argument layout. We drop the mark so
        that every measured program takes exactly the inputs `input_shapes()` describes.
        """
        from tvm import te

        func = te.create_prim_func(self.tensors()).with_attr("global_symbol", "main")
        return func.without_attr("layout_free_buffers")

    def irmodule(self) -> "tvm.IRModule":
        import tvm

        return tvm.IRModule({"main": self.prim_func()})

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Non-trivial inputs in [-1, 1): zeros would hide indexing bugs."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, size=s).astype("float32") for s in self.input_shapes()]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        return self.spec.reference(self.params, inputs)


def _check_addressable(fam: Family, p: Shape) -> None:
    for name, shape in fam.buffers(p).items():
        size = math.prod(shape)
        _require(size <= MAX_BUFFER_ELEMENTS,
                 f"{fam.name}: the {name} buffer ({'x'.join(map(str, shape))}) has {size} elements, more than "
                 f"the {MAX_BUFFER_ELEMENTS} that TVM's int32 buffer indices address; use smaller dimensions")


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise WorkloadError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def _resnet18() -> list[Workload]:
    """AutoTVM Table 1 (C1-C12, ResNet-18 convolutions on 224x224, batch 1) and dense 1024."""
    rows = [  # h=w, c, k, kernel, stride
        (224, 3, 64, 7, 2), (56, 64, 64, 3, 1), (56, 64, 64, 1, 1), (56, 64, 128, 3, 2),
        (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2), (28, 128, 256, 1, 2),
        (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2), (7, 512, 512, 3, 1),
    ]
    convs = [
        Workload.create("conv2d", n=1, c=c, h=hw, w=hw, k=k, r=r, s=r, stride=st, pad=r // 2)
        for hw, c, k, r, st in rows
    ]
    return [*convs, Workload.create("dense", m=1024, n=1024, k=1024)]


def _quick() -> list[Workload]:
    """Three small workloads that build and measure in seconds (CI)."""
    return [
        Workload.parse("dense:m=64,n=64,k=64"),
        Workload.parse("conv2d:n=1,c=16,h=14,w=14,k=16,r=3,s=3,stride=1,pad=1"),
        Workload.parse("depthwise_conv2d:n=1,c=32,h=14,w=14,r=3,s=3,stride=1,pad=1"),
    ]


SUITES: dict[str, Callable[[], list[Workload]]] = {"resnet18": _resnet18, "quick": _quick}
RESNET18_NAMES = [f"C{i}" for i in range(1, 13)] + ["dense1024"]


def get_suite(name: str) -> list[Workload]:
    try:
        return SUITES[name]()
    except KeyError:
        raise WorkloadError(f"unknown suite {name!r}; known: {', '.join(SUITES)}") from None


def resolve_workload(text: str) -> Workload:
    """A workload from its text form, or a ResNet-18 layer name such as `C6`."""
    if text in RESNET18_NAMES:
        return _resnet18()[RESNET18_NAMES.index(text)]
    if ":" not in text:
        raise WorkloadError(f"unknown workload {text!r}: give 'family:name=value,...' (metatune workloads list) "
                            f"or a ResNet-18 layer's name ({', '.join(RESNET18_NAMES)})")
    return Workload.parse(text)
