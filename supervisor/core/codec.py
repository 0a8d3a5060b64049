"""Typed step outputs: a value journaled as plain JSON, returned on replay as its type again.

As Temporal's data converter does with type hints. The functions the SDK calls:

- :func:`encode` turns a step's return value into plain JSON plus an ``output_type``
  string (``None`` for a value that already is plain JSON: the common case, kept fast);
  :func:`encode_bytes` gives the JSON's bytes (what the recorder writes);
- :func:`decode` turns a recorded ``output`` back: by the *hint* (``returns=`` on the
  call, else the function's return annotation, :func:`output_hint`) where there is one,
  by the recorded ``output_type`` where there is not, else the JSON as is;
- :func:`output_hint` reads a function's return annotation (cached per function).

Encoded forms (what any reader of the journal sees in ``output``): a pydantic model as
``model_dump(mode="json")``; a dataclass as an object of its fields (each encoded in turn);
``datetime``/``date``/``time`` as ISO 8601 (``isoformat()``, the time zone kept); ``bytes``
(and ``bytearray``, ``memoryview``) as standard base64; ``Decimal`` as a string; ``UUID``
as its string; an ``Enum`` member by its value; a tuple, set or frozenset as a list (a
set sorted where its items compare); a dict's keys as the strings orjson writes for them
(``1`` -> ``"1"``, ``None`` -> ``"null"``, a date as ISO 8601, an enum member by its value).

The ``output_type`` grammar (stored next to ``output`` in a ``step`` record)::

    type  := base | base "?"                  "?": the value may also be null
    base  := "json"                           plain JSON: returned as is
           | "datetime" | "date" | "time" | "bytes" | "decimal" | "uuid"
           | "list[" type "]" | "tuple[" type "]" | "set[" type "]" | "frozenset[" type "]"
           | "dict[" type "]"                 the type of the values (keys are JSON strings)
           | "dict[" key "," type "]"         keys of type key (read back from their strings):
                                              int float bool null datetime date time decimal uuid
                                              or "enum:" module ":" qualname
           | "any[" type ("," type)* "]"      a JSON array read by the member that reads arrays, an
                                              object by the one that reads objects (one each),
                                              a string, number or boolean as it is
           | kind ":" module ":" qualname     kind: "pydantic", "dataclass" or "enum"

e.g. ``datetime``, ``list[pydantic:agent:Plan]``, ``dict[decimal?]``, ``tuple[json]``,
``dict[int,json]``, ``list[any[dict[dict[int,json]]]]`` (``[1, {"k": {3: 4}}]``).
The items of a container share one type or it says ``json`` (``[1, datetime]`` is
``list[json]``, an output_type that decodes nothing, so it is left out: ``None``). A
dataclass's or a model's fields are not described: the class's own annotations decode
them. A type this version does not know, or a string it cannot parse, is ignored (the JSON
is returned as is), so a newer writer's journal stays readable (the ``dict[K,T]`` and
``any[...]`` forms parse as ``json`` in versions before them).

**Keys are never lost silently.** JSON writes every key as a string; a dict whose keys
are not strings gets ``dict[K,T]``, also where its container's other items are of another
kind (``any[...]``: JSON tells a list, an object and a scalar apart). Where one output_type
cannot bring the keys back (keys of two types in one dict, two dicts of one JSON kind with
other keys in one container, a dataclass field whose annotation would read its keys as
strings), :func:`encode` raises an ``OutputEncodeError`` naming the place.

**Values the journal would change** are refused, never written changed: a NaN or an
infinite float (orjson writes ``null``: ``None`` on resume) and a string with a lone
surrogate (not UTF-8) raise :class:`~supervisor.errors.NotJSONValueError` (a
``ValueError``) naming the step and the place. The check is free for an output whose JSON
holds no ``null`` (only a null can hide a NaN); one with a null is read back and compared
(C speed), and walked only if that differs.

Without a hint a class is looked up **only in modules already imported** (``sys.modules``),
never by importing the module the journal names: a journal is data, not code, and
importing a module runs its code, which a journal (copied from elsewhere, edited by hand)
must never choose. A class that is not found (its module not imported, a class defined
inside a function: ``<locals>``) leaves the value as JSON.

Decoding converts, it does not validate: where the hint needs no conversion (``str``,
``int``, ``dict[str, int]``, a ``TypedDict``, ``Literal``, a class the codec does not
know) the recorded value is returned as it was recorded, and ``null`` is returned as
``None`` whatever the hint; so a step that returned what its annotation did not say gets
the same value again, as the live call did. A hint that says nothing of a dict's keys (a
bare ``dict``, ``dict[Any, T]``, a dict subclass such as ``Counter``) leaves them to the
output_type. Where a conversion is needed and the recorded
value does not fit (a recorded output of another shape after a code change), decode
raises :class:`~supervisor.errors.CodecError`, a ``DivergenceError``: the run stops
(exit 78) instead of being restarted into the same failure.

The plain-JSON fast path: a ``str``/``int``/``float``/``bool``/``None`` costs one type
check (and a float one subtraction: NaN and Infinity are refused); a ``dict`` or ``list`` one
``orjson.dumps`` with string keys that hands datetimes, dataclasses and unknown types back
(to take the typed path). Tuples, ``UUID`` and ``Enum`` members *inside* such a dict or list
are written by orjson as lists, strings and values without an ``output_type``: a hint
(``list[UUID]``) brings them back; at the top they take the typed path (``tuple[json]``,
``uuid``, ``enum:...``) and come back without one. pydantic is never imported here: a value
or hint is a pydantic model only if ``pydantic`` is already in ``sys.modules``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import functools
import re
import sys
import types
import typing
import weakref
from collections import abc
from collections.abc import Callable
from typing import Any, cast

import orjson

from ..errors import CodecError, KeyTypeLost, NotJSONValueError, OutputEncodeError
from .state import find_unjournalable, unjournalable_text, where_text

__all__ = ["decode", "encode", "encode_bytes", "output_hint"]

_NoneType = type(None)
_PLAIN = frozenset({str, int, float, bool, _NoneType})
# What the journal writer accepts (keys that are not strings included: the typed path gives them an output_type);
# the check takes str keys only, and hands datetimes and dataclasses to ``default`` (orjson would write them
# itself), so that they take the typed path and get an output_type.
_WRITE_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_CHECK_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

_RETURN_INSTEAD = (
    "return dicts, lists, strings, numbers, booleans or None, or a pydantic model, a dataclass, "
    "datetime, date, time, bytes, Decimal, UUID, an Enum, a tuple or a set of these"
)
_has_null = re.compile(b"null").search
"""Whether JSON bytes hold a null (faster than ``in``: about 0.1 us for a short line, 0.35 ns a byte)."""
_RAN = "the step's function has run; nothing is recorded for it, so it runs again on resume"


# ---------------------------------------------------------------------------------------- encode
def _typed(obj: Any) -> Any:
    """The fast check's ``default``: the value holds something that is not plain JSON (orjson raises)."""
    raise TypeError


def encode(value: Any, *, step: str) -> tuple[Any, str | None]:
    """``(plain JSON value, output_type or None)`` for a step's return value.

    Raises ``TypeError`` naming the step, where in the value, the type, and what to
    return instead, for a value the journal cannot hold; :class:`NotJSONValueError` (a
    ``ValueError``) for one it would change: a NaN or infinite float, a lone surrogate.
    """
    t = type(value)
    if t in _PLAIN and t is not float:
        return value, None  # the fast path: one type check
    out, otype, _ = _encode(value, step)
    return out, otype


