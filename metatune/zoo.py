"""Model zoo: device-specific cost-model checkpoints with model cards.

Layout (everything a tuner needs is in the index, so resolving never opens a card)::

    zoo/index.json                      list of entries, sorted by device id and version
    zoo/<device_id>/<version>/          model.safetensors, card.json, README.md, *.png

A version is never overwritten: `publish` copies a run into a hidden staging directory,
validates the *copy*, then, holding a lock on the zoo directory, renames it to the next free
`v<n>` and replaces index.json atomically. A crash leaves either the old zoo or the new one
(at worst an unindexed staging or version directory, which `verify` reports).

Weights are only ever read with safetensors (no pickle), and the sha256 is checked on the
very bytes that are then deserialised, so a file swapped after the check cannot be loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import struct
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from . import MetatuneError, __version__
from .device import X86_ISA_CLASSES, DeviceFingerprint

if TYPE_CHECKING:
    import torch

INDEX_FILE = "index.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "card.json"
README_FILE = "README.md"
ZOO_ENV = "METATUNE_ZOO"
TRAIN_HINT = "train one with `make train-zoo` (or `metatune train ... && metatune zoo publish RUN_DIR`)"

RUN_CARD_FIELDS = ("device", "template_version", "dataset", "train_config", "metrics", "versions", "created",
                   "train_wall_s")
DATASET_FIELDS = ("id", "records", "workloads", "spec_hash")
VERSION_FIELDS = ("metatune", "tvm", "torch")
METRICS_SUMMARY_MAX = 12

_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
_SAFE_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class ZooError(MetatuneError):
    """A problem with the zoo or a checkpoint in it."""


class ChecksumError(ZooError):
    """The weights on disk are not the weights that were published."""

    def __init__(self, where: str, expected: str, actual: str, recorded_in: str = "index.json") -> None:
        self.expected, self.actual = expected, actual
        super().__init__(
            f"{where}: sha256 {actual[:16]}... does not match {expected[:16]}... recorded in {recorded_in}; "
            "the weights were modified or corrupted (restore the file or publish the run again)"
        )


class TemplateVersionError(ZooError):
    """The checkpoint encodes programs with another super-graph template than this code."""

    def __init__(self, where: str, checkpoint_version: str, code_version: str) -> None:
        self.checkpoint_version, self.code_version = checkpoint_version, code_version
        super().__init__(
            f"{where} was trained with super-graph template version {checkpoint_version!r} but this code "
            f"uses template version {code_version!r}; retrain it with `make train-zoo` and publish the new run"
        )


class NoCheckpointError(ZooError):
    """Nothing in the zoo can serve the requested device."""


class ZooWarning(UserWarning):
    """A checkpoint was resolved for a different (nearby) device than the one asked for."""


# -- locations and versions -------------------------------------------------------------------


def default_zoo_dir() -> Path:
    """$METATUNE_ZOO, else the `zoo/` shipped at the repository root next to the package."""
    env = os.environ.get(ZOO_ENV)
    return Path(env) if env else Path(__file__).resolve().parent.parent / "zoo"


def code_template_version() -> str:
    """The super-graph template version of the installed encoder (imported lazily: it pulls TVM)."""
    try:
        from .encode import TEMPLATE_VERSION
    except ImportError as err:
        raise ZooError(f"cannot read the encoder's template version (metatune.encode.TEMPLATE_VERSION): {err}") from err
    return str(TEMPLATE_VERSION)


def version_number(version: str) -> int:
    m = _VERSION_RE.match(version)
    if not m:
        raise ZooError(f"bad zoo version {version!r}: expected v1, v2, ...")
    return int(m.group(1))


# -- index entries ----------------------------------------------------------------------------


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


def _write_atomic(path: Path, data: bytes) -> None:
    """Write a unique temp file next to `path`, fsync it, and rename it over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def write_index(root: Path, entries: list[ZooEntry]) -> None:
    ordered = sorted(entries, key=lambda e: (e.device_id, e.number))
    text = json.dumps([e.to_json() for e in ordered], indent=2) + "\n"
    _write_atomic(Path(root) / INDEX_FILE, text.encode())


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
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
    if not device_id or not _SAFE_ID_RE.match(device_id) or (version and not _VERSION_RE.match(version)):
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
    """The entry named by an id; a bare device id means its newest version."""
    device_id, version = parse_id(text)
    entries = read_index(root)
    matches = [e for e in entries if e.device_id == device_id and (version is None or e.version == version)]
    if not matches:
        raise ZooError(f"no checkpoint {text!r} in {root}; {describe(entries)}")
    return max(matches, key=lambda e: e.number)


