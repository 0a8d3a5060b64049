"""State changes: path-level diffs and RFC 6902 JSON Patch between two JSON documents.

Each step record carries ``state_patch``, the JSON Patch (``add``, ``remove``,
``replace``; list appends as ``/path/-``) from the state after the previous
record that had one. Changing one key of a large state writes bytes in
proportion to the change, and so does shrinking a list: ``queue.pop(0)`` is one
``remove /queue/0``, found from the list's common prefix and suffix.

Values are compared as JSON, not as Python: ``1``, ``1.0`` and ``True`` are
three different values (Python's ``==`` says they are equal), and so are ``0.0``
and ``-0.0``; a tuple and a list with the same items are the same JSON. The
rule is: the state after resume dumps (``orjson.dumps``) to the same bytes as
the state the agent had.

Dict keys follow JSON's rule: a key that is not a string becomes the string
``orjson``/``json`` would write for it (``1`` -> ``"1"``, ``True`` -> ``"true"``,
``None`` -> ``"null"``); if two keys of one dict become the same string, the
later one wins, as ``json.loads`` keeps the last duplicate. The SDK converts
the keys of its state in place when it records a patch (``fix_keys=True``), so
its state in memory after a step is the state a resume gives.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import NotJSONValueError

Path_ = tuple[str | int, ...]
_MISSING: Any = object()
_NSK = orjson.OPT_NON_STR_KEYS


@dataclass(frozen=True, slots=True)
class Change:
    """One path-level difference: ``op`` is ``added``, ``removed`` or ``changed``.

    ``append``: an ``added`` list item at the end of the list (``/path/-`` in a patch).
    """

    op: str
    path: Path_
    old: Any = None
    new: Any = None
    append: bool = False

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


# ---------------------------------------------------------------------- JSON equality


def _dumps(value: Any) -> bytes:
    """``orjson.dumps`` with JSON's rule for non-string keys; the plain dump first (about 3x faster, the same
    bytes when every key is a string); ``TypeError`` if JSON cannot hold the value."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=_NSK)