def encode_bytes(value: Any, *, step: str) -> tuple[bytes, str | None]:
    """:func:`encode`, as the bytes of the journal's ``output`` (what the SDK writes) and the output_type.

    Also for a plain ``str``, ``int``... the recorder could not write itself: a string with a lone surrogate
    or an int over 64 bits fails here with the step's name and where in the value.
    """
    out, otype, data = _encode(value, step)
    if data is None:
        data = _dump(out, step)
    return data, otype


def _encode(value: Any, step: str) -> tuple[Any, str | None, bytes | None]:
    """``(JSON value, output_type, its bytes or None if not dumped yet)``; plain JSON costs one type check
    (a scalar) or one ``orjson.dumps`` (a dict or list: its bytes are kept, and say whether a null can hide a NaN)."""
    t = type(value)
    if t in _PLAIN:
        if t is float and value - value != 0.0:  # NaN or +-Infinity (inf - inf is nan)
            raise _inexact(step, ((), value, False))
        return value, None, None
    if t is dict or t is list:
        try:
            data = orjson.dumps(value, default=_typed, option=_CHECK_OPTS)
        except TypeError:
            pass  # a datetime, dataclass, set, non-str key... inside (or an int over 64 bits): the typed path
        else:
            if _has_null(data):
                _check_nulls(value, data, step)
            return value, None, data
    out, otype = _typed_path(value, step)
    data = _dump(out, step)
    if _has_null(data):
        _check_nulls(out, data, step)
    return out, otype, data


def _typed_path(value: Any, step: str) -> tuple[Any, str | None]:
    try:
        out, typ = _enc(value)
        otype = _render(typ)
    except RecursionError:
        raise TypeError(
            f"step {step!r} returned a value nested too deeply to journal (or that contains itself); "
            f"{_RETURN_INSTEAD}"
        ) from None
    except OutputEncodeError as e:
        what = str(e).replace(_WHERE, "output" + _where(e.path))
        raise OutputEncodeError(
            f"step {step!r} returned a value that cannot be journaled: {what}; {_RETURN_INSTEAD}", e.value, e.path
        ) from None
    except NotJSONValueError as e:
        raise _inexact(step, (e.path, e.value, str(e) == "key")) from None
    return out, (None if otype == "json" else otype)


def _dump(out: Any, step: str) -> bytes:
    """The bytes the journal holds for ``out``; an error naming the step and where, if it has none."""
    try:
        return orjson.dumps(out, option=_WRITE_OPTS)
    except TypeError as e:
        hit = find_unjournalable(out)
        if hit is not None:
            raise _inexact(step, hit) from None
        if "ecursion" in str(e):  # orjson's "Recursion limit reached": deeper than 254 levels
            raise TypeError(
                f"step {step!r} returned a value nested too deeply to journal (JSON lines are written at most 254 "
                f"levels deep); {_RETURN_INSTEAD}"
            ) from None
        raise TypeError(f"step {step!r} returned a value that is not JSON ({e}); {_RETURN_INSTEAD}") from None


def _check_nulls(value: Any, data: bytes, step: str) -> None:
    """orjson writes NaN and +-Infinity as ``null``: only bytes holding a null can hide one (the caller looks).
    Then the JSON read back equal to the value (C speed) says there is none; else the value is walked to find it
    (or not: a tuple, a UUID... read back as a list or a string is not equal either)."""
    try:
        if orjson.loads(data) == value:
            return
    except Exception:
        pass  # an __eq__ that raises: walked below
    hit = find_unjournalable(value)
    if hit is not None:
        raise _inexact(step, hit)


def _inexact(step: str, hit: tuple[Any, Any, bool]) -> NotJSONValueError:
    """The error for a NaN, an infinite float or a lone surrogate in a step's output: the step, where, what to do."""
    if isinstance(hit[1], float):
        fix = "return None, or a string (str(x)), there instead"
    else:
        fix = "return the text cleaned (s.encode('utf-8', 'replace').decode()) or as bytes (s.encode('utf-8', 'surrogatepass'))"
    return NotJSONValueError(
        f"step {step!r} returned a value the journal cannot hold exactly: {unjournalable_text('output', hit)}; "
        f"{fix} ({_RAN})",
        hit[1],
        tuple(hit[0]),
    )


_WHERE = "\x00"  # where in the output: filled in by encode, once the path is known


def _unencodable(obj: Any, what: str = "", detail: str = "") -> OutputEncodeError:
    """The error for ``obj`` (its path is added on the way up, by the containers that hold it)."""
    return OutputEncodeError(f"{what}{_WHERE} is of type {_qualname(type(obj))!r}{detail}", obj)


def _where(path: tuple[Any, ...]) -> str:
    return where_text("", path)


def _qualname(cls: type) -> str:
    mod = getattr(cls, "__module__", None)
    name = str(getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls)))
    return name if mod in (None, "builtins") else f"{mod}.{name}"


def _tag(kind: str, cls: type) -> str:
    return f"{kind}:{cls.__module__}:{cls.__qualname__}"


# The type of an encoded value, while encoding: None for a null, _S for a plain string, number or boolean, _J for
# plain JSON of any kind, ("leaf", output_type, kind) for an atom or a class (kind: the JSON kind of its values,
# "s" for a scalar, "o" for an object, None if it may be any), (container, items) or ("opt", type);
# ("kdict", values, key type) for a dict whose keys are not strings; ("any", array type, object type) where such
# a dict sits beside values of other kinds (see _any). _EMPTY: the items of an empty container, which agree with
# any type (``{"a": [], "b": [date]}`` is ``dict[list[date]]``).
_T = tuple[Any, ...]
_J: _T = ("json",)
_S: _T = ("scalar",)
_EMPTY: _T = ("empty",)
_SEQS = ("list", "tuple", "set", "frozenset", "dict")
_ARRAYS = frozenset({"list", "tuple", "set", "frozenset"})
_EMPTY_DICT: _T = ("dict", _EMPTY)
_MAY_HOLD_KEYS = frozenset({*_SEQS, "opt", "kdict", "any"})


def _unify(a: _T, b: _T) -> _T:
    """The one type that describes values of both ``a`` and ``b`` (``json`` if none says more).

    Keys are never given up: where a dict with non-string keys meets another kind of value, the two are told
    apart by their JSON kind (:func:`_any`); where they cannot be, :class:`KeyTypeLost`."""
    if a == b:
        return a
    if a is _EMPTY:
        return b
    if b is _EMPTY:
        return a
    if a[0] == "opt" or b[0] == "opt":
        u = _unify(a[1] if a[0] == "opt" else a, b[1] if b[0] == "opt" else b)
        return _J if u is _J else ("opt", u)
    m = _merge(a, b)
    if m is not None:
        return m
    if _keyed(a) or _keyed(b):
        return _any(a, b)
    return _S if _kind(a) == "s" == _kind(b) else _J


def _merge(a: _T, b: _T) -> _T | None:
    """The type of two containers of one shape (their items unified), ``None`` if they are not of one shape."""
    ha, hb = a[0], b[0]
    if ha == hb and ha in _SEQS:
        return (ha, _unify(a[1], b[1]))
    if ha == hb == "kdict" and a[2] == b[2]:
        return ("kdict", _unify(a[1], b[1]), a[2])
    if a == _EMPTY_DICT and hb == "kdict":
        return b  # an empty dict has no key to misread
    if b == _EMPTY_DICT and ha == "kdict":
        return a
    if ha == "any" or hb == "any":
        return _any(a, b)
    return None


