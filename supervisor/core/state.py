"""State changes: path-level diffs and RFC 6902 JSON Patch between two JSON documents.

Each step record carries ``state_patch``, the JSON Patch (``add``, ``remove``,
``replace``; list appends as ``/path/-``) from the state after the previous
step. Changing one key of a large state writes bytes in proportion to the change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

Path_ = tuple[str | int, ...]
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Change:
    """One path-level difference: ``op`` is ``added``, ``removed`` or ``changed``."""

    op: str
    path: Path_
    old: Any = None
    new: Any = None

    @property
    def pointer(self) -> str:
        return to_pointer(self.path)


def to_pointer(path: Path_) -> str:
    """RFC 6901 JSON Pointer of a path (``""`` is the root)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def from_pointer(ptr: str) -> list[str]:
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {ptr!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in ptr[1:].split("/")]


def _walk(a: Any, b: Any, path: Path_, emit: Callable[[Change], None]) -> None:
    if a is b:
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        for k, va in a.items():
            vb = b.get(k, _MISSING)
            if vb is _MISSING:
                emit(Change("removed", path + (k,), old=va))
            elif va is not vb and va != vb:
                _walk(va, vb, path + (k,), emit)
        for k, vb in b.items():
            if k not in a:
                emit(Change("added", path + (k,), new=vb))
        return
    if ta is list and tb is list:
        la, lb = len(a), len(b)
        if lb >= la and b[:la] == a:
            for i in range(la, lb):
                emit(Change("added", path + (i,), new=b[i]))
            return
        if la == lb:
            for i in range(la):
                if a[i] != b[i]:
                    _walk(a[i], b[i], path + (i,), emit)
            return
    if a != b or ta is not tb:
        emit(Change("changed", path, old=a, new=b))


def diff(a: Any, b: Any) -> list[Change]:
    """Path-level changes from ``a`` to ``b`` (for the CLI and the TUI)."""
    out: list[Change] = []
    _walk(a, b, (), out.append)
    return out


def make_patch(old: Any, new: Any) -> list[dict[str, Any]]:
    """The JSON Patch that turns ``old`` into ``new``; appends to lists use ``/-``."""
    ops: list[dict[str, Any]] = []

    def emit(c: Change) -> None:
        if c.op == "removed":
            ops.append({"op": "remove", "path": c.pointer})
        elif c.op == "changed":
            ops.append({"op": "replace", "path": c.pointer, "value": c.new})
        elif isinstance(c.path[-1], int):
            ops.append({"op": "add", "path": to_pointer(c.path[:-1]) + "/-", "value": c.new})
        else:
            ops.append({"op": "add", "path": c.pointer, "value": c.new})

    _walk(old, new, (), emit)
    return ops


def json_copy(value: Any) -> Any:
    """A deep copy through JSON, so that the copy is exactly what the journal holds."""
    return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """Apply a JSON Patch (add, remove, replace) to ``doc`` in place where possible; return the result.

    Values are copied, so the patch and the document share nothing.
    """
    for op in patch:
        kind = op.get("op")
        tokens = from_pointer(op.get("path", ""))
        if not tokens:
            if kind in ("add", "replace"):
                doc = json_copy(op["value"])
                continue
            raise ValueError("cannot remove the root of the state")
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if kind == "add":
                value = json_copy(op["value"])
                if last == "-":
                    parent.append(value)
                else:
                    parent.insert(int(last), value)
            elif kind == "replace":
                parent[int(last)] = json_copy(op["value"])
            elif kind == "remove":
                del parent[int(last)]
            else:
                raise ValueError(f"unsupported patch op {kind!r}")
        else:
            if kind in ("add", "replace"):
                parent[last] = json_copy(op["value"])
            elif kind == "remove":
                parent.pop(last, None)
            else:
                raise ValueError(f"unsupported patch op {kind!r}")
    return doc
