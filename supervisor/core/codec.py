"""Typed step outputs: a value journaled as plain JSON, returned on replay as its type again.

As Temporal's data converter does with type hints. Three functions, called by the SDK:

- :func:`encode` turns a step's return value into plain JSON plus an ``output_type``
  string (``None`` for a value that already is plain JSON: the common case, kept fast);
- :func:`decode` turns a recorded ``output`` back: by the *hint* (``returns=`` on the
  call, else the function's return annotation, :func:`output_hint`) where there is one,
  by the recorded ``output_type`` where there is not, else the JSON as is;
- :func:`output_hint` reads a function's return annotation (cached per function).

Encoded forms (what any reader of the journal sees in ``output``): a pydantic model as
``model_dump(mode="json")``; a dataclass as an object of its fields (each encoded in turn);
``datetime``/``date``/``time`` as ISO 8601 (``isoformat()``, the time zone kept); ``bytes``
(and ``bytearray``, ``memoryview``) as standard base64; ``Decimal`` as a string; ``UUID``
as its string; an ``Enum`` member by its value; a tuple, set or frozenset as a list (a
set sorted where its items compare).

The ``output_type`` grammar (stored next to ``output`` in a ``step`` record)::

    type  := base | base "?"                  "?": the value may also be null
    base  := "json"                           plain JSON: returned as is
           | "datetime" | "date" | "time" | "bytes" | "decimal" | "uuid"
           | "list[" type "]" | "tuple[" type "]" | "set[" type "]" | "frozenset[" type "]"
           | "dict[" type "]"                 the type of the values (keys are JSON strings)
           | kind ":" module ":" qualname     kind: "pydantic", "dataclass" or "enum"

e.g. ``datetime``, ``list[pydantic:agent:Plan]``, ``dict[decimal?]``, ``tuple[json]``.
The items of a container share one type or it says ``json`` (``[1, datetime]`` is
``list[json]``, an output_type that decodes nothing, so it is left out: ``None``). A
dataclass's or a model's fields are not described: the class's own annotations decode
them. A type this version does not know, or a string it cannot parse, is ignored (the JSON
is returned as is), so a newer writer's journal stays readable.

Without a hint a class is looked up **only in modules already imported** (``sys.modules``),
never by importing the module the journal names: a journal is data, not code, and
importing a module runs its code, which a journal (copied from elsewhere, edited by hand)
must never choose. A class that is not found (its module not imported, a class defined
inside a function: ``<locals>``) leaves the value as JSON.

Decoding converts, it does not validate: where the hint needs no conversion (``str``,
``int``, ``dict[str, int]``, a ``TypedDict``, ``Literal``, a class the codec does not
know) the recorded value is returned as it was recorded, and ``null`` is returned as
``None`` whatever the hint; so a step that returned what its annotation did not say gets
the same value again, as the live call did. Where a conversion is needed and the recorded
value does not fit (a recorded output of another shape after a code change), decode
raises :class:`~supervisor.errors.CodecError`, a ``DivergenceError``: the run stops
(exit 78) instead of being restarted into the same failure.

The plain-JSON fast path: a ``str``/``int``/``float``/``bool``/``None`` costs one type
check; a ``dict`` or ``list`` one ``orjson.dumps`` that hands datetimes, dataclasses and
unknown types back (to take the typed path). Tuples, ``UUID`` and ``Enum`` members *inside*
such a dict or list are written by orjson as lists, strings and values without an
``output_type``: a hint (``list[UUID]``) brings them back. pydantic is never imported
here: a value or hint is a pydantic model only if ``pydantic`` is already in ``sys.modules``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import functools
import sys
import types
import typing
import weakref
from collections import abc
from collections.abc import Callable
from typing import Any, cast

import orjson

from ..errors import CodecError, OutputEncodeError

__all__ = ["decode", "encode", "output_hint"]

_NoneType = type(None)
_PLAIN = frozenset({str, int, float, bool, _NoneType})
# What the journal writer accepts; the check hands datetimes and dataclasses to ``default``
# (orjson would write them itself) so that they take the typed path and get an output_type.
_WRITE_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_CHECK_OPTS = _WRITE_OPTS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

_RETURN_INSTEAD = (
    "return dicts, lists, strings, numbers, booleans or None, or a pydantic model, a dataclass, "
    "datetime, date, time, bytes, Decimal, UUID, an Enum, a tuple or a set of these"
)


# ---------------------------------------------------------------------------------------- encode
def _typed(obj: Any) -> Any:
    """The fast check's ``default``: the value holds something that is not plain JSON (orjson raises)."""
    raise TypeError