def _kind(t: _T) -> str | None:
    """The JSON kind of the values of a type: "s" a string, number or boolean, "a" an array, "o" an object."""
    head = t[0]
    if head == "opt":
        return _kind(t[1])
    if t is _S:
        return "s"
    if head == "leaf":
        return t[2]  # type: ignore[no-any-return]
    if head in _ARRAYS:
        return "a"
    return "o" if head in ("dict", "kdict") else None


def _keyed(t: _T) -> bool:
    """Whether values of type ``t`` hold a dict with keys that are not strings."""
    while True:
        head = t[0]
        if head in ("kdict", "any"):
            return True
        if head not in _SEQS and head != "opt":
            return False
        t = t[1]


def _any(a: _T, b: _T) -> _T:
    """``a`` and ``b`` told apart by their JSON kind: an array by one type, an object by another, a string, number
    or boolean as it is. Raises :class:`KeyTypeLost` where two of one kind differ and one of them holds keyed dicts."""
    members: dict[str, _T] = {}
    for t in (*_members(a), *_members(b)):
        k = _kind(t)
        if k == "s":
            continue  # read back as it is: a scalar is no container, and holds no key
        if k is None:
            raise KeyTypeLost  # an enum, a model, any JSON: it may be an object or an array too
        cur = members.get(k)
        if cur is not None and cur != t:
            m = _merge(cur, t)
            if m is None:
                if _keyed(cur) or _keyed(t):
                    raise KeyTypeLost
                m = _J  # read back as they are (the documented rule for values of mixed types)
            t = m
        members[k] = t
    return ("any", members.get("a"), members.get("o"))


def _members(t: _T) -> tuple[_T, ...]:
    return tuple(m for m in t[1:] if m is not None) if t[0] == "any" else (t,)


def _items(types_seen: list[_T | None], container: Any) -> _T:
    cur: _T = _EMPTY
    null = False
    try:
        for t in types_seen:
            if t is None:
                null = True
            elif cur is not _J:
                cur = _unify(cur, t)
            elif _keyed(t):
                raise KeyTypeLost  # mixed values are read back as they are: not a dict's keys
    except KeyTypeLost:
        raise _key_loss(types_seen, container) from None
    # ("opt", _EMPTY): only nulls, which agree with any type as its nulls ([[None], [b""]] is list[list[bytes?]])
    return ("opt", cur) if null and cur is not _J and cur[0] != "opt" else cur


def _key_loss(types_seen: list[_T | None], container: Any) -> OutputEncodeError:
    """The error for the first item whose keys :func:`_items` could not keep (found again, item by item)."""
    keys = list(container) if isinstance(container, dict) else range(len(types_seen))
    cur: _T = _EMPTY
    at = 0
    for i, t in enumerate(types_seen):
        if t is None:
            continue
        try:
            cur = _unify(cur, t) if cur is not _J else cur
            if cur is _J and _keyed(t):
                raise KeyTypeLost
        except KeyTypeLost:
            at = i
            break
    key = list(keys)[at]
    item = container[key] if isinstance(container, dict) else list(container)[at]
    return OutputEncodeError(
        f"{_WHERE} holds a dict whose keys are not strings, beside values JSON cannot tell it from (a dict or list of "
        "another shape, an enum, a model): its keys could not come back as they were, since JSON writes every key "
        "as a string; give such dicts one key type throughout, or string keys",
        item,
        (key,),
    )


def _render(t: _T | None) -> str:
    """The output_type string of a type (see the grammar); ``json`` when it says nothing to decode."""
    if t is None or t is _J or t is _EMPTY or t is _S:
        return "json"
    head = t[0]
    if head == "leaf":
        return str(t[1])
    if head in ("any", "kdict"):
        return _render_keyed(t)
    inner = _render(t[1])
    if head == "opt":
        return "json" if inner == "json" else inner + "?"
    if head in ("list", "dict") and inner == "json":
        return "json"  # decoding it would change nothing
    return f"{head}[{inner}]"


def _render_keyed(t: _T) -> str:
    if t[0] == "kdict":
        return f"dict[{t[2]},{_render(t[1])}]"  # the keys are typed: never "json"
    parts = [r for r in (_render(m) for m in _members(t)) if r != "json"]
    return f"any[{','.join(parts)}]" if parts else "json"


_Enc = Callable[[Any], tuple[Any, "_T | None"]]
_encoders: dict[type, _Enc] = {}  # per type, found once: a step's output holds few types, many times


def _enc(v: Any) -> tuple[Any, _T | None]:
    """``(JSON, type)``: type is None for a null, ``_S`` for a plain string, number or boolean."""
    t = type(v)
    if t in _PLAIN:
        if v is None:
            return v, None
        if t is float and v - v != 0.0:
            raise NotJSONValueError("value", v)  # NaN or +-Infinity: named by _typed_path, with its path
        return v, _S
    try:
        return _encoders[t](v)
    except KeyError:
        pass  # the first value of this type: its encoder is found below and cached
    f = _encoder_for(t)
    if len(_encoders) < 1024:
        _encoders[t] = f
    return f(v)


_PathError = OutputEncodeError | NotJSONValueError
_PATHED = (OutputEncodeError, NotJSONValueError)


def _at(e: _PathError, key: Any) -> _PathError:
    e.path = (key, *e.path)
    return e


_NO_KEY = "\x00no key"  # the key type before the first key


def _enc_dict(v: Any) -> tuple[Any, _T | None]:
    out: dict[Any, Any] = {}
    vtypes: list[_T | None] = []
    ktag: str | None = _NO_KEY
    for k, x in v.items():
        try:
            ox, tx = _enc(x)
        except _PATHED as e:
            raise _at(e, k) from None
        ok, kt = (k, None) if type(k) is str else _enc_key(k)
        if kt != ktag:
            if ktag != _NO_KEY:
                raise _mixed_keys(k, kt, ktag)
            ktag = kt
        out[ok] = ox
        vtypes.append(tx)
    inner = _items(vtypes, v)
    if ktag is None or ktag == _NO_KEY:
        return out, ("dict", inner)
    return out, ("kdict", inner, ktag)


def _mixed_keys(k: Any, kt: str | None, before: str | None) -> OutputEncodeError:
    return OutputEncodeError(
        f"a key of {_WHERE} is {k!r} ({kt or 'str'}) where an earlier key is of type {before or 'str'}: JSON writes "
        "every key as a string, so keys of several types could not come back as they were; use keys of one type",
        k,
    )


def _enc_items(v: Any) -> tuple[list[Any], _T]:
    items = []
    types_seen = []
    for i, x in enumerate(v):
        try:
            ox, tx = _enc(x)
        except _PATHED as e:
            raise _at(e, i) from None
        items.append(ox)
        types_seen.append(tx)
    return items, _items(types_seen, v)


def _enc_list(v: Any) -> tuple[Any, _T | None]:
    items, it = _enc_items(v)
    return items, ("list", it)


def _enc_tuple(v: Any) -> tuple[Any, _T | None]:
    items, it = _enc_items(v)
    return items, ("tuple", it)