# -- run validation ---------------------------------------------------------------------------


def _card_problems(card: Any) -> list[str]:
    """Everything wrong with a run card, so a trainer can fix it in one go."""
    if not isinstance(card, dict):
        return ["card.json must hold a JSON object"]
    problems = [f"missing field {name!r}" for name in RUN_CARD_FIELDS if name not in card]
    if isinstance(card.get("device"), dict):
        try:
            fp = DeviceFingerprint.from_json(card["device"])
            if card["device"].get("device_id", fp.device_id) != fp.device_id:
                problems.append(f"device.device_id {card['device']['device_id']!r} disagrees with the "
                                f"fingerprint ({fp.device_id!r})")
            elif not _SAFE_ID_RE.match(fp.device_id):
                problems.append(f"device id {fp.device_id!r} is not usable as a directory name")
        except (TypeError, ValueError) as err:
            problems.append(f"device is not a DeviceFingerprint: {err}")
    elif "device" in card:
        problems.append("device must be an object (DeviceFingerprint.to_json())")
    if "template_version" in card and not (isinstance(card["template_version"], str) and card["template_version"]):
        problems.append("template_version must be a non-empty string")
    dataset = card.get("dataset")
    if isinstance(dataset, dict):
        problems += [f"missing field 'dataset.{name}'" for name in DATASET_FIELDS if name not in dataset]
    elif "dataset" in card:
        problems.append("dataset must be an object")
    versions = card.get("versions")
    if isinstance(versions, dict):
        problems += [f"missing field 'versions.{name}'" for name in VERSION_FIELDS if name not in versions]
    elif "versions" in card:
        problems.append("versions must be an object")
    for name in ("train_config", "metrics"):
        if name in card and not isinstance(card[name], dict):
            problems.append(f"{name} must be an object")
    if "created" in card:
        try:
            datetime.fromisoformat(str(card["created"]))
        except ValueError:
            problems.append(f"created {card['created']!r} is not an ISO date")
    if "train_wall_s" in card and not isinstance(card["train_wall_s"], (int, float)):
        problems.append("train_wall_s must be a number")
    return problems


def read_run_card(directory: Path) -> dict[str, Any]:
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        raise ZooError(f"{directory} has no {CARD_FILE}; is it a training run directory?")
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ZooError(f"{path} is not valid JSON: {err}") from err
    problems = _card_problems(card)
    if problems:
        raise ZooError(f"{path} is not a valid run card: " + "; ".join(problems))
    return card


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors buffer (its header is 8-byte length + JSON)."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]).get("__metadata__") or {}


def load_weights(data: bytes, where: str) -> tuple[dict[str, "torch.Tensor"], dict[str, str]]:
    """Deserialise safetensors bytes (never pickle); any malformation is a ZooError."""
    from safetensors.torch import load

    try:
        tensors = load(data)
        metadata = _safetensors_metadata(data)
    except Exception as err:  # safetensors raises its own SafetensorError / struct / JSON errors
        raise ZooError(f"{where} does not load with safetensors: {err}") from err
    if not tensors:
        raise ZooError(f"{where} holds no tensors")
    for key in ("model_config", "normalization"):
        if key in metadata:
            try:
                json.loads(metadata[key])
            except ValueError as err:
                raise ZooError(f"{where}: safetensors metadata {key!r} is not JSON: {err}") from err
    return tensors, metadata


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metrics_summary(metrics: dict[str, Any], limit: int = METRICS_SUMMARY_MAX) -> dict[str, float]:
    """The shallowest numeric metrics, flattened to 'a/b/c' keys: a headline, not the table."""
    leaves = [(k, v) for k, v in _flatten(metrics) if math.isfinite(v)]
    leaves.sort(key=lambda kv: kv[0].count("/"))  # stable: keeps the card's order within a depth
    return {k: v for k, v in leaves[:limit]}


def _flatten(tree: Any, prefix: str = "") -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _flatten(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool) and prefix:
        out.append((prefix, float(tree)))
    return out


