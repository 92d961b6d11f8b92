"""TVM's pool worker without PyTorch: `python -m metatune.measure.popen_worker READ_FD WRITE_FD`.

Every TVM worker process (the builder's, the local and the RPC runner's) is a fresh Python whose
`import tvm` also imports PyTorch: tvm-ffi imports it whenever it is installed. That is 2-3 s of a
worker's 3.5-4.5 s start on 2 cores, and each measuring command starts three workers, while builds,
runs and the functions metatune hands them never use PyTorch. This worker hides PyTorch from the
import (tvm-ffi takes the ImportError as "not installed") and then runs TVM's own worker loop;
`run_workers_without_torch` makes TVM's pools start it in place of theirs.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

TVM_WORKER = "tvm.exec.popen_worker"
WORKER = "metatune.measure.popen_worker"


class _WorkerLauncher:
    """Stands in for the `subprocess` module inside `tvm.support.popen_pool`: where TVM starts its
    worker (`python -m tvm.exec.popen_worker FDS`), starts this module instead; the rest passes through."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen:  # noqa: N802 (subprocess's name)
        if cmd[1:3] == ["-m", TVM_WORKER]:
            cmd = [cmd[0], "-m", WORKER, *cmd[3:]]
        return subprocess.Popen(cmd, **kwargs)


def run_workers_without_torch() -> None:
    """Make every TVM worker pool of this process start workers without PyTorch from now on (those
    already running stay as they are). Should a later TVM start its workers another way, they keep
    TVM's command: slower to start, nothing else."""
    from tvm.support import popen_pool

    popen_pool.subprocess = _WorkerLauncher()  # type: ignore[assignment]


def main() -> None:
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    from tvm.exec.popen_worker import main as tvm_worker_main

    tvm_worker_main()


if __name__ == "__main__":
    main()