def _enc_set(v: Any) -> tuple[Any, _T | None]:
    items, it = _enc_items(v)
    try:
        items.sort()  # a set in a stable order where its items compare
    except TypeError:
        pass  # items that do not compare keep the set's own order: still the same set on decode
    return items, ("frozenset" if isinstance(v, frozenset) else "set", it)


_BYTES: _T = ("leaf", "bytes", "s")


def _enc_bytes(v: Any) -> tuple[Any, _T | None]:
    return base64.b64encode(v).decode("ascii"), _BYTES


def _enc_iso(name: str) -> _Enc:
    leaf = ("leaf", name, "s")
    return lambda v: (v.isoformat(), leaf)


def _enc_str(name: str) -> _Enc:
    leaf = ("leaf", name, "s")
    return lambda v: (str(v), leaf)


_BY_BASE: tuple[tuple[type | tuple[type, ...], _Enc], ...] = (
    (dict, _enc_dict),
    (list, _enc_list),
    (tuple, _enc_tuple),
    ((set, frozenset), _enc_set),
    (dt.datetime, _enc_iso("datetime")),  # before date: a datetime is a date
    (dt.date, _enc_iso("date")),
    (dt.time, _enc_iso("time")),
    ((bytes, bytearray, memoryview), _enc_bytes),
)
"""Types encoded by their base class, in the order they are tried."""
_BY_MODULE = (("decimal", "Decimal", "decimal"), ("uuid", "UUID", "uuid"))
"""``(module, class, tag)`` of the types encoded as ``str(value)``; looked up, not imported: a value means loaded."""


def _encoder_for(t: type) -> _Enc:
    """How to encode values of type ``t`` (the checks run once per type)."""
    if issubclass(t, enum.Enum):
        return _enc_enum(t)
    if issubclass(t, (str, int, float)):  # a subclass (bool is in _PLAIN): its plain value
        base = str if issubclass(t, str) else int if issubclass(t, int) else float
        return lambda v: _enc(base(v))
    for bases, enc in _BY_BASE:
        if issubclass(t, bases):
            return enc
    for module, cls, tag in _BY_MODULE:
        mod = sys.modules.get(module)
        if mod is not None and issubclass(t, getattr(mod, cls)):
            return _enc_str(tag)
    mod = sys.modules.get("pydantic")
    if mod is not None and issubclass(t, mod.BaseModel):
        return _enc_model(t, mod)
    if dataclasses.is_dataclass(t):
        return _enc_dataclass(t)
    return _enc_other


def _enc_enum(t: type) -> _Enc:
    leaf = ("leaf", _tag("enum", t), None)  # its values may be of any kind (a tuple value is a list)

    def enc_enum(v: Any) -> tuple[Any, _T | None]:
        try:
            return _enc(v.value)[0], leaf
        except _PATHED as e:
            raise _at(e, ".value") from None

    return enc_enum


def _enc_model(t: type, pyd: Any) -> _Enc:
    leaf = ("leaf", _tag("pydantic", t), None if issubclass(t, pyd.RootModel) else "o")

    def enc_model(v: Any) -> tuple[Any, _T | None]:
        try:
            # by alias: what the model reads back by default (a field `async_` with the alias `async`)
            return v.model_dump(mode="json", by_alias=True), leaf
        except Exception as e:  # pydantic's serialization errors have no common base we may import
            raise _unencodable(v, detail=f" whose model_dump(mode='json') failed ({_one_line(e)})") from None

    return enc_model


def _enc_dataclass(t: type) -> _Enc:
    leaf = ("leaf", _tag("dataclass", t), "o")
    names = [f.name for f in dataclasses.fields(t)]

    def enc_dataclass(v: Any) -> tuple[Any, _T | None]:
        out = {}
        for name in names:
            x = getattr(v, name)
            try:
                ox, tx = _enc(x)
            except _PATHED as e:
                raise _at(e, "." + name) from None
            if tx is not None and tx[0] in _MAY_HOLD_KEYS and _keyed(tx):
                _check_field_keys(t, name, ox, x)
            out[name] = ox
        return out, leaf

    return enc_dataclass


def _check_field_keys(cls: type, name: str, ox: Any, x: Any) -> None:
    """A dataclass field holding a dict with non-string keys: its fields are decoded by the class's annotations
    (not described in the output_type), so the field's must bring the keys back (``dict[int, str]``), or refuse."""
    hint = _field_hints(cls).get(name)
    try:
        same = bool(_compile(hint)(orjson.loads(orjson.dumps(ox, option=_WRITE_OPTS)), None) == x)
    except Exception:  # a decoder or an __eq__ that raises: not the same
        same = False
    if not same:
        raise OutputEncodeError(
            f"{_WHERE} holds a dict whose keys are not strings, in a field annotated {_hint_name(hint)}: a dataclass's "
            "fields are read back by their annotations, which would return the keys as strings; annotate the field "
            "with its key type (dict[int, ...])",
            x,
            ("." + name,),
        )


def _enc_other(v: Any) -> tuple[Any, _T | None]:
    try:  # a type orjson writes itself (a numpy array, a numpy number): as it would write it
        out = orjson.loads(orjson.dumps(v, option=_WRITE_OPTS))
    except TypeError:
        raise _unencodable(v) from None
    return out, (_J if isinstance(out, (list, dict)) else _S)


_KEY_TAGS = {int: "int", float: "float", bool: "bool", _NoneType: "null"}
_KEY_ATOMS = ((dt.datetime, "datetime"), (dt.date, "date"), (dt.time, "time"))  # datetime first: it is a date


def _enc_key(k: Any) -> tuple[Any, str | None]:
    """``(the key as the journal writer takes it, its key type)``: the type is None for a string (JSON's own)."""
    t = type(k)
    tag = _KEY_TAGS.get(t)
    if tag is not None:
        if t is float and k - k != 0.0:
            raise NotJSONValueError("key", k)  # orjson writes a NaN key as "null"
        return k, tag
    if isinstance(k, enum.Enum):
        return _enc_key(k.value)[0], _tag("enum", t)
    for base in (str, int, float):  # a subclass: its plain value
        if isinstance(k, base):
            return _enc_key(base(k)) if base is not str else (str(k), None)
    for cls, name in _KEY_ATOMS:
        if isinstance(k, cls):
            return k.isoformat(), name
    for module, cls_name, name in _BY_MODULE:
        mod = sys.modules.get(module)
        if mod is not None and isinstance(k, getattr(mod, cls_name)):
            return str(k), name
    raise _unencodable(k, what="a key of ", detail=" (keys must be strings, numbers, dates or UUIDs)")


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


# ---------------------------------------------------------------------------------------- output_type
# A parsed output_type: ("json",), ("opt", node), (container, node) for list/tuple/set/frozenset/dict,
# ("kdict", node, key type) for dict[K,T], ("any", array node or None, object node or None) for any[...],
# ("atom", name), ("class", kind, module, qualname).
_Node = tuple[Any, ...]
_JSON: _Node = ("json",)
_ATOMS = frozenset({"datetime", "date", "time", "bytes", "decimal", "uuid"})
_CONTAINERS = ("list", "tuple", "set", "frozenset", "dict")
_KINDS = frozenset({"pydantic", "dataclass", "enum"})
_KEY_WORDS = frozenset({"int", "float", "bool", "null", "datetime", "date", "time", "decimal", "uuid"})


