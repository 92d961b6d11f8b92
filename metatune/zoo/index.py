"""Where the zoo lives and its index: entries, versions, ids, atomic writes under a lock."""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from metatune.encode.supergraph import Template
from metatune.fileio import INDEX_FILE, REPO_ROOT, WEIGHTS_FILE, write_atomic
from metatune.zoo.errors import ZooError

README_FILE = "README.md"
ZOO_ENV = "METATUNE_ZOO"
TRAIN_HINT = ("train one: `metatune zoo adapt --from CHECKPOINT` adapts another device's checkpoint in minutes; "
              "for a native one add train/configs/DEVICE.yaml (a copy of a shipped config naming this device and "
              "its dataset) and run `make train-zoo DEVICES=DEVICE` (hours: it measures the dataset first)")

VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
SAFE_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def default_zoo_dir() -> Path:
    """$METATUNE_ZOO, else the `zoo/` shipped at the repository root next to the package."""
    env = os.environ.get(ZOO_ENV)
    return Path(env) if env else REPO_ROOT / "zoo"


def code_template_version(arch: str) -> str:
    """The super-graph template version of the installed encoder for a device architecture
    (`cuda` programs have their own template; every CPU architecture shares one)."""
    return Template.for_target("cuda" if arch == "cuda" else "cpu").version


def version_number(version: str) -> int:
    m = VERSION_RE.match(version)
    if not m:
        raise ZooError(f"bad zoo version {version!r}: expected v1, v2, ...")
    return int(m.group(1))


@dataclass(frozen=True)
class ZooEntry:
    """One published checkpoint as recorded in index.json."""

    device_id: str
    version: str
    path: str
    sha256: str
    size_bytes: int
    template_version: str
    created: str
    published: str
    arch: str
    isa_family: str
    isa_class: str
    num_cores: int
    flags: tuple[str, ...]
    metrics: dict[str, float]
    root: Path = field(default=Path("."), compare=False, repr=False)

    @property
    def id(self) -> str:
        return f"{self.device_id}/{self.version}"

    @property
    def number(self) -> int:
        return version_number(self.version)

    @property
    def directory(self) -> Path:
        return self.root / self.path

    @property
    def weights_path(self) -> Path:
        return self.directory / WEIGHTS_FILE

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["root"]
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], root: Path) -> "ZooEntry":
        names = [f for f in cls.__dataclass_fields__ if f != "root"]
        missing = [f for f in names if f not in data]
        if missing:
            raise ZooError(f"{Path(root) / INDEX_FILE}: entry {data.get('device_id')}/{data.get('version')} "
                           f"lacks {', '.join(missing)}")
        values = {f: data[f] for f in names}
        values["flags"] = tuple(values["flags"])
        return cls(**values, root=Path(root))


def read_index(root: Path) -> list[ZooEntry]:
    """Entries of a zoo; a directory without index.json is an empty zoo, a missing one an error
    (so that a mistyped --zoo never "verifies" successfully)."""
    path = Path(root) / INDEX_FILE
    if not Path(root).is_dir():
        raise ZooError(f"zoo directory {root} does not exist (set --zoo or ${ZOO_ENV})")
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ZooError(f"{path} is unreadable ({err}); restore it from version control") from err
    if not isinstance(raw, list):
        raise ZooError(f"{path} must hold a JSON list of entries")
    return [ZooEntry.from_json(e, Path(root)) for e in raw]


def write_index(root: Path, entries: list[ZooEntry]) -> None:
    ordered = sorted(entries, key=lambda e: (e.device_id, e.number))
    text = json.dumps([e.to_json() for e in ordered], indent=2) + "\n"
    write_atomic(Path(root) / INDEX_FILE, text.encode())


@contextlib.contextmanager
def index_lock(root: Path) -> Iterator[None]:
    """Exclusive flock on the zoo directory itself (no lock file to leave behind)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic renames still keep the index consistent
        yield
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def parse_id(text: str) -> tuple[str, str | None]:
    """`<device_id>/<version>` or `<device_id>` (meaning its newest version)."""
    device_id, _, version = text.strip().strip("/").partition("/")
    if not device_id or not SAFE_ID_RE.match(device_id) or (version and not VERSION_RE.match(version)):
        raise ZooError(f"bad checkpoint id {text!r}: expected DEVICE_ID or DEVICE_ID/vN, e.g. x86_64-haswell-4c/v2")
    return device_id, version or None


def describe(entries: list[ZooEntry]) -> str:
    if not entries:
        return "the zoo is empty"
    by_device: dict[str, list[str]] = {}
    for e in entries:
        by_device.setdefault(e.device_id, []).append(e.version)
    return "available: " + ", ".join(f"{d} ({', '.join(v)})" for d, v in sorted(by_device.items()))


def get_entry(root: Path, text: str) -> ZooEntry:
    """The entry named by an id; a bare device id means its newest version this code can load (its
    newest of all where none can: loading it then says why)."""
    device_id, version = parse_id(text)
    entries = read_index(root)
    matches = [e for e in entries if e.device_id == device_id and (version is None or e.version == version)]
    if not matches:
        raise ZooError(f"no checkpoint {text!r} in {root}; {describe(entries)}")
    loadable = [e for e in matches if e.template_version == code_template_version(e.arch)]
    return max(loadable or matches, key=lambda e: e.number)
