"""Timing a library reference (PyTorch eager; onnxruntime for an ONNX model) so that a
comparison with TVM can be trusted.

A reference timed in the tuning process right after TVM can be slowed by TVM's runtime threads
still spinning, and on a shared machine (a VM whose host is busy) every pass can be slowed by a
fifth for seconds at a time; either reads as a speed-up for TVM. So every reference is timed
here, one way for all callers:

* in a fresh process (`python -m metatune.measure.reference_timing SPEC`), which builds the
  PyTorch call, checks its output and then times one pass per request;
* in short passes alternating with the TVM side, A B A B ..., at least `PASSES` pairs and more
  (up to `MAX_PASSES`) while the estimate's interval is too wide; before every pass the other
  side's process is waited on until its threads are idle (its CPU time stops growing). A slow
  phase of the machine then slows both passes of a pair, so the speed-up is the median of the
  pairs' ratios, not a ratio of two separately disturbed medians;
* each estimate (the speed-up; a reference timed alone: its median) comes with a distribution-
  free 95% confidence interval of the median (order statistics, scipy's `quantile_test`): a
  single disturbed pass moves neither. The comparison is `unstable`, and gives no speed-up,
  when that interval reaches more than `UNCERTAINTY_LIMIT` from the estimate, when other
  processes kept more than `OTHER_LOAD_LIMIT` of the cores busy while it ran (a load through
  every pass slows all of them alike, so only the CPU time shows it), or when a process never
  went idle.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any, Callable, Literal, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.env.device import usable_cores
from metatune.measure.check import WrongResultError, output_error, worst_output_error
from metatune.measure.cpu_load import OtherLoad
from metatune.measure.measurer import median_latency
from metatune.workload.model_source import ModelSource
from metatune.workload.operators import Workload
from metatune.workload.relax_tasks import load_model

if TYPE_CHECKING:
    import torch

PASSES = 9  # the fewest for which the 95% interval of a median excludes the slowest and fastest pass
MIN_PASSES = 6  # below it no interval of the median reaches 95%
MAX_PASSES = 30  # while the interval is too wide, more passes narrow it, up to this many
PASS_S = 0.3  # each pass: the median of blocks of at least MIN_BLOCK_S, over about this long
MIN_BLOCK_S = 0.01  # short, so that a pass on a loaded machine still ends soon after PASS_S
CONFIDENCE = 0.95
UNCERTAINTY_LIMIT = 0.10
OTHER_LOAD_LIMIT = 0.10  # share of the machine's cores
OPERATOR_RTOL = 1e-4  # PyTorch fp32 against the float64 NumPy reference
FOLDING_RTOL = 1e-4  # BatchNorm-folded network against the unfolded one
IDLE_CPU_SHARE = 0.1  # a process is idle when its threads use less than this share of one core
IDLE_WINDOW_S = 0.05
IDLE_TIMEOUT_S = 5.0
SETUP_TIMEOUT_S = 600.0
TORCH_LIBRARY = "PyTorch eager"
ONEDNN_LIBRARY = "oneDNN"  # PyTorch's own oneDNN kernels: full AVX-512 on AMD, where its MKL sgemm is not

REFERENCE_BUSY = f"the reference process was still busy {IDLE_TIMEOUT_S:g} s after timing"

Kind = Literal["operator", "model", "matmul"]


@dataclass(frozen=True)
class ReferenceSpec:
    """What the reference process times: a workload's PyTorch operator (`name` = workload text),
    a network as its source library runs it (`name` = its `--model` SPEC, `inputs` its given
    shapes; PyTorch networks in eval mode with BatchNorm folded), or a
    `name`³ fp32 matmul (the machine's practical peak; `library` "oneDNN": through PyTorch's
    oneDNN kernels instead of `torch.mm`). On `cuda` it runs on GPU 0 (cuDNN/cuBLAS,
    TF32 off so that it computes what TVM's fp32 kernels compute, cuDNN's autotuner on), and
    every timed call ends with a device synchronisation."""

    kind: Kind
    name: str
    threads: int
    pass_s: float = PASS_S
    device: str = "cpu"
    inputs: tuple[tuple[int, ...], ...] = ()  # a model's --input-shape values
    library: str = TORCH_LIBRARY

    @classmethod
    def operator(cls, workload: Workload, threads: int, pass_s: float = PASS_S,
                 device: str = "cpu") -> "ReferenceSpec":
        return cls("operator", str(workload), threads, pass_s, device)

    @classmethod
    def model(cls, source: ModelSource, threads: int) -> "ReferenceSpec":
        """A network as its source library runs it: PyTorch eager, or onnxruntime for an ONNX file."""
        return cls("model", source.spec, threads, inputs=source.input_shapes, library=source.library)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReferenceSpec":
        return cls(**{**data, "inputs": tuple(tuple(shape) for shape in data.get("inputs", ()))})


@dataclass(frozen=True)
class Estimate:
    """The median of some samples with its 95% confidence interval."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Estimate":
        """Distribution-free: the interval is two order statistics, whatever the (skewed) noise."""
        from scipy.stats import quantile_test

        if len(samples) < MIN_PASSES:
            raise ValueError(f"a {CONFIDENCE:.0%} interval of a median needs at least {MIN_PASSES} samples")
        median = float(np.median(samples))
        interval = quantile_test(np.asarray(samples, dtype=float), q=median, p=0.5).confidence_interval(CONFIDENCE)
        return cls(median, float(interval.low), float(interval.high))

    @property
    def uncertainty(self) -> float:
        """How far the interval reaches from the median, relative to it."""
        return max(self.high / self.median - 1, 1 - self.low / self.median)

    def to_json(self) -> dict[str, float]:
        return {"median": _significant(self.median), "low": _significant(self.low), "high": _significant(self.high),
                "uncertainty": round(self.uncertainty, 4)}