@functools.lru_cache(maxsize=1024)
def _parse(s: str) -> _Node:
    """The output_type as a tree; anything this version cannot read is ``json`` (returned as is)."""
    try:
        node, end = _parse_at(s, 0)
    except (IndexError, ValueError, RecursionError):
        return _JSON
    return node if end == len(s) else _JSON


def _parse_at(s: str, i: int) -> tuple[_Node, int]:
    if s.startswith("any[", i):
        node, j = _parse_any(s, i + 4)
    else:
        key = _key_word(s, i + 5) if s.startswith("dict[", i) else None
        if key is not None:  # dict[K,T]: a dict whose keys are of type K
            inner, j = _parse_at(s, i + 6 + len(key))
            node, j = ("kdict", inner, key), _close(s, j)
        else:
            node, j = _parse_base(s, i)
    if j < len(s) and s[j] == "?":
        return ("opt", node), j + 1
    return node, j


def _close(s: str, j: int) -> int:
    if s[j] != "]":
        raise ValueError(s)
    return j + 1


def _parse_base(s: str, i: int) -> tuple[_Node, int]:
    for c in _CONTAINERS:
        if s.startswith(c + "[", i):
            inner, j = _parse_at(s, i + len(c) + 1)
            return (c, inner), _close(s, j)
    j = i
    while j < len(s) and s[j] not in "[]?,":
        j += 1
    word = s[i:j]
    if word in _ATOMS:
        return ("atom", word), j
    if word.count(":") == 2 and word.split(":", 1)[0] in _KINDS:
        kind, module, qualname = word.split(":")
        return ("class", kind, module, qualname), j
    return _JSON, j  # "json", or a type a newer version wrote


def _key_word(s: str, i: int) -> str | None:
    """The key type of ``dict[K,T]`` at ``i`` (K, when a "," follows it), else None (``dict[T]``: string keys)."""
    j = s.find(",", i)
    word = s[i:j] if j > 0 else ""
    if word in _KEY_WORDS or (word.startswith("enum:") and word.count(":") == 2 and not any(c in word for c in "[]?")):
        return word
    return None


def _parse_any(s: str, i: int) -> tuple[_Node, int]:
    """``any[T,U]``: a JSON array read by the member that reads arrays, an object by the one that reads objects,
    anything else as it is; a member of no such kind, or two of one kind, is not this version's: ValueError."""
    by_kind: dict[str, _Node] = {}
    while True:
        node, j = _parse_at(s, i)
        kind = _node_kind(node)
        if kind is None or kind in by_kind:
            raise ValueError(s)
        by_kind[kind] = node
        if s[j] != ",":
            return ("any", by_kind.get("a"), by_kind.get("o")), _close(s, j)
        i = j + 1


def _node_kind(node: _Node) -> str | None:
    """The JSON kind a node reads: "a" an array, "o" an object; None for any other (an atom, an enum, json)."""
    if node[0] == "opt":
        node = node[1]
    head = node[0]
    if head in _ARRAYS:
        return "a"
    if head in ("dict", "kdict") or (head == "class" and node[1] != "enum"):
        return "o"
    return None


def _resolve(node: _Node) -> type | None:
    """The class a ``class`` node names, from the modules already imported only (see the module docstring)."""
    _, kind, module, qualname = node
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None:
            return None
        # the namespace itself, not getattr: a module's __getattr__ (a lazy import) is code the journal must not reach
        obj = getattr(obj, "__dict__", {}).get(part)
    if not isinstance(obj, type):
        return None
    if kind == "enum":
        return obj if issubclass(obj, enum.Enum) else None
    if kind == "dataclass":
        return obj if dataclasses.is_dataclass(obj) else None
    pyd = sys.modules.get("pydantic")
    return obj if pyd is not None and issubclass(obj, pyd.BaseModel) else None


def _decode_node(v: Any, node: _Node) -> Any:
    """Decode by the recorded output_type alone (no hint)."""
    if v is None:
        return None
    head = node[0]
    if head == "json":
        return v
    if head == "opt":
        return _decode_node(v, node[1])
    if head == "atom":
        return _ATOM_DECODERS[node[1]](v, None)
    if head == "class":
        cls = _resolve(node)
        return v if cls is None else _compile(cls)(v, None)
    if head == "any":  # by the member of the value's JSON kind; a string, number or boolean as it is
        member = node[1] if type(v) is list else node[2] if type(v) is dict else None
        return v if member is None else _decode_node(v, member)
    if head in ("dict", "kdict"):
        return _decode_dict_node(v, node)
    inner = node[1]
    if not isinstance(v, list):
        raise CodecError(f"a {head}[...] output_type over {_json_kind(v)}")
    items = v if inner == _JSON else _map_list(v, lambda x: _decode_node(x, inner))
    if head == "list":
        return items
    return {"tuple": tuple, "set": set, "frozenset": frozenset}[head](items)


def _decode_dict_node(v: Any, node: _Node) -> Any:
    if not isinstance(v, dict):
        raise CodecError(f"a dict[...] output_type over {_json_kind(v)}")
    inner = node[1]
    out = v if inner == _JSON else _map_dict(v, lambda x: _decode_node(x, inner))
    if node[0] == "kdict":
        key = _node_key_decoder(node[2])
        if key is not None:
            out = {key(k): x for k, x in out.items()}
    return out


def _node_key_decoder(word: str) -> Callable[[Any], Any] | None:
    """How to read the keys of a ``dict[K,T]`` back (from their strings); None: as they are (an enum not found)."""
    if word.startswith("enum:"):  # looked up each time: its module may be imported later
        cls = _resolve(("class", *word.split(":")))
        return None if cls is None else _key_decoder(cls)
    return _builtin_key_decoder(word)


@functools.lru_cache(maxsize=16)
def _builtin_key_decoder(word: str) -> Callable[[Any], Any] | None:
    if word == "null":
        return _null_key
    if word == "uuid":
        import uuid

        return _key_decoder(uuid.UUID)
    if word == "decimal":
        import decimal  # only when a Decimal key is read back

        return _key_decoder(decimal.Decimal)
    hint = {"int": int, "float": float, "bool": bool, "datetime": dt.datetime, "date": dt.date, "time": dt.time}
    return _key_decoder(hint[word])


def _null_key(k: Any) -> Any:
    if k == "null":
        return None
    raise CodecError(f"key {k!r} is not null")


def _node_keys(node: _Node | None) -> Callable[[Any], Any] | None:
    """The key decoder of a recorded ``dict[K,T]`` (behind a ``?`` or an ``any[...]``), None for other nodes."""
    if node is not None and node[0] == "opt":
        node = node[1]
    if node is not None and node[0] == "any":
        node = node[2]
    return _node_key_decoder(node[2]) if node is not None and node[0] == "kdict" else None


# ---------------------------------------------------------------------------------------- decode
_Decoder = Callable[[Any, "_Node | None"], Any]


def _ident(v: Any, node: _Node | None) -> Any:
    return v


def _by_node(v: Any, node: _Node | None) -> Any:
    return v if node is None else _decode_node(v, node)