def json_bytes_equal(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` dump to the same JSON bytes (a value JSON cannot hold is never equal)."""
    try:
        return _dumps(a) == _dumps(b)
    except TypeError:
        return False


def same(a: Any, b: Any) -> bool:
    """JSON equality: ``same(1, True)`` and ``same(1, 1.0)`` are false, ``same([1], (1,))`` is true.

    Python's ``==`` rejects most differences at C speed; a container it calls
    equal is then compared as JSON bytes, which tells ``1`` from ``True`` inside it.
    """
    if a is b:
        return True
    ta = type(a)
    if ta is type(b):
        if ta is str or ta is int or ta is bool or a is None:
            return bool(a == b)
        if ta is dict or ta is list:
            return bool(a == b) and json_bytes_equal(a, b)
    return json_bytes_equal(a, b)  # floats (-0.0, nan), tuples, subclasses, mixed types


# ---------------------------------------------------------------------- dict keys


def json_key(k: Any) -> str:
    """The string JSON writes for the dict key ``k`` (as ``orjson`` with ``OPT_NON_STR_KEYS``)."""
    if type(k) is str:
        return k
    try:
        out = orjson.loads(orjson.dumps({k: None}, option=_NSK))
    except TypeError:
        raise TypeError(f"the state key {k!r} ({type(k).__name__}) cannot be a JSON object key; use a string") from None
    return str(next(iter(out)))


def _has_other_keys(d: dict[Any, Any]) -> bool:
    return bool(d) and set(map(type, d)) != {str}


def fix_keys(d: dict[Any, Any]) -> None:
    """Convert the keys of ``d`` (this level) to JSON's strings in place; the later of two equal ones wins."""
    if not _has_other_keys(d):
        return
    out: dict[str, Any] = {}
    for k, v in d.items():
        out[json_key(k)] = v
    d.clear()
    d.update(out)


def fix_keys_deep(value: Any) -> None:
    """:func:`fix_keys` on every dict inside ``value`` (a quick check first: usually there is nothing to do)."""
    try:
        orjson.dumps(value)  # raises on a non-string key (or another value JSON cannot hold)
        return
    except TypeError:
        pass  # some key is not a string: convert them all, below
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            fix_keys(v)
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


# ---------------------------------------------------------------------- the walk


def _halving(eq: Callable[[int, int], bool], item_eq: Callable[[int], bool], n: int) -> int:
    """The largest ``p <= n`` with ``eq(0, p)``, where ``eq(i, j)`` compares items ``i..j`` (of a prefix or a
    suffix) at C speed: halved down to a few items, then item by item (``item_eq``), instead of a Python
    loop over every common item."""
    lo, hi = 0, n
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if eq(lo, mid):
            lo = mid
        else:
            hi = mid
    while lo < hi and item_eq(lo):
        lo += 1
    return lo


def _prefix(a: list[Any], b: Any, n: int) -> int:
    """The length of the common prefix of ``a`` and ``b`` (at most ``n``), by JSON equality."""
    if n and a[0] == b[0] and a[n - 1] == b[n - 1] and a[:n] == (b[:n] if type(b) is list else list(b[:n])):
        p = n  # (the ends first: a whole-slice compare costs two copies)
    elif n and a[0] == b[0]:
        bl = b if type(b) is list else list(b)
        p = _halving(lambda i, j: a[i:j] == bl[i:j], lambda i: bool(a[i] == bl[i]), n)
    else:
        p = 0
    if p and not json_bytes_equal(a[:p], b[:p]):  # a loose match hid a type change: item by item
        p = 0
        while p < n and same(a[p], b[p]):
            p += 1
    return p


def _suffix(a: list[Any], b: Any, n: int) -> int:
    """The length of the common suffix of ``a`` and ``b`` (at most ``n``), by JSON equality."""
    la, lb = len(a), len(b)
    if n == 0:
        return 0
    if a[la - n] == b[lb - n] and a[-1] == b[-1] and a[la - n :] == (b[lb - n :] if type(b) is list else list(b[lb - n :])):
        s = n
    elif a[-1] == b[-1]:
        bl = b if type(b) is list else list(b)
        s = _halving(lambda i, j: a[la - j : la - i] == bl[lb - j : lb - i], lambda i: bool(a[la - 1 - i] == bl[lb - 1 - i]), n)
    else:
        s = 0
    if s and not json_bytes_equal(a[la - s :], b[lb - s :]):
        s = 0
        while s < n and same(a[la - 1 - s], b[lb - 1 - s]):
            s += 1
    return s


def _reordered(kept: list[str], order: list[str]) -> tuple[list[str], set[str]]:
    """Keys to add (in order) and kept keys to remove first, so that adding at the end gives ``order``."""
    at = {k: i for i, k in enumerate(kept)}
    j = -1
    cut = len(order)
    for n, k in enumerate(order):
        i = at.get(k)
        if i is None or i < j:
            cut = n
            break
        j = i
    tail = order[cut:]
    return tail, {k for k in tail if k in at}


class _Walk:
    def __init__(self, emit: Callable[[Change], None], fix: bool, order: bool) -> None:
        self.emit = emit
        self.fix = fix
        self.order = order
        """Keep the order of dict keys too (a patch must; a diff for people need not)."""

    def walk(self, a: Any, b: Any, path: Path_, differ: bool = False) -> None:
        """``differ``: the caller has just found ``a`` and ``b`` differ as JSON (not compared again)."""
        if a is b:
            return
        if type(a) is dict and isinstance(b, dict):
            self.walk_dict(a, b, path)
        elif type(a) is list and isinstance(b, (list, tuple)):
            self.walk_list(a, b, path, differ)
        elif differ or not same(a, b):
            self.changed(path, a, b)

    def changed(self, path: Path_, a: Any, b: Any) -> None:
        if self.fix:
            fix_keys_deep(b)
        self.emit(Change("changed", path, old=a, new=b))

    def added(self, path: Path_, b: Any, append: bool = False) -> None:
        if self.fix:
            fix_keys_deep(b)
        self.emit(Change("added", path, new=b, append=append))

    def walk_dict(self, a: dict[str, Any], b: dict[Any, Any], path: Path_) -> None:
        if _has_other_keys(b):
            if self.fix:
                fix_keys(b)
            else:
                b = {json_key(k): v for k, v in b.items()}
        emit = self.emit
        kept = [k for k in a if k in b]
        added = [k for k in b if k not in a] if len(b) > len(kept) else []
        moved: set[str] = set()
        if self.order and list(b) != kept + added:
            # JSON Patch adds a key at the end of its object: the keys after the longest
            # start of b's order that a's order already has are removed and added again
            added, moved = _reordered(kept, list(b))
        for k, va in a.items():
            vb = b.get(k, _MISSING)
            if vb is _MISSING or k in moved:
                emit(Change("removed", path + (k,), old=va))
            elif va is not vb and not same(va, vb):
                self.walk(va, vb, path + (k,), True)
        for k in added:
            self.added(path + (k,), b[k])

    def walk_list(self, a: list[Any], b: Any, path: Path_, differ: bool = False) -> None:
        la, lb = len(a), len(b)
        if la == lb and not differ and same(a, b):
            return
        n = min(la, lb)
        p = _prefix(a, b, n)
        s = _suffix(a, b, n - p)
        m, k = la - s - p, lb - s - p  # the differing middles: a[p:p+m] became b[p:p+k]
        for i in range(p, p + min(m, k)):
            if not same(a[i], b[i]):
                self.walk(a[i], b[i], path + (i,), True)
        if m > k:  # removed, from the end backwards so each index is still the old one
            for i in range(p + m - 1, p + k - 1, -1):
                self.emit(Change("removed", path + (i,), old=a[i]))
        elif k > m:  # inserted (appended when nothing follows)
            for i in range(p + m, p + k):
                self.added(path + (i,), b[i], append=s == 0)


def diff(a: Any, b: Any) -> list[Change]:
    """Path-level changes from ``a`` to ``b`` (for the CLI and the TUI), by JSON equality; key order is not a change."""
    out: list[Change] = []
    _Walk(out.append, False, False).walk(a, b, ())
    return out


def make_patch(old: Any, new: Any, *, fix_keys: bool = False, changed: bool = False) -> list[dict[str, Any]]:
    """The JSON Patch that turns ``old`` (a JSON document) into ``new``: empty if they dump to the same bytes.

    Key order counts (an agent may iterate its dicts): a key moved in ``new`` is
    removed and added again at the end, as are the keys after it.
    Appends to lists use ``/-``; removals from a list come from the end backwards.
    ``fix_keys``: also convert ``new``'s non-string dict keys to JSON's strings
    in place (the SDK's state, so that it is the state a resume gives).
    ``changed``: the caller knows ``old`` and ``new`` differ as JSON (the SDK compared their dumps): they are
    not compared again before the walk (a deep ``==`` and, when it says equal, two dumps).
    """
    if not changed and same(old, new):  # most steps leave the state as it was: == at C speed, then the JSON bytes
        return []
    ops: list[dict[str, Any]] = []

    def emit(c: Change) -> None:
        if c.op == "removed":
            ops.append({"op": "remove", "path": c.pointer})
        elif c.op == "changed":
            ops.append({"op": "replace", "path": c.pointer, "value": c.new})
        elif c.append:
            ops.append({"op": "add", "path": to_pointer(c.path[:-1]) + "/-", "value": c.new})
        else:
            ops.append({"op": "add", "path": c.pointer, "value": c.new})

    _Walk(emit, fix_keys, True).walk(old, new, (), changed)
    return ops


def json_copy(value: Any) -> Any:
    """A deep copy through JSON, so that the copy is exactly what the journal holds."""
    return orjson.loads(_dumps(value))


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """Apply a JSON Patch (add, remove, replace) to ``doc`` in place where possible; return the result.

    Values are copied, so the patch and the document share nothing. A patch
    that does not apply to ``doc`` (a path that is not there, a damaged record
    or snapshot) raises ``ValueError`` naming the operation.
    """
    op: Any = None
    try:
        for op in patch:
            doc = _apply_op(doc, op)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        what = f"{op.get('op')} {op.get('path')!r}" if isinstance(op, dict) else repr(op)[:80]
        raise ValueError(f"the state patch operation {what} does not apply ({type(e).__name__}: {e})") from None
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    tokens = from_pointer(op.get("path", ""))
    if not tokens:
        if kind in ("add", "replace"):
            return json_copy(op["value"])
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
    elif isinstance(parent, dict):
        if kind in ("add", "replace"):
            parent[last] = json_copy(op["value"])
        elif kind == "remove":
            parent.pop(last, None)
        else:
            raise ValueError(f"unsupported patch op {kind!r}")
    else:
        raise ValueError(f"the parent of {op.get('path')!r} is a {type(parent).__name__}, not an object or a list")
    return doc


# ---------------------------------------------------------------------- values JSON cannot hold exactly
# (NotJSONValueError, in supervisor.errors with every exception class, is raised here)


def _bad_str(s: str) -> bool:
    """Whether ``s`` holds a lone surrogate (``"\\ud800"``): not encodable as UTF-8."""
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _bad(v: Any, floats: bool = True) -> bool:
    if isinstance(v, float):
        return floats and v - v != 0.0  # nan - nan and inf - inf are nan
    return isinstance(v, str) and _bad_str(v)


def _children(v: Any, path: Path_) -> list[tuple[Any, Any]] | None:
    """``(path, child)`` of a container (or a dataclass, an enum member), ``None`` for a leaf."""
    if isinstance(v, dict):
        return [(path + (k,), x) for k, x in v.items()]
    if isinstance(v, (list, tuple)):
        return [(path + (i,), x) for i, x in enumerate(v)]
    if isinstance(v, (set, frozenset)):
        return [(path + (i,), x) for i, x in enumerate(v)]
    if isinstance(v, enum.Enum):  # a member: its value
        return [(path + (".value",), getattr(v, "value", None))]
    fields = getattr(type(v), "__dataclass_fields__", None)
    if fields is not None and not isinstance(v, type):
        return [(path + ("." + name,), getattr(v, name, None)) for name in fields]
    return None


def find_unjournalable(value: Any, *, floats: bool = True) -> tuple[Any, Any, bool] | None:
    """The first NaN or infinite float (unless not ``floats``), or string with a lone surrogate, in ``value``:
    ``(path, it, is_key)`` (``is_key``: it is a key of the dict at ``path``), else ``None``.

    Walks dicts (keys and values), lists, tuples, sets, enum members' values and dataclass fields in order,
    without recursion (a value 100,000 levels deep is walked too; one that holds itself is not walked twice).
    A first pass only says whether there is one (most calls: there is none); the second finds where.
    """
    if not _has_unjournalable(value, floats):
        return None
    stack: list[tuple[Any, Any]] = [((), value)]
    seen: set[int] = set()
    while stack:
        path, v = stack.pop()
        if _bad(v, floats):
            return path, v, False
        kids = _children(v, path)
        if kids is None or id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            for k in v:
                if _bad(k, floats):
                    return path, k, True
        stack.extend(reversed(kids))
    return None


_SCALARS = frozenset({int, bool, type(None)})


def _bad_keys(d: dict[Any, Any], floats: bool) -> bool:
    return any((type(k) is not str or not k.isascii()) and _bad(k, floats) for k in d)


def _has_unjournalable(value: Any, floats: bool) -> bool:
    """Whether :func:`find_unjournalable` finds something (without building paths: the common, negative answer)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is float:
            if _bad(v, floats):
                return True
        elif t is dict or t is list or t is tuple:
            if id(v) in seen:
                continue
            seen.add(id(v))
            if t is not dict:
                stack.extend(v)
            elif _bad_keys(v, floats):
                return True
            else:
                stack.extend(v.values())
        elif t not in _SCALARS and _other_bad(v, floats, stack, seen):
            return True
    return False


def _other_bad(v: Any, floats: bool, stack: list[Any], seen: set[int]) -> bool:
    """A value of another type (a subclass, a set, an enum member, a dataclass): bad itself, or its children to walk."""
    if _bad(v, floats):
        return True
    kids = _children(v, ())
    if kids is not None and id(v) not in seen:
        seen.add(id(v))
        stack.extend(x for _, x in kids)
    return False


def where_text(root: str, path: Any) -> str:
    """``root`` and ``path`` as Python would write the lookup: ``output['scores'][2]``, ``output.field``."""
    return root + "".join(f".{p[1:]}" if isinstance(p, str) and p.startswith(".") else f"[{p!r}]" for p in path)


def unjournalable_text(root: str, hit: tuple[Any, Any, bool]) -> str:
    """What :func:`find_unjournalable` found, for a person: where, what, and why the journal cannot hold it."""
    path, bad, is_key = hit
    where = ("a key of " if is_key else "") + where_text(root, path)
    if isinstance(bad, float):
        return (
            f"{where} is {bad!r}: JSON has no NaN or Infinity (it would be written as null, and read back as None)"
        )
    i = next((n for n, ch in enumerate(bad) if 0xD800 <= ord(ch) <= 0xDFFF), 0)
    return (
        f"{where} holds a lone surrogate ({bad[i]!r} at index {i} of {len(bad)}): JSON text is UTF-8, which cannot "
        "hold one"
    )


def check_patch(state: Any, patch: list[dict[str, Any]], who: str) -> None:
    """Raise :class:`NotJSONValueError` if the values of ``patch`` (made from ``state``) hold a NaN or infinite
    float or a lone surrogate, naming where in ``run.state`` (``who``: the record it was to go with)."""
    if not any("value" in op and _has_unjournalable(op["value"], True) for op in patch):
        return
    hit = find_unjournalable(state) or find_unjournalable(patch)
    assert hit is not None  # the patch holds one
    raise NotJSONValueError(
        f"cannot record {who}: {unjournalable_text('run.state', hit)}; store None or a string (str(x)) there "
        "instead (nothing was written: the state must be what a resume gives back)",
        hit[1],
        tuple(hit[0]),
    )
