"""TVM's tensor intrinsics: registered per kind of target, so a CPU run does not parse CUDA's."""

from __future__ import annotations

import subprocess
import sys

from metatune.fileio import REPO_ROOT

INTRINSICS_SCRIPT = """
import sys

import tvm
from tvm.s_tir import TensorIntrin
from tvm.s_tir import meta_schedule as ms

from metatune.env.tvm_setup import import_tensor_intrinsics
from metatune.workload.operators import Workload


def registered(name):
    try:
        TensorIntrin.get(name)
        return True
    except ValueError:
        return False


cpu = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
import_tensor_intrinsics(cpu)
ms.TuneContext(mod=Workload.parse("dense:m=16,n=16,k=16").irmodule(), target=cpu, space_generator="post-order-apply")
print(registered("dot_16x4_vnni"), registered("wmma_sync_16x16x16_f16f16f32"),
      "tvm.s_tir.tensor_intrin.cuda" in sys.modules)
import_tensor_intrinsics({"kind": "cuda", "arch": "sm_90"})
print(registered("wmma_sync_16x16x16_f16f16f32"))
"""


def test_a_cpu_target_registers_the_cpu_intrinsics_and_a_cuda_target_adds_cudas():
    """CUDA's take ~3.5 s of the ~4 s the intrinsics take to register; the TuneContext made after the CPU
    ones (which imports the package itself) must not pull them in."""
    proc = subprocess.run([sys.executable, "-c", INTRINSICS_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "False", "False", "True"]