def decode(
    value: Any, output_type: str | None, hint: Any | None = None, *, step: str | None = None, pos: int | None = None
) -> Any:
    """A recorded output as the step's type: by ``hint`` if given, else by ``output_type``, else as is.

    ``step`` and ``pos`` only name the step in a :class:`CodecError` (the recorded value
    does not fit the hint, or its output_type).
    """
    if hint is None and output_type is None:
        return value
    node = None if output_type is None else _parse(output_type)
    try:
        if hint is None:
            return _decode_node(value, node) if node is not None else value
        return _compile(hint)(value, node)
    except CodecError as e:
        raise _codec_error(e, value, output_type, hint, step, pos) from None
    except RecursionError:
        raise _codec_error(CodecError("nested too deeply"), value, output_type, hint, step, pos) from None


def _codec_error(
    e: CodecError, value: Any, output_type: str | None, hint: Any, step: str | None, pos: int | None
) -> CodecError:
    target = _hint_name(hint) if hint is not None else f"its output_type {output_type!r}"
    where = f" at output{_where(tuple(e.path))}" if e.path else ""
    recorded = f"output_type {output_type!r}" if output_type else "plain JSON, no output_type"
    who = f"step {step!r}" if step is not None else "a step"
    if pos is not None:
        who += f" (position {pos})"
    if hint is not None:
        fix = (
            "the step's return type changed since the run was recorded: pass returns= with the type it "
            "had then, fork the run before the change, or start a new run"
        )
    else:
        fix = "the journal line is not what this SDK writes: pass returns= with the type to read it as, or repair it"
    msg = (
        f"cannot return the recorded output of {who} as {target}: {e.reason}{where} "
        f"(the journal recorded {_json_kind(value)}, {recorded}); {fix}"
    )
    err = CodecError(
        msg, step=step, position=-1 if pos is None else pos, expected=_hint_name(hint), actual=output_type or "json"
    )
    err.reason, err.path = e.reason, e.path
    return err


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    name = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return name.get(type(v), f"a {type(v).__name__}")


def _hint_name(hint: Any) -> str:
    if hint is None:
        return "none"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


_compiled: dict[Any, _Decoder] = {}


def _compile(hint: Any) -> _Decoder:
    """The decoder of a hint, cached per hint (hints are usually hashable: ``list[Plan]``)."""
    try:
        return _compiled[hint]
    except KeyError:
        pass  # not compiled yet: built below and cached
    except TypeError:  # an unhashable hint: compiled each time
        return _build(hint)
    dec = _build(hint)
    if len(_compiled) < 4096:
        _compiled[hint] = dec
    return dec