@dataclass(frozen=True)
class Timing:
    """One side's passes (milliseconds) and when each began (seconds after the first pass of the comparison)."""

    passes_ms: tuple[float, ...]
    at_s: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return median_latency(self.passes_ms)

    @cached_property
    def estimate(self) -> Estimate:
        return Estimate.of(self.passes_ms)

    @property
    def spread(self) -> float:
        """Slowest pass / fastest pass - 1: how much the machine moved while the side was timed."""
        return max(self.passes_ms) / min(self.passes_ms) - 1

    def to_json(self) -> dict[str, Any]:
        return {"passes_ms": [_significant(p) for p in self.passes_ms], "at_s": [round(t, 3) for t in self.at_s],
                "median_ms": _significant(self.median_ms), "interval_ms": _interval(self.estimate),
                "spread": round(self.spread, 4)}


def _significant(value: float) -> float:
    """Six significant digits: a microsecond kernel keeps its precision in milliseconds, and so does its ratio."""
    return float(f"{value:.6g}")


def _interval(estimate: Estimate) -> list[float]:
    return [_significant(estimate.low), _significant(estimate.high)]


@dataclass(frozen=True)
class Comparison:
    """The reference's passes and, when TVM was timed alongside, TVM's; `reasons` says why the
    comparison is unstable (empty: it is not). `other_cores` is how many cores other processes
    kept busy meanwhile; `load_average` (the machine's 1-minute load before and after) is kept
    for the record."""

    spec: ReferenceSpec
    reference: Timing
    tvm: Timing | None
    flops: float | None  # of one reference call, when it is an operator or the peak matmul
    max_rel_error: float | None  # of the timed call against its check; None: it runs the source as it is
    reasons: tuple[str, ...]
    other_cores: float
    load_average: tuple[float, float]

    @property
    def unstable(self) -> bool:
        return bool(self.reasons)

    @property
    def ratios(self) -> tuple[float, ...]:
        """Reference pass / the TVM pass just before it, per pair (above 1: TVM is faster)."""
        return () if self.tvm is None else paired_ratios(self.reference.passes_ms, self.tvm.passes_ms)

    @cached_property
    def ratio_estimate(self) -> Estimate | None:
        return Estimate.of(self.ratios) if self.tvm is not None else None

    @property
    def speedup(self) -> float | None:
        """The median of the pairs' ratios; None when unstable or TVM was not timed."""
        estimate = self.ratio_estimate
        if self.unstable or estimate is None:
            return None
        return estimate.median

    def summary(self) -> str:
        """One line: both medians and the speed-up with its interval, or why there is none."""
        ref = f"{self.spec.library} {self.reference.median_ms:.4g} ms"
        text = ref if self.tvm is None else f"TVM {self.tvm.median_ms:.4g} ms vs {ref}"
        if self.unstable:
            return f"{text}: unstable ({'; '.join(self.reasons)}), no speed-up reported; re-measure on an idle machine"
        passes = len(self.reference.passes_ms)
        if self.speedup is None:
            estimate = self.reference.estimate
            return f"{text} ({passes} passes, {CONFIDENCE:.0%} interval {estimate.low:.4g}–{estimate.high:.4g} ms)"
        estimate = self.ratio_estimate
        assert estimate is not None
        return (f"{text}: {self.speedup:.3g}× ({passes} pass pairs, {CONFIDENCE:.0%} interval "
                f"{estimate.low:.3g}–{estimate.high:.3g}×)")

    def to_json(self) -> dict[str, Any]:
        speedup, ratio = self.speedup, self.ratio_estimate
        return {"library": self.spec.library, "spec": asdict(self.spec), "process": "fresh", "confidence": CONFIDENCE,
                "uncertainty_limit": UNCERTAINTY_LIMIT, "other_load_limit": OTHER_LOAD_LIMIT,
                "tvm": None if self.tvm is None else self.tvm.to_json(),
                "reference": {**self.reference.to_json(), "max_rel_error": self.max_rel_error},
                "ratios": [_significant(r) for r in self.ratios],
                "ratio": None if ratio is None else ratio.to_json(),
                "flops": self.flops, "unstable": self.unstable, "reasons": list(self.reasons),
                "speedup": None if speedup is None else _significant(speedup),
                "other_cores": round(self.other_cores, 3),
                "load_average": [round(load, 2) for load in self.load_average]}