# -- publishing -------------------------------------------------------------------------------


def publish(run_dir: Path, root: Path | None = None, *, template_version: str | None = None) -> ZooEntry:
    """Copy a training run into the zoo under the next free version and index it.

    The run is validated first (card fields, weights load with safetensors, template version
    equals the code's) so that a checkpoint that `verify` would reject never gets published.
    """
    run_dir, root = Path(run_dir), Path(root) if root is not None else default_zoo_dir()
    card = read_run_card(run_dir)
    if not (run_dir / WEIGHTS_FILE).is_file():
        raise ZooError(f"{run_dir} has no {WEIGHTS_FILE}")
    code_version = template_version if template_version is not None else code_template_version()
    if card["template_version"] != code_version:
        raise TemplateVersionError(f"run {run_dir}", card["template_version"], code_version)
    fp = DeviceFingerprint.from_json(card["device"])
    device_dir = root / fp.device_id
    device_dir.mkdir(parents=True, exist_ok=True)

    staging = Path(tempfile.mkdtemp(dir=device_dir, prefix=".staging-"))
    final: Path | None = None
    try:
        shutil.copyfile(run_dir / WEIGHTS_FILE, staging / WEIGHTS_FILE)
        for png in sorted(run_dir.glob("*.png")):
            shutil.copyfile(png, staging / png.name)
        data = (staging / WEIGHTS_FILE).read_bytes()  # validate the copy: it is what gets published
        tensors, metadata = load_weights(data, f"{run_dir / WEIGHTS_FILE}")
        digest = _sha256(data)
        with _locked(root):
            entries = read_index(root)
            taken = [e.number for e in entries if e.device_id == fp.device_id]
            taken += [version_number(p.name) for p in device_dir.iterdir() if _VERSION_RE.match(p.name)]
            version = f"v{max(taken, default=0) + 1}"
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            zoo_card = dict(card)
            zoo_card["device"] = {**fp.to_json(), **card["device"]}
            zoo_card["zoo"] = {
                "device_id": fp.device_id, "version": version, "weights_file": WEIGHTS_FILE,
                "weights_sha256": digest, "weights_size_bytes": len(data), "published": now,
                "source_run": run_dir.resolve().name, "images": sorted(p.name for p in staging.glob("*.png")),
                "tensors": len(tensors), "weights_metadata_keys": sorted(metadata),
                "published_with": {"metatune": __version__},
            }
            (staging / CARD_FILE).write_text(json.dumps(zoo_card, indent=2) + "\n")
            (staging / README_FILE).write_text(render_readme(zoo_card))
            target = device_dir / version
            if target.exists():  # cannot happen under the lock; never overwrite regardless
                raise ZooError(f"{target} already exists; refusing to overwrite it")
            os.rename(staging, target)
            final = target
            entry = ZooEntry(
                device_id=fp.device_id, version=version, path=f"{fp.device_id}/{version}", sha256=digest,
                size_bytes=len(data), template_version=card["template_version"], created=str(card["created"]),
                published=now, arch=fp.arch, isa_family=fp.isa_family, isa_class=fp.isa_class,
                num_cores=fp.num_cores, flags=tuple(fp.flags), metrics=metrics_summary(card["metrics"]),
                root=root,
            )
            write_index(root, entries + [entry])
            final = None  # committed
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if final is not None:  # renamed but not indexed: roll back so the version number stays free
            shutil.rmtree(final, ignore_errors=True)


# -- loading and verification -----------------------------------------------------------------


def read_zoo_card(entry: ZooEntry) -> dict[str, Any]:
    path = entry.directory / CARD_FILE
    try:
        card = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ZooError(f"{entry.id}: {path} is missing") from err
    except (OSError, ValueError) as err:
        raise ZooError(f"{entry.id}: {path} is not valid JSON: {err}") from err
    problems = _card_problems(card)
    zoo = card.get("zoo") if isinstance(card, dict) else None
    if not isinstance(zoo, dict) or not isinstance(zoo.get("weights_sha256"), str):
        problems.append("missing field 'zoo.weights_sha256'")
    if problems:
        raise ZooError(f"{entry.id}: {path} is not a valid zoo card: " + "; ".join(problems))
    return card