def encode(value: Any, *, step: str) -> tuple[Any, str | None]:
    """``(plain JSON value, output_type or None)`` for a step's return value.

    Raises ``TypeError`` naming the step, where in the value, the type, and what to
    return instead, for a value the journal cannot hold.
    """
    t = type(value)
    if t in _PLAIN:
        return value, None
    if t is dict or t is list:
        try:
            orjson.dumps(value, default=_typed, option=_CHECK_OPTS)
            return value, None
        except TypeError:
            pass  # a datetime, dataclass, set... inside (or an int over 64 bits): the typed path
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
    try:
        orjson.dumps(out, option=_WRITE_OPTS)
    except TypeError as e:  # an int over 64 bits, a key JSON cannot hold
        raise TypeError(f"step {step!r} returned a value that is not JSON ({e}); {_RETURN_INSTEAD}") from None
    return out, (None if otype == "json" else otype)


_WHERE = "\x00"  # where in the output: filled in by encode, once the path is known


def _unencodable(obj: Any, what: str = "", detail: str = "") -> OutputEncodeError:
    """The error for ``obj`` (its path is added on the way up, by the containers that hold it)."""
    return OutputEncodeError(f"{what}{_WHERE} is of type {_qualname(type(obj))!r}{detail}", obj)


def _where(path: tuple[Any, ...]) -> str:
    return "".join(f".{p[1:]}" if isinstance(p, str) and p.startswith(".") else f"[{p!r}]" for p in path)


def _qualname(cls: type) -> str:
    mod = getattr(cls, "__module__", None)
    name = str(getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls)))
    return name if mod in (None, "builtins") else f"{mod}.{name}"


def _tag(kind: str, cls: type) -> str:
    return f"{kind}:{cls.__module__}:{cls.__qualname__}"


# The type of an encoded value, while encoding: None for a null, _J for plain JSON, ("leaf", output_type)
# for an atom or a class, (container, items) or ("opt", type); _EMPTY: the items of an empty container,
# which agree with any type (``{"a": [], "b": [date]}`` is ``dict[list[date]]``).
_T = tuple[Any, ...]
_J: _T = ("json",)
_EMPTY: _T = ("empty",)
_SEQS = ("list", "tuple", "set", "frozenset", "dict")


def _unify(a: _T, b: _T) -> _T:
    """The one type that describes values of both ``a`` and ``b`` (``json`` if none says more)."""
    if a == b:
        return a
    if a is _EMPTY:
        return b
    if b is _EMPTY:
        return a
    if a[0] == "opt" or b[0] == "opt":
        u = _unify(a[1] if a[0] == "opt" else a, b[1] if b[0] == "opt" else b)
        return _J if u is _J else ("opt", u)
    if a[0] == b[0] and a[0] in _SEQS:
        return (a[0], _unify(a[1], b[1]))
    return _J


def _items(types_seen: Any) -> _T:
    cur: _T = _EMPTY
    null = False
    for t in types_seen:
        if t is None:
            null = True
        elif cur is not _J:
            cur = _unify(cur, t)
    # ("opt", _EMPTY): only nulls, which agree with any type as its nulls ([[None], [b""]] is list[list[bytes?]])
    return ("opt", cur) if null and cur is not _J and cur[0] != "opt" else cur


def _render(t: _T | None) -> str:
    """The output_type string of a type (see the grammar); ``json`` when it says nothing to decode."""
    if t is None or t is _J or t is _EMPTY:
        return "json"
    head = t[0]
    if head == "leaf":
        return str(t[1])
    inner = _render(t[1])
    if head == "opt":
        return "json" if inner == "json" else inner + "?"
    if head in ("list", "dict") and inner == "json":
        return "json"  # decoding it would change nothing
    return f"{head}[{inner}]"