def wait_until_idle(timeout_s: float = IDLE_TIMEOUT_S) -> bool:
    """Sleep until this process's other threads (TVM's or PyTorch's pool) stop using CPU; False
    when they still did after `timeout_s`. The sleeping thread uses none, so any CPU time the
    process gains over a window is theirs."""
    deadline = time.perf_counter() + timeout_s
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(IDLE_WINDOW_S)
        if time.process_time() - cpu < IDLE_CPU_SHARE * (time.perf_counter() - wall):
            return True
        if time.perf_counter() > deadline:
            return False


def check_max_passes(max_passes: int) -> None:
    """A user's cap on the passes (`--reference-passes`): not below the `PASSES` every timing takes."""
    if max_passes < PASSES:
        raise MetatuneError(f"--reference-passes {max_passes}: at least {PASSES}, the fewest passes whose median's "
                            f"{CONFIDENCE:.0%} interval leaves out the slowest and the fastest")


def compare(spec: ReferenceSpec, tvm_pass: Callable[[], float] | None, passes: int = PASSES,
            max_passes: int = MAX_PASSES) -> Comparison:
    """Time the reference in a fresh process, alternating with `tvm_pass` (one TVM pass, returning
    milliseconds; None: the reference alone): `passes` passes each, then more, one (pair) at a
    time, while the estimate's interval is wider than the limit, up to `max_passes`."""
    if passes < MIN_PASSES:
        raise ValueError(f"a {CONFIDENCE:.0%} interval of a median needs at least {MIN_PASSES} passes")
    if max_passes < passes:
        raise ValueError(f"max_passes ({max_passes}) is below passes ({passes})")
    reasons: list[str] = []
    load_before = os.getloadavg()[0]
    with ReferenceProcess(spec) as process:
        if not process.idle:
            reasons.append(REFERENCE_BUSY)
        tvm: list[tuple[float, float]] = []
        reference: list[tuple[float, float]] = []
        other = OtherLoad((os.getpid(), process.pid)).start()
        start = time.perf_counter()
        while len(reference) < passes or (len(reference) < max_passes
                                           and _estimate(reference, tvm).uncertainty > UNCERTAINTY_LIMIT):
            if tvm_pass is not None:
                tvm.append((time.perf_counter() - start, tvm_pass()))
            if not wait_until_idle():
                reasons.append(f"the timing process (TVM's side) was still busy after {IDLE_TIMEOUT_S:g} s "
                               "before a reference pass")
            at = time.perf_counter() - start
            ms, idle = process.time_pass()
            reference.append((at, ms))
            if not idle:
                reasons.append(REFERENCE_BUSY)
        other_cores = other.cores()
    cores = usable_cores()  # the CPUs OtherLoad watches
    if other_cores > OTHER_LOAD_LIMIT * cores:
        reasons.append(f"other processes kept {other_cores:.2g} of {cores} cores busy while timing")
    estimate = _estimate(reference, tvm)
    if estimate.uncertainty > UNCERTAINTY_LIMIT:
        what = "the speed-up" if tvm else f"the {spec.library} median"
        reasons.append(f"{what}'s {CONFIDENCE:.0%} interval reaches {estimate.uncertainty:.0%} "
                       f"> {UNCERTAINTY_LIMIT:.0%} from it after {len(reference)} passes")
    return Comparison(spec, _timing(reference), _timing(tvm) if tvm else None, process.flops, process.max_rel_error,
                      tuple(dict.fromkeys(reasons)), other_cores, (load_before, os.getloadavg()[0]))