def _check_consistency(entry: ZooEntry, card: dict[str, Any]) -> list[ZooError]:
    problems: list[ZooError] = []
    if entry.path != f"{entry.device_id}/{entry.version}":
        problems.append(ZooError(f"{entry.id}: index path {entry.path!r} should be {entry.device_id}/{entry.version}"))
    zoo = card["zoo"]
    if zoo["weights_sha256"] != entry.sha256:
        problems.append(ChecksumError(f"{entry.id}: {CARD_FILE}", entry.sha256, zoo["weights_sha256"]))
    card_device = DeviceFingerprint.from_json(card["device"]).device_id
    if card_device != entry.device_id or zoo.get("version") != entry.version:
        problems.append(ZooError(f"{entry.id}: card describes {card_device}/{zoo.get('version')}"))
    if card["template_version"] != entry.template_version:
        problems.append(ZooError(f"{entry.id}: card template version {card['template_version']!r} disagrees "
                                 f"with index.json ({entry.template_version!r})"))
    return problems


def load_checkpoint(
    entry: ZooEntry, *, template_version: str | None = None
) -> tuple[dict[str, "torch.Tensor"], dict[str, Any]]:
    """Weights and zoo card of a checkpoint, after checking sha256 and template version.

    The sha256 is computed on the bytes that are then deserialised. The returned card carries
    the safetensors metadata under "weights_metadata" (model_config/normalization parsed).
    """
    card = read_zoo_card(entry)
    problems = _check_consistency(entry, card)
    if problems:
        raise problems[0]
    try:
        data = entry.weights_path.read_bytes()
    except OSError as err:
        raise ZooError(f"{entry.id}: cannot read {entry.weights_path}: {err}") from err
    actual = _sha256(data)
    if actual != entry.sha256:
        raise ChecksumError(str(entry.weights_path), entry.sha256, actual)
    code_version = template_version if template_version is not None else code_template_version()
    if card["template_version"] != code_version:
        raise TemplateVersionError(f"checkpoint {entry.id}", card["template_version"], code_version)
    tensors, metadata = load_weights(data, str(entry.weights_path))
    card["weights_metadata"] = {k: json.loads(v) if k in ("model_config", "normalization") else v
                                for k, v in metadata.items()}
    return tensors, card


@dataclass
class VerifyReport:
    """Per-checkpoint verification results; `problems` holds the exceptions themselves."""

    root: Path
    checked: list[str] = field(default_factory=list)
    problems: list[ZooError] = field(default_factory=list)
    failed: dict[str, list[ZooError]] = field(default_factory=dict)  # checkpoint id -> its problems

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_failed(self) -> None:
        if self.problems:
            raise ZooError(f"zoo verify failed for {self.root}: {len(self.problems)} problem(s): "
                           + "; ".join(str(p) for p in self.problems))

    def to_json(self) -> dict[str, Any]:
        ids = {id(p): cid for cid, ps in self.failed.items() for p in ps}
        return {"zoo": str(self.root), "ok": self.ok, "checked": self.checked,
                "problems": [{"checkpoint": ids.get(id(p)), "kind": type(p).__name__, "message": str(p)}
                             for p in self.problems]}


def verify(root: Path | None = None, entry_id: str | None = None, *,
           template_version: str | None = None) -> VerifyReport:
    """Check every checkpoint (or one): files, checksums, card fields, template version, loading."""
    root = Path(root) if root is not None else default_zoo_dir()
    report = VerifyReport(root)
    try:
        entries = [get_entry(root, entry_id)] if entry_id else read_index(root)
        code_version = template_version or (code_template_version() if entries else "")
    except ZooError as err:
        report.problems.append(err)
        return report
    seen: set[str] = set()
    for entry in entries:
        report.checked.append(entry.id)
        if entry.id in seen:
            report.problems.append(ZooError(f"{entry.id} appears twice in {INDEX_FILE}"))
        seen.add(entry.id)
        found = _verify_entry(entry, code_version)
        if found:
            report.failed.setdefault(entry.id, []).extend(found)
        report.problems += found
    if not entry_id:
        report.problems += _unindexed(root, seen)
    return report