_Enc = Callable[[Any], tuple[Any, "_T | None"]]
_encoders: dict[type, _Enc] = {}  # per type, found once: a step's output holds few types, many times


def _enc(v: Any) -> tuple[Any, _T | None]:
    """``(JSON, type)``: type is None for a null, ``_J`` for a plain value."""
    t = type(v)
    if t in _PLAIN:
        return v, (None if v is None else _J)
    try:
        return _encoders[t](v)
    except KeyError:
        pass  # the first value of this type: its encoder is found below and cached
    f = _encoder_for(t)
    if len(_encoders) < 1024:
        _encoders[t] = f
    return f(v)


def _at(e: OutputEncodeError, key: Any) -> OutputEncodeError:
    e.path = (key, *e.path)
    return e


def _enc_dict(v: Any) -> tuple[Any, _T | None]:
    out: dict[Any, Any] = {}
    vtypes = []
    for k, x in v.items():
        try:
            ox, tx = _enc(x)
        except OutputEncodeError as e:
            raise _at(e, k) from None
        out[_enc_key(k)] = ox
        vtypes.append(tx)
    return out, ("dict", _items(vtypes))


def _enc_items(v: Any) -> tuple[list[Any], _T]:
    items = []
    types_seen = []
    for i, x in enumerate(v):
        try:
            ox, tx = _enc(x)
        except OutputEncodeError as e:
            raise _at(e, i) from None
        items.append(ox)
        types_seen.append(tx)
    return items, _items(types_seen)


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


def _enc_bytes(v: Any) -> tuple[Any, _T | None]:
    return base64.b64encode(v).decode("ascii"), ("leaf", "bytes")


def _enc_iso(name: str) -> _Enc:
    leaf = ("leaf", name)
    return lambda v: (v.isoformat(), leaf)


def _enc_str(name: str) -> _Enc:
    leaf = ("leaf", name)
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
        return lambda v: (base(v), _J)
    for bases, enc in _BY_BASE:
        if issubclass(t, bases):
            return enc
    for module, cls, tag in _BY_MODULE:
        mod = sys.modules.get(module)
        if mod is not None and issubclass(t, getattr(mod, cls)):
            return _enc_str(tag)
    mod = sys.modules.get("pydantic")
    if mod is not None and issubclass(t, mod.BaseModel):
        return _enc_model(t)
    if dataclasses.is_dataclass(t):
        return _enc_dataclass(t)
    return _enc_other


def _enc_enum(t: type) -> _Enc:
    leaf = ("leaf", _tag("enum", t))

    def enc_enum(v: Any) -> tuple[Any, _T | None]:
        try:
            return _enc(v.value)[0], leaf
        except OutputEncodeError as e:
            raise _at(e, ".value") from None

    return enc_enum


def _enc_model(t: type) -> _Enc:
    leaf = ("leaf", _tag("pydantic", t))

    def enc_model(v: Any) -> tuple[Any, _T | None]:
        try:
            # by alias: what the model reads back by default (a field `async_` with the alias `async`)
            return v.model_dump(mode="json", by_alias=True), leaf
        except Exception as e:  # pydantic's serialization errors have no common base we may import
            raise _unencodable(v, detail=f" whose model_dump(mode='json') failed ({_one_line(e)})") from None

    return enc_model


def _enc_dataclass(t: type) -> _Enc:
    leaf = ("leaf", _tag("dataclass", t))
    names = [f.name for f in dataclasses.fields(t)]

    def enc_dataclass(v: Any) -> tuple[Any, _T | None]:
        out = {}
        for name in names:
            try:
                out[name] = _enc(getattr(v, name))[0]
            except OutputEncodeError as e:
                raise _at(e, "." + name) from None
        return out, leaf

    return enc_dataclass


def _enc_other(v: Any) -> tuple[Any, _T | None]:
    try:  # a type orjson writes itself (a numpy array, a numpy number): as it would write it
        return orjson.loads(orjson.dumps(v, option=_WRITE_OPTS)), _J
    except TypeError:
        raise _unencodable(v) from None