def paired_ratios(reference_ms: Sequence[float], tvm_ms: Sequence[float]) -> tuple[float, ...]:
    return tuple(ref / tvm for ref, tvm in zip(reference_ms, tvm_ms))


def _estimate(reference: list[tuple[float, float]], tvm: list[tuple[float, float]]) -> Estimate:
    """The speed-up's estimate (pairs' ratios) when TVM is timed, else the reference median's."""
    reference_ms = [ms for _, ms in reference]
    return Estimate.of(paired_ratios(reference_ms, [ms for _, ms in tvm]) if tvm else reference_ms)


def _timing(passes: list[tuple[float, float]]) -> Timing:
    return Timing(tuple(ms for _, ms in passes), tuple(at for at, _ in passes))


class ReferenceProcess:
    """The reference's own process: built and checked on entry, one pass per `time_pass`."""

    def __init__(self, spec: ReferenceSpec) -> None:
        self.spec = spec
        self.flops: float | None = None
        self.max_rel_error: float | None = 0.0
        self.idle = True  # whether the process was idle after its set-up

    def __enter__(self) -> "ReferenceProcess":
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, json.dumps(asdict(self.spec))],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.pid = self._proc.pid
        try:
            ready = self._reply(SETUP_TIMEOUT_S)
        except BaseException:  # a stop (Ctrl-C) or a bad reply during the set-up: the process goes too
            if self._proc.poll() is None:
                self._proc.kill()
            self._close()
            raise
        self.flops, self.max_rel_error, self.idle = ready["flops"], ready["max_rel_error"], ready["idle"]
        return self

    def time_pass(self) -> tuple[float, bool]:
        """(milliseconds of one pass, whether the process was idle again after it)."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write("pass\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # the process has ended: the reply below is its end, reported with its stderr
        reply = self._reply(60 * self.spec.pass_s + 60)
        return reply["ms"], reply["idle"]

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        readable, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        line = self._proc.stdout.readline() if readable else ""
        if not line:
            self._stderr.seek(0)
            stderr = self._stderr.read()[-2000:].strip()
            self._close()
            raise MetatuneError(f"the {self.spec.library} reference process for {self.spec.kind} {self.spec.name} "
                                f"{'failed' if readable else f'gave no answer within {timeout_s:g} s'}: {stderr}")
        reply = json.loads(line)
        if "wrong_result" in reply or "error" in reply:
            self._close()
        if "wrong_result" in reply:
            raise WrongResultError(reply["wrong_result"])
        if "error" in reply:
            raise MetatuneError(f"{self.spec.library} reference of {self.spec.kind} {self.spec.name}: {reply['error']}")
        return reply

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        """End the process: closing its stdin ends its loop; kill it if it does not exit."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
        self._stderr.close()