def _verify_entry(entry: ZooEntry, code_version: str) -> list[ZooError]:
    if not entry.directory.is_dir():
        return [ZooError(f"{entry.id}: directory {entry.directory} is missing")]
    problems: list[ZooError] = [ZooError(f"{entry.id}: {name} is missing")
                                for name in (WEIGHTS_FILE, README_FILE) if not (entry.directory / name).is_file()]
    try:
        card = read_zoo_card(entry)
    except ZooError as err:
        return problems + [err]
    problems += _check_consistency(entry, card)
    if card["template_version"] != code_version:
        problems.append(TemplateVersionError(f"checkpoint {entry.id}", card["template_version"], code_version))
    if not entry.weights_path.is_file():
        return problems
    data = entry.weights_path.read_bytes()
    actual = _sha256(data)
    if actual != entry.sha256:
        problems.append(ChecksumError(str(entry.weights_path), entry.sha256, actual))
    elif len(data) != entry.size_bytes:
        problems.append(ZooError(f"{entry.id}: weights are {len(data)} bytes, index says {entry.size_bytes}"))
    try:
        load_weights(data, str(entry.weights_path))
    except ZooError as err:
        problems.append(err)
    return problems


def _unindexed(root: Path, indexed: set[str]) -> list[ZooError]:
    """Version directories that index.json does not know about (an interrupted publish)."""
    if not root.is_dir():
        return []
    out = []
    for device_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for v in sorted(p for p in device_dir.iterdir() if p.is_dir() and _VERSION_RE.match(p.name)):
            if f"{device_dir.name}/{v.name}" not in indexed:
                out.append(ZooError(f"{device_dir.name}/{v.name} is not in {INDEX_FILE} (interrupted publish?); "
                                    "delete the directory or publish its run again"))
    return out


# -- resolving a device -----------------------------------------------------------------------

_X86_ORDER = [name for name, _ in X86_ISA_CLASSES]


def fingerprint_from_id(device_id: str) -> DeviceFingerprint:
    """A best-effort fingerprint from `<arch>-<isa_class>-<N>c` (flags implied by the ISA class)."""
    arch, _, rest = device_id.partition("-")
    isa_class, _, cores = rest.rpartition("-")
    if not arch or not isa_class or not re.fullmatch(r"[1-9][0-9]*c", cores):
        raise ZooError(f"bad device id {device_id!r}: expected ARCH-ISA_CLASS-Nc, e.g. x86_64-haswell-4c")
    flags: set[str] = set()
    if isa_class in _X86_ORDER:
        for _, needed in X86_ISA_CLASSES[_X86_ORDER.index(isa_class):]:
            flags.update(needed)
    return DeviceFingerprint(arch=arch, vendor="unknown", cpu_model="unknown", isa_class=isa_class,
                             flags=tuple(sorted(flags)), num_cores=int(cores[:-1]), llvm_host_cpu=isa_class)


def _isa_distance(a: str, b: str) -> int:
    if a == b:
        return 0
    if a in _X86_ORDER and b in _X86_ORDER:
        return abs(_X86_ORDER.index(a) - _X86_ORDER.index(b))
    return len(_X86_ORDER)


def _vector_tier(flags: set[str]) -> int:
    """Widest SIMD the flags allow: what most decides which schedules win on a CPU."""
    if "avx512f" in flags:
        return 3
    if flags & {"avx", "avx2", "sve"}:
        return 2
    return 1


def _closeness(entry: ZooEntry, device: DeviceFingerprint) -> tuple:
    """Sort key, smaller is closer: vector width, ISA class distance, flag overlap (Jaccard),
    core-count ratio, then the newest version."""
    a, b = set(entry.flags), set(device.flags)
    jaccard = len(a & b) / len(a | b) if a | b else 1.0
    return (abs(_vector_tier(a) - _vector_tier(b)), _isa_distance(entry.isa_class, device.isa_class), -jaccard,
            abs(math.log2(max(entry.num_cores, 1) / max(device.num_cores, 1))), -entry.number)


@dataclass(frozen=True)
class Resolution:
    """The checkpoint chosen for a device, and why."""

    entry: ZooEntry
    device_id: str
    exact: bool
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"device_id": self.device_id, "exact": self.exact, "warning": self.warning,
                "checkpoint": self.entry.id, "directory": str(self.entry.directory), "entry": self.entry.to_json()}