def _enc_key(k: Any) -> Any:
    t = type(k)
    if t in _PLAIN:
        return k  # non-string keys are written as strings by the journal writer (as today)
    if isinstance(k, enum.Enum):
        return _enc_key(k.value)
    if isinstance(k, (str, int, float)):
        return str(k) if isinstance(k, str) else k
    if isinstance(k, (dt.date, dt.time)):
        return k.isoformat()
    for name, cls in (("decimal", "Decimal"), ("uuid", "UUID")):
        mod = sys.modules.get(name)
        if mod is not None and isinstance(k, getattr(mod, cls)):
            return str(k)
    raise _unencodable(k, what="a key of ", detail=" (keys must be strings, numbers, dates or UUIDs)")


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


# ---------------------------------------------------------------------------------------- output_type
# A parsed output_type: ("json",), ("opt", node), (container, node) for list/tuple/set/frozenset/dict,
# ("atom", name), ("class", kind, module, qualname).
_Node = tuple[Any, ...]
_JSON: _Node = ("json",)
_ATOMS = frozenset({"datetime", "date", "time", "bytes", "decimal", "uuid"})
_CONTAINERS = ("list", "tuple", "set", "frozenset", "dict")
_KINDS = frozenset({"pydantic", "dataclass", "enum"})


@functools.lru_cache(maxsize=1024)
def _parse(s: str) -> _Node:
    """The output_type as a tree; anything this version cannot read is ``json`` (returned as is)."""
    try:
        node, end = _parse_at(s, 0)
    except (IndexError, ValueError, RecursionError):
        return _JSON
    return node if end == len(s) else _JSON


def _parse_at(s: str, i: int) -> tuple[_Node, int]:
    for c in _CONTAINERS:
        if s.startswith(c + "[", i):
            inner, j = _parse_at(s, i + len(c) + 1)
            if s[j] != "]":
                raise ValueError(s)
            node: _Node = (c, inner)
            j += 1
            break
    else:
        j = i
        while j < len(s) and s[j] not in "[]?":
            j += 1
        word = s[i:j]
        if word in _ATOMS:
            node = ("atom", word)
        elif word.count(":") == 2 and word.split(":", 1)[0] in _KINDS:
            kind, module, qualname = word.split(":")
            node = ("class", kind, module, qualname)
        else:
            node = _JSON  # "json", or a type a newer version wrote
    if j < len(s) and s[j] == "?":
        return ("opt", node), j + 1
    return node, j


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
    inner = node[1]
    if head == "dict":
        if not isinstance(v, dict):
            raise CodecError(f"a dict[...] output_type over {_json_kind(v)}")
        if inner == _JSON:
            return v
        return _map_dict(v, lambda x: _decode_node(x, inner))
    if not isinstance(v, list):
        raise CodecError(f"a {head}[...] output_type over {_json_kind(v)}")
    items = v if inner == _JSON else _map_list(v, lambda x: _decode_node(x, inner))
    if head == "list":
        return items
    return {"tuple": tuple, "set": set, "frozenset": frozenset}[head](items)


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
        kdec = _key_decoder(args[0]) if args else None
        return _mapping(kdec, _compile(args[1]) if len(args) > 1 else _by_node)
    if isinstance(origin, type):
        return _compile(origin)  # a generic class, e.g. a generic dataclass Box[int]: as Box
    return _ident


def _child(node: _Node | None, *heads: str) -> _Node | None:
    if node is not None and node[0] == "opt":
        node = node[1]
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


def _mapping(kdec: Callable[[Any], Any] | None, vdec: _Decoder) -> _Decoder:
    if kdec is None and vdec is _ident:
        return _ident

    def dec(v: Any, node: _Node | None) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise CodecError(f"expected an object, the journal has {_json_kind(v)}")
        inner = _child(node, "dict")
        if vdec is _ident or (vdec is _by_node and inner is None):
            out = v
        else:
            out = _map_dict(v, lambda x: vdec(x, inner))
        if kdec is not None:
            out = {kdec(k): x for k, x in out.items()}
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
    plain = [_plain_check(a) for a, d in zip(members, decs, strict=True) if d is _ident]
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
            if d in tried or d is _ident or excluded(i, v):
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
    # a list or dict (or a subclass), or a class the codec does not know: the recorded JSON, as before typed outputs
    return _ident


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