def torch_operator(workload: Workload) -> Callable[..., "torch.Tensor"]:
    """The PyTorch call computing the same function as the workload's TOPI compute."""
    import torch
    import torch.nn.functional as F

    p = workload.params
    family = workload.family
    if family == "conv1d":
        return lambda x, w: F.conv1d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "conv1d_transpose":
        return lambda x, w: F.conv_transpose1d(x, w, stride=p["stride"], padding=p["pad"])
    if family in ("conv2d", "conv2d_winograd"):
        return lambda x, w: F.conv2d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "conv2d_bias":  # the bias is (1, k, 1, 1), as TOPI broadcasts it
        return lambda x, w, b: F.conv2d(x, w, b.reshape(-1), stride=p["stride"], padding=p["pad"])
    if family == "conv2d_bias_relu":
        return lambda x, w, b: torch.relu(F.conv2d(x, w, b.reshape(-1), stride=p["stride"], padding=p["pad"]))
    if family == "conv2d_bias_add_relu":  # a residual block's end: + the shortcut, then ReLU
        return lambda x, w, b, r: torch.relu(F.conv2d(x, w, b.reshape(-1), stride=p["stride"], padding=p["pad"]) + r)
    if family == "conv2d_transpose":
        return lambda x, w: F.conv_transpose2d(x, w, stride=p["stride"], padding=p["pad"])
    if family == "depthwise_conv2d":
        return lambda x, w: F.conv2d(x, w, stride=p["stride"], padding=p["pad"], groups=p["c"])
    if family == "dense":
        return lambda x, w: F.linear(x, w)
    if family == "dense_bias_relu":
        return lambda x, w, b: torch.relu(F.linear(x, w, b))
    if family == "dense_bias":  # its weight is k×n (a matmul's), not dense's n×k
        return lambda x, w, b: torch.addmm(b, x, w)
    if family == "batch_matmul":
        return lambda a, b: torch.bmm(a, b.transpose(1, 2))
    raise MetatuneError(f"no PyTorch reference for family {family!r}")


def _build(spec: ReferenceSpec) -> tuple[Callable[[], Any], float | None, float | None]:
    """The call to time, its flops (None for a model) and its checked error (None: nothing to
    check, it runs the source as it is); raises WrongResultError."""
    import torch

    if spec.kind == "matmul":
        return _matmul(int(spec.name), spec.device, spec.library)
    if spec.kind == "operator":
        workload = Workload.parse(spec.name)
        inputs = workload.random_inputs(seed=0)
        tensors = [torch.from_numpy(x).to(spec.device) for x in inputs]
        op = torch_operator(workload)
        with torch.inference_mode():
            out = op(*tensors).cpu().numpy()
        error = output_error(out, workload.reference(inputs))
        if not error <= OPERATOR_RTOL:
            raise WrongResultError(f"PyTorch reference of {workload} differs from NumPy (max rel. error {error:.2e})")
        return lambda: op(*tensors), float(workload.flops), error
    if spec.device != "cpu":
        raise MetatuneError(f"whole-model references run on the CPU only, not {spec.device}")
    model = load_model(ModelSource.parse(spec.name, spec.inputs))
    inputs = model.example_inputs()
    call = model.reference_call(inputs, spec.threads)
    transformed = model.reference_outputs(inputs)
    if transformed is None:
        return call, None, None
    error = worst_output_error(transformed, model.expected_outputs(inputs))
    if not error <= FOLDING_RTOL:
        raise WrongResultError(f"{spec.name} with BatchNorm folded differs from the unfolded network "
                               f"(max rel. error {error:.2e})")
    return call, None, error