def resolve(device: DeviceFingerprint | str | None = None, root: Path | None = None, *,
            template_version: str | None = None) -> Resolution:
    """Choose the checkpoint for a device (default: this machine).

    Exact device id, newest version first; else the closest checkpoint of the same ISA family,
    with a ZooWarning (also returned in `Resolution.warning`); else NoCheckpointError. Only
    checkpoints of the code's template version are candidates: others cannot be loaded.
    """
    root = Path(root) if root is not None else default_zoo_dir()
    if device is None:
        from .device import local_fingerprint

        device = local_fingerprint()
    elif isinstance(device, str):
        device = fingerprint_from_id(device)
    entries = read_index(root)
    family = [e for e in entries if e.isa_family == device.isa_family]
    if not family:
        raise NoCheckpointError(f"no zoo checkpoint for device {device.device_id} (family {device.isa_family}) "
                                f"in {root}; {describe(entries)}; {TRAIN_HINT}")
    code_version = template_version if template_version is not None else code_template_version()
    usable = [e for e in family if e.template_version == code_version]
    stale = [e for e in family if e.template_version != code_version and e.device_id == device.device_id]
    exact = [e for e in usable if e.device_id == device.device_id]
    if exact:
        return Resolution(max(exact, key=lambda e: e.number), device.device_id, exact=True)
    if usable:
        best = min(usable, key=lambda e: _closeness(e, device))
        shared = len(set(best.flags) & set(device.flags))
        message = (
            f"no zoo checkpoint for device {device.device_id}; using {best.id} trained on {best.device_id} "
            f"(nearest in the {device.isa_family} family: ISA {best.isa_class} vs {device.isa_class}, "
            f"{shared} of {len(set(device.flags))} flags shared, {best.num_cores} vs {device.num_cores} cores)"
            + (f"; {', '.join(e.id for e in stale)} for this device use(s) an old template" if stale else "")
            + f". Predictions may be less accurate; {TRAIN_HINT}"
        )
        warnings.warn(message, ZooWarning, stacklevel=2)
        return Resolution(best, device.device_id, exact=False, warning=message)
    newest = max(family, key=lambda e: (e.device_id == device.device_id, e.number))
    raise TemplateVersionError(f"every {device.isa_family} checkpoint (e.g. {newest.id})",
                               newest.template_version, code_version)


# -- model card -------------------------------------------------------------------------------


def _metrics_table(metrics: dict[str, Any]) -> list[str]:
    """Rows = metric path without its last key, columns = last keys; flat list if too wide."""
    leaves = _flatten(metrics)
    if not leaves:
        return ["(no metrics recorded)"]
    rows: dict[str, dict[str, float]] = {}
    for key, value in leaves:
        row, _, col = key.rpartition("/")
        rows.setdefault(row or "overall", {})[col] = value
    cols = list(dict.fromkeys(c for r in rows.values() for c in r))
    if len(cols) > 8:
        return ["| metric | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in leaves]
    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row, values in rows.items():
        lines.append(f"| {row} | " + " | ".join(_fmt(values[c]) if c in values else "" for c in cols) + " |")
    return lines


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def render_readme(card: dict[str, Any]) -> str:
    """A Hugging Face style model card (YAML front matter with model-index metrics)."""
    import yaml

    zoo, device, dataset = card["zoo"], card["device"], card["dataset"]
    name = f"metatune-{zoo['device_id']}-{zoo['version']}"
    front = {
        "library_name": "metatune",
        "license": "apache-2.0",
        "tags": ["tvm", "cost-model", "tensor-program-tuning", "gcn", "meta-learning",
                 device["arch"], device["isa_class"]],
        "datasets": [dataset["id"]],
        "model-index": [{
            "name": name,
            "results": [{
                "task": {"type": "tensor-program-cost-model", "name": "Tensor program cost model"},
                "dataset": {"type": dataset["id"], "name": f"{dataset['id']} (held-out)"},
                "metrics": [{"type": k, "name": k, "value": round(v, 6)} for k, v in _flatten(card["metrics"])],
            }],
        }],
    }
    versions = ", ".join(f"{k} {v}" for k, v in card["versions"].items())
    images = [f"![{p}]({p})" for p in zoo.get("images", [])]
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
        f"# {name}", "",
        f"Meta-learned GCN cost model for TVM tensor programs on **{zoo['device_id']}** "
        f"({device.get('cpu_model', 'unknown CPU')}, {device['num_cores']} cores).", "",
        "## Intended use", "",
        "Ranking candidate schedules of the operator families in the training dataset while tuning with "
        "`metatune` on this device class (`metatune zoo resolve` picks it for matching machines). "
        "It predicts relative throughput, not absolute latency.", "",
        "## Training data", "",
        f"- dataset: `{dataset['id']}` ({dataset['records']} measured records over {dataset['workloads']} "
        f"workloads, spec hash `{dataset['spec_hash']}`)",
        f"- device fingerprint: ISA class `{device['isa_class']}`, flags `{' '.join(device.get('flags', []))}`",
        f"- super-graph template version: `{card['template_version']}`",
        f"- created {card['created']}, trained in {float(card['train_wall_s']):.0f} s; {versions}", "",
        "## Metrics (held-out)", "", *_metrics_table(card["metrics"]), "",
        *(["## Training curves", "", *images, ""] if images else []),
        "## Limitations", "",
        f"- Measured on one {device['arch']} `{device['isa_class']}` machine; other CPUs (other ISA class, core "
        "count, cache sizes) only get it as a nearest-device fallback, with a warning, and rank less well.",
        "- Only knows the operator families and shape ranges of its dataset.",
        "- Tied to the super-graph template version above: after the encoder changes, `metatune zoo verify` "
        "fails and the model must be retrained.",
        "- Timings on shared or virtual machines are noisy; metrics inherit that noise.", "",
        "## How to reproduce", "",
        "```sh", "make train-zoo            # measure/train on this machine", "metatune zoo publish RUN_DIR",
        "```", "", "Training configuration:", "",
        "```json", json.dumps(card["train_config"], indent=2), "```", "",
        f"Weights: `{zoo['weights_file']}`, sha256 `{zoo['weights_sha256']}` ({zoo['weights_size_bytes']} bytes).",
        "",
    ]
    return "\n".join(lines)


