"""Cheap identification of TVM IR nodes, shared by every module that walks TIR.

`isinstance` against TVM's Python classes needs their modules imported and differs between
TVM versions' namespaces; the FFI type key (`tirx.For`, `s_tir.SBlockRealize`) is what the
C++ side names a node, and reading it once per Python class keeps tree walks fast.
"""

from __future__ import annotations

from typing import Any

_TYPE_KEYS: dict[type, str] = {}


def type_key(obj: Any) -> str:
    """The FFI type key (e.g. `tirx.For`), cached per Python class."""
    cls = type(obj)
    key = _TYPE_KEYS.get(cls)
    if key is None:
        info = getattr(cls, "__tvm_ffi_type_info__", None)
        key = info.type_key if info is not None else cls.__name__
        _TYPE_KEYS[cls] = key
    return key
