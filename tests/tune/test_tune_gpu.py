"""`metatune tune` on an NVIDIA GPU: the shipped CUDA checkpoint tunes a kernel that NumPy confirms.

Needs a CUDA device (skipped elsewhere with the reason); everything before measuring (CUDA design
spaces, GPU encodings, the CUDA checkpoint) is tested on the CPU in tests/encode and tests/zoo.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from metatune.fileio import REPO_ROOT


def _has_cuda_gpu() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


pytestmark = pytest.mark.skipif(not _has_cuda_gpu(), reason="needs an NVIDIA GPU (CUDA device 0)")


@pytest.mark.parametrize("strategy", ["metatune", "xgb"])
def test_tuning_a_kernel_on_the_gpu_is_verified(tmp_path, strategy):
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "metatune", "tune", "--workload", "dense:m=256,n=256,k=256",
                          "--target", "cuda", "--trials", "16", "--trials-per-iter", "8", "--strategy", strategy,
                          "--db", str(tmp_path / "db"), "--json", str(out)],
                         capture_output=True, text=True, timeout=900, cwd=REPO_ROOT)
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["verified"] and result["trials"] == 16 and result["best_gflops"] > 0
    if strategy == "metatune":
        assert result["checkpoint"].startswith("cuda-sm")