def _matmul(size: int, device: str, library: str) -> tuple[Callable[[], Any], float, float]:
    """A size³ fp32 matmul: `torch.mm` (MKL on x86, cuBLAS), or oneDNN's, checked against it."""
    import torch

    if library not in (TORCH_LIBRARY, ONEDNN_LIBRARY) or (library == ONEDNN_LIBRARY and device != "cpu"):
        raise MetatuneError(f"no {library} matmul on {device}")
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    if library == TORCH_LIBRARY:
        return lambda: torch.mm(a, b), 2.0 * size**3, 0.0
    onednn_a, onednn_w = a.to_mkldnn(), b.t().contiguous().to_mkldnn()  # linear computes a @ w.T

    def call() -> "torch.Tensor":
        return torch._C._nn.mkldnn_linear(onednn_a, onednn_w)

    error = output_error(call().to_dense().numpy(), torch.mm(a, b).numpy())
    if not error <= OPERATOR_RTOL:
        raise WrongResultError(f"oneDNN's {size}³ matmul differs from torch.mm (max rel. error {error:.2e})")
    return call, 2.0 * size**3, error


def _synchronized(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """`fn` followed by a wait for the GPU: kernel launches return at once, so without it a block
    would time launches, not kernels. Every call waits, as TVM's runner times each kernel run."""
    if device == "cpu":
        return fn
    import torch

    def call() -> Any:
        out = fn()
        torch.cuda.synchronize()
        return out

    return call


def _calls_per_block(fn: Callable[[], Any]) -> int:
    """Calls that last at least MIN_BLOCK_S, after a warm-up call."""
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(np.ceil(MIN_BLOCK_S / max(time.perf_counter() - t0, 1e-9))))


def _one_pass(fn: Callable[[], Any], number: int, pass_s: float) -> float:
    """Milliseconds per call: the median over blocks of `number` calls, blocks filling about `pass_s`."""
    samples: list[float] = []
    end = time.perf_counter() + pass_s
    while not samples or time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return median_latency(samples) * 1e3


def _serve(spec: ReferenceSpec, replies: IO[str]) -> None:
    """Build and check the reference, then answer each `pass` line on stdin with one timed pass."""
    import torch

    def reply(**data: Any) -> None:
        replies.write(json.dumps(data) + "\n")
        replies.flush()

    torch.set_num_threads(spec.threads)
    if spec.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    try:
        fn, flops, error = _build(spec)
        fn = _synchronized(fn, spec.device)
    except WrongResultError as err:
        return reply(wrong_result=str(err))
    except MetatuneError as err:
        return reply(error=str(err))
    with torch.inference_mode():
        number = _calls_per_block(fn)
        reply(flops=flops, max_rel_error=error, idle=wait_until_idle())
        for line in sys.stdin:
            if line.strip() != "pass":
                break
            ms = _one_pass(fn, number, spec.pass_s)
            reply(ms=ms, idle=wait_until_idle())


if __name__ == "__main__":
    # Replies go to the original stdout; anything else printing to stdout lands on stderr.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    _serve(ReferenceSpec.from_json(json.loads(sys.argv[1])), protocol)