def _build(hint: Any) -> _Decoder:
    if hint is None or hint is Any or hint is object or hint is _NoneType or isinstance(hint, typing.TypeVar):
        return _by_node
    if isinstance(hint, typing.NewType):
        return _compile(hint.__supertype__)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _compile(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return _union(args)
    if origin is typing.Literal or origin is typing.ClassVar or origin is typing.Final:
        return _ident
    if hint in (list, tuple, set, frozenset, dict):
        origin, args = hint, ()
    if origin is not None:
        return _generic(hint, origin, args)
    if not isinstance(hint, type):
        return _by_node  # a string or ForwardRef left unresolved: no hint
    return _class(hint)


_SEQ_OF: dict[Any, tuple[Callable[[Any], Any], str]] = {
    **dict.fromkeys((list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection), (list, "list")),
    **dict.fromkeys((set, abc.Set, abc.MutableSet), (set, "set")),
    frozenset: (frozenset, "frozenset"),
}
"""The generic origins decoded as a sequence of one item type: what to build, and its output_type head."""


def _generic(hint: Any, origin: Any, args: tuple[Any, ...]) -> _Decoder:
    seq = _SEQ_OF.get(origin)
    if seq is not None:
        return _seq(seq[0], seq[1], _compile(args[0]) if args else _by_node)
    if origin is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return _seq(tuple, "tuple", _compile(args[0]) if args else _by_node)
        if args == ((),):
            return _seq(tuple, "tuple", _by_node)
        return _fixed_tuple(hint, [_compile(a) for a in args])
    if origin in (dict, abc.Mapping, abc.MutableMapping):
        return _dict_decoder(args)
    if isinstance(origin, type):
        return _compile(origin)  # a generic class, e.g. a generic dataclass Box[int]: as Box
    return _ident


def _dict_decoder(args: tuple[Any, ...]) -> _Decoder:
    """``dict[K, V]``: keys converted by K; where K says nothing (``Any``, a bare ``dict``), by the recorded
    ``dict[K,T]`` (an explicit ``str`` keeps JSON's strings, as a ``str`` hint keeps a recorded datetime's)."""
    khint = args[0] if args else Any
    by_node = khint is Any or khint is object or isinstance(khint, typing.TypeVar)
    return _mapping(_key_decoder(khint), _compile(args[1]) if len(args) > 1 else _by_node, keys_by_node=by_node)


def _child(node: _Node | None, *heads: str) -> _Node | None:
    """The items' node of a recorded container of one of ``heads`` (behind a ``?``; in an ``any[...]``, the
    member of its kind), None if the node is none of them."""
    if node is not None and node[0] == "opt":
        node = node[1]
    if node is not None and node[0] == "any":
        node = node[2] if "dict" in heads else node[1]
    return node[1] if node is not None and node[0] in heads else None


def _map_list(v: list[Any], f: Callable[[Any], Any]) -> list[Any]:
    out = []
    for i, x in enumerate(v):
        try:
            out.append(f(x))
        except CodecError as e:
            e.path.insert(0, i)
            raise
    return out


def _map_dict(v: dict[Any, Any], f: Callable[[Any], Any]) -> dict[Any, Any]:
    out = {}
    for k, x in v.items():
        try:
            out[k] = f(x)
        except CodecError as e:
            e.path.insert(0, k)
            raise
    return out


def _seq(make: Callable[[Any], Any], name: str, item: _Decoder) -> _Decoder:
    if item is _ident and make is list:
        return _ident

    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        if not isinstance(v, list):
            raise CodecError(f"expected a list for {name}, the journal has {_json_kind(v)}")
        if item is _ident:
            return make(v)
        inner = _child(node, "list", "tuple", "set", "frozenset")
        if item is _by_node and inner is None:
            return v if make is list else make(v)
        items = _map_list(v, lambda x: item(x, inner))
        return items if make is list else make(items)

    return dec


def _fixed_tuple(hint: Any, items: list[_Decoder]) -> _Decoder:
    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != len(items):
            n = f"{len(v)} items" if isinstance(v, list) else _json_kind(v)
            raise CodecError(f"expected a list of {len(items)} items for {_hint_name(hint)}, the journal has {n}")
        inner = _child(node, "tuple", "list")
        return tuple(_map_list(list(zip(items, v, strict=True)), lambda p: p[0](p[1], inner)))

    return dec


def _mapping(kdec: Callable[[Any], Any] | None, vdec: _Decoder, keys_by_node: bool = False) -> _Decoder:
    if kdec is None and vdec is _ident and not keys_by_node:
        return _ident

    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise CodecError(f"expected an object, the journal has {_json_kind(v)}")
        inner = _child(node, "dict", "kdict")
        if vdec is _ident or (vdec is _by_node and inner is None):
            out = v
        else:
            out = _map_dict(v, lambda x: vdec(x, inner))
        key = _node_keys(node) if kdec is None and keys_by_node else kdec
        if key is not None:
            out = {key(k): x for k, x in out.items()}
        return out

    return dec


def _key_decoder(hint: Any) -> Callable[[Any], Any] | None:
    """Keys are JSON strings: a non-string key type is converted from its string."""
    if hint in (str, Any, object) or not isinstance(hint, type):
        return None
    if hint is int or hint is float:
        conv: Callable[[Any], Any] = hint
    elif hint is bool:
        conv = {"true": True, "false": False, "True": True, "False": False}.__getitem__
    else:
        vdec = _compile(hint)
        if issubclass(hint, enum.Enum):
            base = type(next(iter(hint))._value_) if len(hint) else str

            def conv(k: Any) -> Any:
                return vdec(k if base is str else base(k), None)

        else:

            def conv(k: Any) -> Any:
                return vdec(k, None)

    def key(k: Any) -> Any:
        if not isinstance(k, str):
            return k
        try:
            return conv(k)
        except (ValueError, KeyError, TypeError):
            raise CodecError(f"key {k!r} is not a {_hint_name(hint)}") from None

    return key


def _union(args: tuple[Any, ...]) -> _Decoder:
    members = [a for a in args if a is not _NoneType and a is not None]
    decs = [_compile(a) for a in members]
    if len(decs) == 1:
        return decs[0]
    if all(d is _ident for d in decs):
        return _ident
    tags = [_hint_tag(a) for a in members]
    plain = [_plain_check(a) for a, d in zip(members, decs, strict=True) if d in _AS_IS]
    literals = [_literal_fields(a) for a in members]  # a tagged union's tags: part_kind: Literal["tool-call"]

    def excluded(i: int, v: Any) -> bool:
        """The object's tag field names another member (``{"part_kind": "text"}`` is no ToolCallPart)."""
        lit = literals[i]
        return bool(lit) and isinstance(v, dict) and any(k in v and v[k] not in ok for k, ok in lit.items())

    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        tried: list[_Decoder] = []
        if node is not None:  # the recorded type names a member: it wins the tie
            tag = _node_tag(node)
            for t, d in zip(tags, decs, strict=True):
                if t is not None and t == tag:
                    tried.append(d)
                    try:
                        return d(v, node)
                    except CodecError:
                        break
        for check in plain:  # a member that takes the JSON as it is
            if check(v):
                return v
        errors = []
        for i, d in enumerate(decs):
            if d in tried or d in _AS_IS or excluded(i, v):
                continue
            try:
                return d(v, node)
            except CodecError as e:
                errors.append(e.reason)
        raise CodecError("it fits none of the union's types" + (f" ({errors[0]})" if errors else ""))

    return dec


def _literal_fields(hint: Any) -> dict[str, tuple[Any, ...]]:
    """The fields of a dataclass or pydantic model typed as a ``Literal`` (the tags of a tagged union)."""
    if not isinstance(hint, type):
        return {}
    if dataclasses.is_dataclass(hint):
        hints = _field_hints(hint)
    elif hasattr(hint, "model_fields"):
        try:
            hints = {k: f.annotation for k, f in hint.model_fields.items()}
        except Exception:
            return {}
    else:
        return {}
    out = {}
    for name, h in hints.items():
        while typing.get_origin(h) is typing.Annotated:
            h = typing.get_args(h)[0]
        if typing.get_origin(h) is typing.Literal:
            out[name] = typing.get_args(h)
    return out


def _plain_check(hint: Any) -> Callable[[Any], bool]:
    origin = typing.get_origin(hint) or hint
    if origin is typing.Literal:
        values = typing.get_args(hint)
        return lambda v: v in values
    if origin is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if origin is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(origin, type):
        if typing.is_typeddict(origin):
            return lambda v: isinstance(v, dict)
        return lambda v: isinstance(v, origin)
    return lambda v: True


def _node_tag(node: _Node) -> str:
    if node[0] == "opt":
        node = node[1]
    if node[0] == "kdict":
        return "dict"
    if node[0] == "atom":
        return str(node[1])
    if node[0] == "class":
        return f"{node[1]}:{node[2]}:{node[3]}"
    return str(node[0])


def _hint_tag(hint: Any) -> str | None:
    """The output_type head a hint would be encoded as (to pick a union member by the recorded type)."""
    origin = typing.get_origin(hint)
    if origin is not None:
        return _origin_tag(origin)
    if not isinstance(hint, type):
        return None
    for cls, tag in ((dt.datetime, "datetime"), (dt.date, "date"), (dt.time, "time"), (bytes, "bytes")):
        if issubclass(hint, cls):
            return tag
    if hint.__module__ in ("decimal", "_decimal", "_pydecimal") and hint.__name__ == "Decimal":
        return "decimal"
    if hint.__module__ == "uuid" and hint.__name__ == "UUID":
        return "uuid"
    if issubclass(hint, enum.Enum):
        return _tag("enum", hint)
    if dataclasses.is_dataclass(hint):
        return _tag("dataclass", cast(type, hint))  # is_dataclass narrows a class to "instance or class"
    pyd = sys.modules.get("pydantic")
    if pyd is not None and issubclass(hint, pyd.BaseModel):
        return _tag("pydantic", hint)
    return None


def _origin_tag(origin: Any) -> str | None:
    """The output_type head of a generic alias's origin (``list[int]`` -> ``list``), ``None`` if it has none."""
    if origin in (list, abc.Sequence, abc.MutableSequence):
        return "list"
    if origin in (dict, abc.Mapping, abc.MutableMapping):
        return "dict"
    return origin.__name__ if origin in (tuple, set, frozenset) else None


def _converter(name: str, conv: Callable[[Any], Any], accepts: type | tuple[type, ...] = str) -> _Decoder:
    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        if not isinstance(v, accepts) or isinstance(v, bool):
            raise CodecError(f"expected {name}, the journal has {_json_kind(v)}")
        try:
            return conv(v)
        except (ValueError, TypeError, ArithmeticError) as e:
            raise CodecError(f"{v!r} is not {name} ({_one_line(e)})") from None

    return dec


def _b64(v: str) -> bytes:
    return base64.b64decode(v, validate=True)


def _decimal(v: Any) -> Any:
    import decimal  # only when a Decimal is asked for (not loaded by the SDK)

    try:
        return decimal.Decimal(v if isinstance(v, str) else repr(v))
    except decimal.InvalidOperation:
        raise ValueError("not a decimal number") from None


def _uuid(v: str) -> Any:
    import uuid

    return uuid.UUID(v)


_ATOM_DECODERS: dict[str, _Decoder] = {
    "datetime": _converter("an ISO 8601 datetime", dt.datetime.fromisoformat),
    "date": _converter("an ISO 8601 date", dt.date.fromisoformat),
    "time": _converter("an ISO 8601 time", dt.time.fromisoformat),
    "bytes": _converter("base64 bytes", _b64),
    "decimal": _converter("a decimal number", _decimal, (str, int, float)),
    "uuid": _converter("a UUID", _uuid),
}


def _class(cls: Any) -> _Decoder:
    if cls in _PLAIN or typing.is_typeddict(cls):
        return _ident
    if issubclass(cls, enum.Enum):
        return _enum(cls)
    dec = _atom_class(cls) or _record_class(cls)
    if dec is not None:
        return dec
    if issubclass(cls, (str, int, float)) and cls is not bool:  # a subclass: built from the plain value
        base = str if issubclass(cls, str) else (int, float) if issubclass(cls, float) else int
        return _converter(f"a {cls.__qualname__}", cls, base)
    if issubclass(cls, dict):  # a dict subclass (Counter, OrderedDict): a dict, its keys typed as recorded
        return _dict_by_node
    # a list (or a subclass), or a class the codec does not know: the recorded JSON, as before typed outputs
    return _ident


def _dict_by_node(v: Any, node: _Node | None) -> Any:
    """The hint is a dict subclass: the recorded JSON (a dict, not the subclass, whose constructor the codec
    does not know: a ``defaultdict`` takes a factory), decoded by the recorded type where it says more (its keys'
    type): the dict the step returned, as a dict. In a union it counts as a member that takes the JSON as is."""
    if node is None or type(v) is not dict:
        return v
    try:
        return _decode_node(v, node)
    except CodecError:
        return v


_AS_IS = (_ident, _dict_by_node)


def _atom_class(cls: Any) -> _Decoder | None:
    """The decoder of a class recorded as one JSON string or number: a date or time, bytes, a decimal, a UUID."""
    for base, what in ((dt.datetime, "datetime"), (dt.date, "date"), (dt.time, "time")):  # datetime first
        if issubclass(cls, base):
            return _converter(f"an ISO 8601 {what}", cls.fromisoformat)
    if issubclass(cls, (bytes, bytearray)):
        return _converter("base64 bytes", _b64 if cls is bytes else lambda v: cls(_b64(v)))
    tag = _hint_tag(cls)
    if tag == "decimal":
        return _converter("a decimal number", lambda v: cls(_decimal(v)), (str, int, float))
    if tag == "uuid":
        return _ATOM_DECODERS["uuid"]
    return None


def _record_class(cls: Any) -> _Decoder | None:
    """The decoder of a class recorded as a JSON object or list of its fields: a model, a dataclass, a namedtuple."""
    pyd = sys.modules.get("pydantic")
    if pyd is not None and issubclass(cls, pyd.BaseModel):
        return _pydantic(cls, pyd)
    if dataclasses.is_dataclass(cls):
        return _dataclass(cls)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return _namedtuple(cls)
    return None


def _enum(cls: type[enum.Enum]) -> _Decoder:
    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        try:
            return cls(tuple(v) if isinstance(v, list) else v)
        except (ValueError, TypeError):
            pass
        for m in cls:  # a value that is not JSON itself (a date, a Decimal): compare the encoded forms
            try:
                if _enc(m.value)[0] == v:
                    return m
            except OutputEncodeError:
                continue
        raise CodecError(f"{v!r} is not a value of {cls.__qualname__}")

    return dec


def _pydantic(cls: Any, pyd: Any) -> _Decoder:
    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        # JSON-mode validation is the inverse of model_dump(mode="json") (strict models, base64 bytes...)
        data = orjson.dumps(v, option=_WRITE_OPTS)
        try:
            try:
                # by alias (as written since aliases were kept) or by field name (journals written before)
                return cls.model_validate_json(data, by_alias=True, by_name=True)
            except TypeError:  # pydantic before 2.11: by alias only, unless the model populates by name
                return cls.model_validate_json(data)
        except pyd.ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            n = e.error_count()
            raise CodecError(
                f"{n} validation error{'s' if n != 1 else ''} for {cls.__qualname__}"
                f"{' at ' + loc if loc else ''}: {first.get('msg', '')}"
            ) from None

    return dec


def _field_hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # a forward reference that does not resolve: the fields' own annotations where real
        return {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}


def _dataclass(cls: Any) -> _Decoder:
    fields: list[tuple[str, bool, bool, _Decoder]] | None = None

    def prepare() -> list[tuple[str, bool, bool, _Decoder]]:
        # on first use, so that a dataclass holding itself compiles; built whole, then set (steps run in threads)
        hints = _field_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            required = f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            out.append((f.name, f.init, required, _compile(hints.get(f.name))))
        return out

    def dec(v: Any, node: _Node | None) -> Any:
        nonlocal fields
        if v is None:
            return None
        if not isinstance(v, dict):
            raise CodecError(f"expected an object of {cls.__qualname__}'s fields, the journal has {_json_kind(v)}")
        if fields is None:
            fields = prepare()
        kwargs: dict[str, Any] = {}
        later: dict[str, Any] = {}
        for name, init, required, fdec in fields:
            if name in v:
                x = v[name]
                if fdec is not _ident:
                    try:
                        x = fdec(x, None)
                    except CodecError as e:
                        e.path.insert(0, "." + name)
                        raise
                (kwargs if init else later)[name] = x
            elif required:
                raise CodecError(f"{cls.__qualname__} field {name!r} is missing")
        try:
            obj = cls(**kwargs)
        except Exception as e:  # the dataclass's own __init__/__post_init__ refused the values
            raise CodecError(f"{cls.__qualname__}(...) raised {type(e).__name__}: {_one_line(e)}") from None
        for name, x in later.items():
            object.__setattr__(obj, name, x)  # init=False fields, also on a frozen dataclass
        return obj

    return dec


def _namedtuple(cls: Any) -> _Decoder:
    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        hints = _field_hints_nt(cls)
        if not isinstance(v, list):
            raise CodecError(f"expected a list for {cls.__qualname__}, the journal has {_json_kind(v)}")
        try:
            return cls(*(_compile(hints.get(n))(x, None) for n, x in zip(cls._fields, v, strict=False)))
        except TypeError as e:
            raise CodecError(f"{cls.__qualname__}(...) raised TypeError: {_one_line(e)}") from None

    return dec


def _field_hints_nt(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


# ---------------------------------------------------------------------------------------- output_hint
_NO_HINT = object()
_hints: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def output_hint(fn: Any) -> Any | None:
    """The declared return type of ``fn`` (for an ``async def``, what it returns when awaited), or None.

    Follows ``functools.partial`` and bound methods; a class called as a step returns its
    instance. ``Any``, ``object``, ``None`` and an annotation that does not resolve are
    "no hint". Never raises; cached per function.
    """
    target = fn
    try:
        while True:
            if isinstance(target, functools.partial):
                target = target.func
            elif isinstance(target, types.MethodType):
                target = target.__func__
            else:
                break
        cached = _hints.get(target, _NO_HINT)
    except TypeError:  # not weakly referable nor hashable (a builtin, an odd callable): not cached
        return _find_hint(target)
    except Exception:
        return None
    if cached is _NO_HINT:
        cached = _find_hint(target)
        try:
            _hints[target] = cached
        except TypeError:
            pass  # not weakly referable: not cached, looked up again next time
    return cached


def _find_hint(target: Any) -> Any | None:
    try:
        if isinstance(target, type):
            hint: Any = target  # a class as the step's function: its instance
        else:
            if not isinstance(target, (types.FunctionType, types.BuiltinFunctionType)) and callable(target):
                call = type(target).__call__
                target = getattr(call, "__func__", call)
            hint = _return_annotation(target)
    except Exception:
        return None
    if hint is None or hint is Any or hint is object or hint is _NoneType or isinstance(hint, (str, typing.ForwardRef)):
        return None
    return hint


def _return_annotation(fn: Any) -> Any:
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:
        pass  # some annotation does not resolve: try the return one alone, below
    # another annotation does not resolve (a name imported under TYPE_CHECKING): the return one alone
    ann = getattr(fn, "__annotations__", None) or {}
    if "return" not in ann:
        return None

    def shim() -> None: ...

    shim.__annotations__ = {"return": ann["return"]}
    inner = fn
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    try:
        return typing.get_type_hints(shim, globalns=getattr(inner, "__globals__", {})).get("return")
    except Exception:
        return None