# -- Hugging Face Hub (optional) --------------------------------------------------------------


def _hf_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as err:
        raise ZooError("--hf-repo needs the optional package huggingface_hub (pip install huggingface_hub)") from err
    return huggingface_hub


def check_hf_repo(repo_id: str) -> str:
    if not _HF_REPO_RE.match(repo_id):
        raise ZooError(f"bad Hugging Face repo id {repo_id!r}: expected OWNER/NAME")
    return repo_id


def push_to_hub(entry: ZooEntry, repo_id: str) -> str:
    """Upload one checkpoint directory to `<repo>/<device_id>/<version>/`; returns its URL."""
    check_hf_repo(repo_id)
    hub = _hf_hub()
    api = hub.HfApi()
    api.create_repo(repo_id, repo_type="model", exist_ok=True)
    api.upload_folder(folder_path=str(entry.directory), path_in_repo=entry.path, repo_id=repo_id,
                      repo_type="model", commit_message=f"metatune zoo: add {entry.id}")
    return f"https://huggingface.co/{repo_id}/tree/main/{entry.path}"


def pull_from_hub(repo_id: str, root: Path | None = None, *, revision: str | None = None,
                  template_version: str | None = None) -> list[ZooEntry]:
    """Import every checkpoint of a Hub repo whose weights are not in the zoo yet (new local versions)."""
    check_hf_repo(repo_id)
    hub = _hf_hub()
    root = Path(root) if root is not None else default_zoo_dir()
    root.mkdir(parents=True, exist_ok=True)
    known = {e.sha256 for e in read_index(root)}
    added: list[ZooEntry] = []
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(hub.snapshot_download(repo_id=repo_id, revision=revision, local_dir=tmp,
                                           allow_patterns=["*/v*/*"]))
        for card_path in sorted(local.glob(f"*/v*/{CARD_FILE}")):
            remote = json.loads(card_path.read_text())
            digest = remote.get("zoo", {}).get("weights_sha256")
            data = (card_path.parent / WEIGHTS_FILE).read_bytes()
            if digest != _sha256(data):
                raise ChecksumError(f"{repo_id}:{card_path.parent.relative_to(local)}", str(digest), _sha256(data))
            if digest in known:
                continue
            remote.pop("zoo")
            card_path.write_text(json.dumps(remote, indent=2))
            added.append(publish(card_path.parent, root, template_version=template_version))
            known.add(digest)
    return added
