"""Files that several parts of metatune share: their names, and how they are replaced on disk.

Nothing here imports the rest of the package, so any module can use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout: shipped datasets/, zoo/, train/ live here
CARD_FILE = "card.json"  # dataset card, training-run card, zoo-version card
WEIGHTS_FILE = "model.safetensors"  # a trained model, in a run or zoo version directory
INDEX_FILE = "index.json"  # the zoo's list of published versions
WORKLOAD_FILE = "database_workload.json"  # TVM JSONDatabase: one workload per line
RECORD_FILE = "database_tuning_record.json"  # TVM JSONDatabase: one tuning record per line


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers, and a crash, see the old file or the new one,
    never a mix: write a unique temp file next to it, fsync it, and rename it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as open() gives it
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
