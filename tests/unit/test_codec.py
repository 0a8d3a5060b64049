"""Typed step outputs (supervisor/core/codec.py): every value goes through real JSON bytes, as in a journal.

``journaled`` encodes, dumps with the journal writer's options, loads, and decodes: a
round trip is only proved if the bytes in between are plain JSON.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import gc
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, NewType, Optional, TypedDict, Union

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.core import codec
from supervisor.core.codec import decode, encode, output_hint
from supervisor.errors import CodecError, DivergenceError, OutputEncodeError, SupervisorError

WRITER_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY  # what JournalWriter dumps records with
ROOT = Path(__file__).resolve().parent.parent.parent



# ISO 8601 keeps a UTC offset, not a zone name: a ZoneInfo time in a DST gap or fold cannot come back equal,
# so the round-trip properties draw fixed offsets (what the journal can hold), to the minute
FIXED_OFFSETS = st.integers(-14 * 60, 14 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))

def on_disk(value: Any, step: str = "s") -> tuple[Any, str | None]:
    """(the output as a reader loads it from the journal line, output_type)."""
    out, otype = encode(value, step=step)
    line = orjson.dumps({"kind": "step", "step": step, "output": out, "output_type": otype}, option=WRITER_OPTS)
    rec = orjson.loads(line)
    return rec["output"], rec["output_type"]


def journaled(value: Any, hint: Any = None) -> Any:
    out, otype = on_disk(value)
    return decode(out, otype, hint, step="s")


# --------------------------------------------------------------------- types at module level (resolvable)
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Pair(enum.Enum):
    A = (1, 2)


class Day(enum.Enum):
    NEW_YEAR = dt.date(2026, 1, 1)


@dataclasses.dataclass
class Hit:
    url: str
    seen: dt.datetime
    body: bytes
    score: Decimal | None = None


@dataclasses.dataclass(frozen=True)
class Page:
    hits: list[Hit]
    by_url: dict[str, Hit]
    color: Color
    level: Level
    id: uuid.UUID
    tags: frozenset[str] = frozenset()
    count: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", len(self.hits))


@dataclasses.dataclass
class Tree:
    name: str
    children: list[Tree] = dataclasses.field(default_factory=list)


class Point(NamedTuple):
    x: int
    when: dt.date


class Step(pydantic.BaseModel):
    text: str
    due: dt.datetime
    blob: bytes = b""


class Plan(pydantic.BaseModel):
    goal: str
    steps: list[Step]
    created: dt.datetime
    budget: Decimal
    tags: set[str] = set()


class Other(pydantic.BaseModel):
    goal: int


class StrictPlan(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
    when: dt.datetime
    who: uuid.UUID


class Movie(TypedDict):
    title: str
    year: int


UserId = NewType("UserId", uuid.UUID)

TZ = dt.timezone(dt.timedelta(hours=5, minutes=30))
NOW = dt.datetime(2026, 11, 30, 13, 45, 1, 123456, tzinfo=TZ)


def make_page() -> Page:
    h1 = Hit("a", NOW, b"\x00\xffbody", Decimal("1.10"))
    h2 = Hit("b", NOW.replace(tzinfo=None), b"")
    return Page([h1, h2], {"a": h1}, Color.BLUE, Level.HIGH, uuid.UUID(int=7), frozenset({"x", "y"}))


def make_plan() -> Plan:
    return Plan(
        goal="g",
        steps=[Step(text="s1", due=NOW, blob=b"\x01\x02"), Step(text="s2", due=NOW.astimezone(dt.UTC))],
        created=NOW,
        budget=Decimal("12.50"),
        tags={"a", "b"},
    )


# --------------------------------------------------------------------- scalars and atoms
@pytest.mark.parametrize(
    ("value", "otype"),
    [
        (NOW, "datetime"),
        (NOW.replace(tzinfo=None), "datetime"),
        (NOW.astimezone(dt.UTC), "datetime"),
        (NOW.date(), "date"),
        (NOW.timetz(), "time"),
        (dt.time(1, 2), "time"),
        (b"\x00\xff\x10", "bytes"),
        (Decimal("1.10"), "decimal"),
        (Decimal("-1E+30"), "decimal"),
        (uuid.UUID(int=12345), "uuid"),
        (Color.RED, f"enum:{__name__}:Color"),
        (Level.HIGH, f"enum:{__name__}:Level"),
        (Pair.A, f"enum:{__name__}:Pair"),
        (Day.NEW_YEAR, f"enum:{__name__}:Day"),  # a value that is not JSON itself
        ((1, "a", None), "tuple[json]"),
        ({3, 1, 2}, "set[json]"),
        (frozenset({"b", "a"}), "frozenset[json]"),
        ((NOW, NOW), "tuple[datetime]"),
    ],
)
def test_atoms_round_trip_without_a_hint(value: Any, otype: str) -> None:
    out, recorded = on_disk(value)
    assert recorded == otype
    back = decode(out, recorded, None)
    assert back == value and type(back) is type(value)
    if isinstance(value, dt.datetime | dt.time):
        assert back.tzinfo == value.tzinfo  # the time zone is kept, not normalised


def test_encoded_forms_are_what_any_reader_can_show() -> None:
    assert on_disk(NOW)[0] == "2026-11-30T13:45:01.123456+05:30"
    assert on_disk(b"\x00\xff")[0] == "AP8="  # standard base64
    assert on_disk(Decimal("0.10"))[0] == "0.10"  # a string: no float rounding
    assert on_disk(uuid.UUID(int=1))[0] == "00000000-0000-0000-0000-000000000001"
    assert on_disk(Color.RED)[0] == "red"
    assert on_disk({"b", "a", "c"})[0] == ["a", "b", "c"]  # a set sorted where its items compare
    assert on_disk(make_plan())[0] == make_plan().model_dump(mode="json")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (NOW, dt.datetime),
        (NOW.date(), dt.date),
        (b"abc", bytes),
        (bytearray(b"abc"), bytearray),
        (Decimal("3.14"), Decimal),
        (uuid.UUID(int=5), uuid.UUID),
        (Color.BLUE, Color),
        (Level.LOW, Level),
        ((1, 2), tuple[int, int]),
        ((1, NOW), tuple[int, dt.datetime]),
        ((NOW, NOW), tuple[dt.datetime, ...]),
        ({NOW}, set[dt.datetime]),
        ([NOW, None], list[Optional[dt.datetime]]),  # noqa: UP045
        ({"a": Decimal("1"), "b": None}, dict[str, Decimal | None]),
        ({uuid.UUID(int=1): NOW}, dict[uuid.UUID, dt.datetime]),
        ({Color.RED: 1}, dict[Color, int]),
        ({Level.HIGH: "x"}, dict[Level, str]),
        ({1: "x", 2: "y"}, dict[int, str]),  # JSON's string keys back to ints
        ({NOW.date(): [b"x"]}, dict[dt.date, list[bytes]]),
        (Point(3, NOW.date()), Point),
        (uuid.UUID(int=9), UserId),
        (NOW, Annotated[dt.datetime, "meta"]),
    ],
)
def test_hinted_round_trip(value: Any, hint: Any) -> None:
    back = journaled(value, hint)
    assert back == value and type(back) is type(value)


def test_a_bytearray_comes_back_as_bytes_without_a_hint_and_as_bytearray_with_one() -> None:
    assert type(journaled(bytearray(b"x"))) is bytes
    assert journaled(memoryview(b"xy")) == b"xy"


# --------------------------------------------------------------------- property: nested containers of atoms
atoms = (
    st.datetimes(timezones=st.none() | FIXED_OFFSETS)
    | st.dates()
    | st.times()
    | st.binary(max_size=20)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.uuids()
)
plain = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False)
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_property_uniform_containers_of_atoms_round_trip_without_a_hint(data: st.DataObject) -> None:
    """A list/dict whose items share one type (nulls allowed) is decoded from its output_type alone.

    Not UUIDs: inside a plain dict/list orjson writes them itself (the fast path), see
    test_types_orjson_writes_inside_plain_containers_come_back_with_a_hint.
    """
    atom = data.draw(st.sampled_from(["datetime", "date", "time", "bytes", "decimal"]))
    strat = {
        "datetime": st.datetimes(timezones=st.none() | FIXED_OFFSETS),
        "date": st.dates(),
        "time": st.times(timezones=st.none() | FIXED_OFFSETS),
        "bytes": st.binary(max_size=20),
        "decimal": st.decimals(allow_nan=False, allow_infinity=False),
    }[atom]
    nullable = data.draw(st.booleans())
    # tuples at the top only: a list of empty tuples is plain JSON to orjson (the fast path): lists on replay
    shape = data.draw(st.lists(st.sampled_from(["list", "dict"]), max_size=3))
    if data.draw(st.booleans()):
        shape.insert(0, "tuple")
    value = data.draw(_nested(shape, strat, nullable))
    out, otype = on_disk(value)
    assert decode(out, otype, None) == value


def _nested(shape: list[str], leaf: st.SearchStrategy[Any], nullable: bool) -> st.SearchStrategy[Any]:
    """Containers of one shape all the way down (lists of dicts of ...), empty ones and nulls included."""
    if not shape:
        return st.none() | leaf if nullable else leaf
    inner = _nested(shape[1:], leaf, nullable)
    c: st.SearchStrategy[Any] = {
        "list": st.lists(inner, max_size=3),
        "dict": st.dictionaries(st.text(max_size=3), inner, max_size=3),
        "tuple": st.lists(inner, max_size=3).map(tuple),
    }[shape[0]]
    return st.none() | c if nullable else c


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        atoms | plain,
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.tuples(inner, inner),
        max_leaves=15,
    )
)
def test_property_any_nesting_is_plain_json_on_disk_and_exact_with_a_hint(value: Any) -> None:
    """Whatever mixes: the journal holds JSON, and a hint describing the value brings it back exactly."""
    out, _otype = on_disk(value)
    assert orjson.loads(orjson.dumps(out)) == out  # plain JSON (tuples -> lists)
    hint = _hint_of(value)
    assert journaled(value, None if hint is AMBIGUOUS else hint) == value or hint is AMBIGUOUS


AMBIGUOUS = object()
# Types whose JSON forms a union cannot tell apart without an output_type (a string, a list, an object).
LOOKS = {str: "s", dt.datetime: "s", dt.date: "s", dt.time: "s", bytes: "s", Decimal: "s", uuid.UUID: "s"}


def _hint_of(value: Any) -> Any:
    """A type hint describing ``value`` exactly: a union where items differ, AMBIGUOUS if one would be ambiguous."""
    if isinstance(value, list | tuple | dict):
        items = list(value.values()) if isinstance(value, dict) else list(value)
        hints = [_hint_of(x) for x in items]
        if AMBIGUOUS in hints:
            return AMBIGUOUS
        if isinstance(value, tuple):
            return tuple[tuple(hints)] if hints else tuple[()]  # type: ignore[misc]
        u = _union_of(hints)
        if u is AMBIGUOUS:
            return AMBIGUOUS
        return list[u] if isinstance(value, list) else dict[str, u]  # type: ignore[valid-type]
    return type(value)


def _union_of(hints: list[Any]) -> Any:
    if not hints:
        return Any
    distinct = list(dict.fromkeys(hints))
    if len(distinct) == 1:
        return distinct[0]
    looks = [LOOKS.get(h) or (typing_origin(h) or h).__name__ for h in distinct if h is not type(None)]
    looks = ["list" if x == "tuple" else x for x in looks]
    if len(looks) != len(set(looks)):
        return AMBIGUOUS
    return Union[tuple(distinct)]  # noqa: UP007


def typing_origin(h: Any) -> Any:
    import typing

    return typing.get_origin(h)


# --------------------------------------------------------------------- dataclasses and pydantic
def test_nested_dataclasses_round_trip_by_output_type_and_by_hint() -> None:
    page = make_page()
    out, otype = on_disk(page)
    assert otype == f"dataclass:{__name__}:Page"
    assert out["hits"][0] == {"url": "a", "seen": NOW.isoformat(), "body": "AP9ib2R5", "score": "1.10"}
    assert out["count"] == 2  # an init=False field is journaled and restored
    for back in (decode(out, otype, None), decode(out, None, Page), decode(out, otype, Page)):
        assert back == page and back.count == 2
        assert type(back.hits[0].seen) is dt.datetime and back.hits[0].seen.tzinfo == TZ
        assert back.by_url["a"].score == Decimal("1.10") and back.level is Level.HIGH


def test_a_dataclass_that_holds_itself() -> None:
    tree = Tree("root", [Tree("a", [Tree("a1")]), Tree("b")])
    assert journaled(tree) == tree
    assert journaled([tree], list[Tree]) == [tree]


def test_pydantic_models_nested_with_datetimes() -> None:
    plan = make_plan()
    out, otype = on_disk(plan)
    assert otype == f"pydantic:{__name__}:Plan"
    for back in (decode(out, otype, None), decode(out, None, Plan)):
        assert back == plan
        assert back.steps[0].due.tzinfo == TZ and back.steps[0].blob == b"\x01\x02"
    models = {"x": [plan, None]}
    out, otype = on_disk(models)
    assert otype == f"dict[list[pydantic:{__name__}:Plan?]]"
    assert decode(out, otype, None) == models


def test_a_strict_model_decodes_its_own_json_dump() -> None:
    """JSON-mode validation, the inverse of model_dump(mode='json'): a strict model accepts its ISO strings."""
    m = StrictPlan(when=NOW, who=uuid.UUID(int=3))
    assert journaled(m) == m and journaled(m, StrictPlan) == m


def test_a_dataclass_holding_a_model_and_a_model_list_in_a_tuple() -> None:
    @dataclasses.dataclass
    class Local:  # defined in a function: found by the hint, not by the output_type
        plan: Plan
        when: dt.date

    value = (Local(make_plan(), NOW.date()), [make_plan()])
    out, otype = on_disk(value)
    assert otype == "tuple[json]"  # the items differ
    assert decode(out, otype, tuple[Local, list[Plan]]) == value
    only_local = on_disk(Local(make_plan(), NOW.date()))
    assert "<locals>" in str(only_local[1])
    assert decode(*only_local, None) == only_local[0]  # not resolvable: the JSON as is


# --------------------------------------------------------------------- plain JSON: the fast path
@pytest.mark.parametrize(
    "value", [None, True, 0, 2**63 - 1, 1.5, "s", {"a": [1, {"b": None}]}, [1, "x", [True]], {}, []]
)
def test_plain_json_is_returned_as_is_with_no_output_type(value: Any) -> None:
    out, otype = encode(value, step="s")
    assert out is value and otype is None
    assert decode(value, None, None) is value


def test_output_types_that_say_nothing_are_left_out() -> None:
    assert encode([1, NOW], step="s")[1] is None  # mixed items: json
    assert encode({"a": 1, "b": NOW}, step="s") == ({"a": 1, "b": NOW.isoformat()}, None)
    assert encode([None, None], step="s")[1] is None


def test_types_orjson_writes_inside_plain_containers_come_back_with_a_hint() -> None:
    """Tuples, UUIDs and enum members inside a dict/list take the fast path: plain on disk, typed by the hint."""
    value = {"ids": [uuid.UUID(int=1)], "pair": (1, 2), "color": Color.RED}
    out, otype = on_disk(value)
    assert otype is None and out == {"ids": [str(uuid.UUID(int=1))], "pair": [1, 2], "color": "red"}
    assert decode(out, otype, dict[str, Any]) == out  # no conversion asked
    assert decode(out["ids"], None, list[uuid.UUID]) == value["ids"]
    assert decode(out["pair"], None, tuple[int, int]) == (1, 2)
    assert decode(out, None, Movie) == out  # a TypedDict is returned as recorded (documented)


def test_numpy_values_are_written_as_orjson_writes_them() -> None:
    np = pytest.importorskip("numpy")
    assert encode({"a": np.arange(3)}, step="s")[1] is None
    assert encode(np.arange(3), step="s") == ([0, 1, 2], None)


def test_str_and_int_subclasses_and_ordered_dicts() -> None:
    class Name(str):
        pass

    from collections import OrderedDict

    assert encode(Name("x"), step="s") == ("x", None) and type(encode(Name("x"), step="s")[0]) is str
    assert encode(OrderedDict(a=NOW), step="s") == ({"a": NOW.isoformat()}, "dict[datetime]")
    assert type(journaled(Name("x"), Name)) is Name


# --------------------------------------------------------------------- hints against output_type
def test_the_hint_wins_over_the_output_type() -> None:
    out, otype = on_disk(NOW)
    assert decode(out, otype, str) == NOW.isoformat()
    assert decode(out, otype, Any) == NOW  # Any is no hint: the output_type decodes
    assert decode(out, otype, list[Any] | dt.datetime) == NOW
    out, otype = on_disk([NOW])
    assert decode(out, otype, list) == [NOW]  # a bare list: items by the output_type
    assert decode(out, otype, list[str]) == [NOW.isoformat()]
    assert decode(out, otype, tuple[Any, ...]) == (NOW,)


def test_a_union_is_decided_by_the_recorded_type_then_by_what_needs_no_conversion() -> None:
    out, otype = on_disk(NOW)
    assert decode(out, otype, str | dt.datetime) == NOW  # recorded as a datetime
    assert decode(out, None, str | dt.datetime) == out  # a plain string: str takes it as is
    assert decode(out, None, int | dt.datetime) == NOW  # only the datetime fits
    page, plan = make_page(), make_plan()
    for v in (page, plan):
        o, t = on_disk(v)
        assert decode(o, t, Page | Plan) == v and decode(o, t, Plan | Page) == v
    o, t = on_disk(plan)
    assert decode(o, None, Page | Plan) == plan  # no output_type: the first that fits
    assert decode(None, "datetime?", dt.datetime | None) is None


def test_a_hint_that_needs_no_conversion_returns_the_recorded_value() -> None:
    """Decoding converts, it does not validate: the live call returned this too."""
    assert decode(None, None, Plan) is None
    assert decode("x", None, int) == "x"
    assert decode(3, None, float) == 3 and type(decode(3, None, float)) is int
    assert decode({"title": "t", "year": 1}, None, Movie) == {"title": "t", "year": 1}
    assert decode("b", None, Literal["a"]) == "b"
    assert decode([1], None, object) == [1]


def test_unknown_or_damaged_output_types_are_ignored() -> None:
    for otype in ("timedelta", "list[", "list[datetime", "dict[x]]", "", "pydantic:nomodule", "enum:a:b:c", "??"):
        assert decode(["2026-01-01"], otype, None) == ["2026-01-01"]
    assert decode("2026-01-01", "future:kind:x", dt.date) == dt.date(2026, 1, 1)  # the hint still works


def test_a_hostile_output_type_is_ignored() -> None:
    deep = "list[" * 5000 + "datetime" + "]" * 5000
    assert decode([], deep, None) == []
    assert decode({"a": 1}, "dataclass:os:path", None) == {"a": 1}  # not a class
    assert decode({"a": 1}, "dataclass:sys:modules", None) == {"a": 1}


def test_the_output_type_grammar_parses_its_examples() -> None:
    assert codec._parse("list[pydantic:agent.mod:Plan.Inner?]") == (
        "list",
        ("opt", ("class", "pydantic", "agent.mod", "Plan.Inner")),
    )
    assert codec._parse("dict[decimal?]") == ("dict", ("opt", ("atom", "decimal")))
    assert codec._parse("tuple[json]") == ("tuple", ("json",))
    assert codec._parse("set[frozenset[uuid]]?") == ("opt", ("set", ("frozenset", ("atom", "uuid"))))


def test_a_class_is_resolved_only_from_modules_already_imported(tmp_path: Path) -> None:
    """A journal is data, not code: naming a module in output_type never imports it."""
    marker = tmp_path / "imported"
    (tmp_path / "codec_evil_mod.py").write_text(
        f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "import dataclasses\n@dataclasses.dataclass\nclass X:\n    a: int\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert decode({"a": 1}, "dataclass:codec_evil_mod:X", None) == {"a": 1}
        assert not marker.exists() and "codec_evil_mod" not in sys.modules
        import codec_evil_mod  # the agent imports it itself: now it is found

        assert decode({"a": 1}, "dataclass:codec_evil_mod:X", None) == codec_evil_mod.X(1)
        # a class of another kind than recorded is not used
        assert decode({"a": 1}, "pydantic:codec_evil_mod:X", None) == {"a": 1}
        # nor a module's __getattr__ (PEP 562: lazy imports) reached by a name the journal gives
        codec_evil_mod.__getattr__ = lambda name: pytest.fail(f"__getattr__({name!r}) was called")  # type: ignore[attr-defined]
        assert decode({"a": 1}, "dataclass:codec_evil_mod:Lazy", None) == {"a": 1}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("codec_evil_mod", None)


# --------------------------------------------------------------------- errors
def test_a_recorded_output_of_another_shape_is_a_codec_error_naming_step_hint_and_type() -> None:
    out, otype = on_disk(make_plan())
    with pytest.raises(CodecError) as exc:
        decode(out, otype, Other, step="plan", pos=4)
    e = exc.value
    assert isinstance(e, DivergenceError) and isinstance(e, SupervisorError)
    msg = str(e)
    assert "step 'plan' (position 4)" in msg and "as Other" in msg and f"output_type '{otype}'" in msg
    assert "validation error" in msg and "goal" in msg and "returns=" in msg and "\n" not in msg
    assert (e.step, e.position, e.expected, e.actual) == ("plan", 4, "Other", otype)
    with pytest.raises(CodecError) as exc:
        decode({"hits": [{"url": "u", "seen": "noon", "body": ""}]}, None, Page)
    assert exc.value.path == [".hits", 0, ".seen"] and "'noon' is not an ISO 8601 datetime" in exc.value.reason


@pytest.mark.parametrize(
    ("value", "otype", "hint", "says"),
    [
        ({"url": "a"}, None, Hit, "Hit field 'seen' is missing"),
        ([1], None, Hit, "expected an object of Hit's fields, the journal has a list"),
        ("yesterday", None, dt.datetime, "'yesterday' is not an ISO 8601 datetime"),
        (5, None, bytes, "expected base64 bytes, the journal has a number"),
        ("***", "bytes", None, "is not base64 bytes"),
        ("purple", None, Color, "'purple' is not a value of Color"),
        ({"hits": [{"url": 1, "seen": "x", "body": ""}]}, None, Page, "at output.hits[0].seen"),
        ([1, 2, 3], None, tuple[int, int], "expected a list of 2 items"),
        ({"x": "1"}, None, dict[int, str], "key 'x' is not a int"),
        ("x", None, int | dt.datetime, "fits none of the union's types"),
        ("2026", "datetime", None, "as its output_type 'datetime'"),
        ({"a": 1}, "list[datetime]", None, "a list[...] output_type over an object"),
    ],
)
def test_decode_errors_say_what_and_where(value: Any, otype: str | None, hint: Any, says: str) -> None:
    with pytest.raises(CodecError) as exc:
        decode(value, otype, hint, step="fetch")
    assert says in str(exc.value) and "step 'fetch'" in str(exc.value)


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (Opaque(), "output is of type 'tests.unit.test_codec.Opaque'"),
        ({"a": [1, Opaque()]}, "output['a'][1] is of type"),
        (Hit("u", NOW, Opaque()), "output.body is of type"),  # type: ignore[arg-type]
        ({dt.timedelta(1): 1}, "a key of output is of type 'datetime.timedelta'"),
        (lambda: 1, "output is of type 'function'"),
    ],
)
def test_encode_errors_name_the_step_the_type_and_what_to_return(value: Any, where: str) -> None:
    with pytest.raises(TypeError) as exc:
        encode(value, step="search:q1")
    msg = str(exc.value)
    assert isinstance(exc.value, OutputEncodeError) and exc.value.value is not None
    assert msg.startswith("step 'search:q1' returned a value that cannot be journaled: ")
    assert where in msg and "return dicts, lists, strings, numbers, booleans or None, or a pydantic model" in msg


def test_encode_errors_for_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match=r"step 'big' returned a value that is not JSON \(Integer exceeds 64-bit"):
        encode([2**70, NOW], step="big")
    cycle: list[Any] = [NOW]
    cycle.append(cycle)
    with pytest.raises(TypeError, match="nested too deeply to journal"):
        encode(cycle, step="loop")

    class BadDump(pydantic.BaseModel):
        x: Any

    with pytest.raises(TypeError, match=r"step 's' .* model_dump\(mode='json'\) failed"):
        encode(BadDump(x=Opaque()), step="s")


# --------------------------------------------------------------------- output_hint
class Agent:
    def method(self, q: str) -> Plan: ...

    @classmethod
    def cm(cls) -> list[Hit]: ...

    @staticmethod
    def sm() -> dt.date: ...

    async def amethod(self) -> Page: ...

    def __call__(self) -> Decimal: ...


async def async_fn(q: str) -> list[Plan]:
    return []


def takes_unknown(x: NotImportedAnywhere) -> Plan:  # type: ignore[name-defined]  # noqa: F821
    ...


def returns_unknown() -> NotImportedAnywhere:  # type: ignore[name-defined]  # noqa: F821
    ...


def no_annotation(q):  # type: ignore[no-untyped-def]
    return q


def returns_none() -> None: ...


def returns_any() -> Any: ...


def returns_optional() -> Optional[Page]: ...  # noqa: UP045


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (async_fn, list[Plan]),  # the declared type, not a Coroutine
        (functools.partial(async_fn, "q"), list[Plan]),
        (functools.partial(functools.partial(Agent().method, "q")), Plan),
        (Agent().method, Plan),
        (Agent.cm, list[Hit]),
        (Agent.sm, dt.date),
        (Agent().amethod, Page),
        (Agent(), Decimal),  # a callable object: its __call__
        (Plan, Plan),  # a class called as the step: its instance
        (takes_unknown, Plan),  # another annotation that does not resolve does not hide the return one
        (returns_unknown, None),
        (no_annotation, None),
        (returns_none, None),
        (returns_any, None),
        (returns_optional, Optional[Page]),  # noqa: UP045
        (lambda: 1, None),
        (len, None),
        (print, None),
        ("not callable", None),
        (functools.wraps(async_fn)(lambda q: None), list[Plan]),
    ],
)
def test_output_hint(fn: Any, hint: Any) -> None:
    assert output_hint(fn) == hint
    assert output_hint(fn) == hint  # cached


def test_output_hint_is_cached_weakly_per_function() -> None:
    def make() -> Any:
        def f() -> Page: ...

        return f

    f = make()
    assert output_hint(f) is Page
    assert f in codec._hints
    f.__annotations__["return"] = Plan  # the cache answers: computed once per function
    assert output_hint(f) is Page
    gc.collect()  # the functions of earlier tests in this process that are garbage go first, not counted below
    n = len(codec._hints)
    del f
    gc.collect()
    assert len(codec._hints) == n - 1


def test_a_hint_a_local_class_needs_future_annotations_to_resolve() -> None:
    """With ``from __future__ import annotations`` a class defined in a function cannot be resolved: no hint."""

    class InFunction(pydantic.BaseModel):
        a: int

    def f() -> InFunction: ...

    assert output_hint(f) is None  # the string 'InFunction' is not in the module's globals
    g = lambda: None  # noqa: E731
    g.__annotations__ = {"return": InFunction}
    assert output_hint(g) is InFunction


# --------------------------------------------------------------------- import cost
def test_importing_and_using_the_codec_on_plain_values_pulls_neither_pydantic_nor_decimal() -> None:
    code = (
        "import sys; from supervisor.core.codec import encode, decode, output_hint\n"
        "import datetime\n"
        "v, t = encode({'a': 1}, step='s'); assert t is None\n"
        "v, t = encode(datetime.date(2026, 1, 1), step='s'); assert decode(v, t, None) == datetime.date(2026, 1, 1)\n"
        "assert decode({'a': 1}, 'pydantic:x:Y', None) == {'a': 1}\n"
        "def f() -> dict[str, int]: ...\n"
        "assert decode({'a': 1}, None, output_hint(f)) == {'a': 1}\n"
        "print(sorted(m for m in ('pydantic', 'decimal', 'numpy') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# --------------------------------------------------------------------- through the SDK, in real processes
AGENT = """
import datetime as dt, os, sys
import pydantic
from supervisor import Run

class V1(pydantic.BaseModel):
    when: dt.datetime

class V2(pydantic.BaseModel):
    count: int

if os.environ.get("AGENT_VERSION") == "2":  # the code changed: the step now returns another model
    def make() -> V2:
        return V2(count=1)
else:
    def make() -> V1:
        return V1(when=dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))))

with Run.open(sys.argv[1]) as run:
    out = run.step("make", make)
    print(type(out).__name__, out.model_dump_json(), len(run.replayed))
"""


def test_an_agent_gets_its_model_back_and_a_changed_return_type_stops_it_with_exit_78(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("AGENT_SUPERVISOR_")}

    def run(version: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), str(tmp_path / "run")],
            capture_output=True, text=True, cwd=ROOT, timeout=30, env={**env, "AGENT_VERSION": version},
        )

    live = run("1")
    assert live.returncode == 0, live.stderr
    assert live.stdout.split() == ["V1", '{"when":"2026-01-01T12:00:00+02:00"}', "0"]
    rec = next(r for r in map(orjson.loads, (tmp_path / "run" / "journal.jsonl").read_bytes().splitlines())
               if r.get("kind") == "step")
    assert rec["output"] == {"when": "2026-01-01T12:00:00+02:00"} and rec["output_type"] == "pydantic:__main__:V1"
    served = run("1")
    assert served.returncode == 0 and served.stdout.split() == ["V1", '{"when":"2026-01-01T12:00:00+02:00"}', "1"]
    changed = run("2")
    assert changed.returncode == 78, changed.stderr
    err = changed.stderr.strip().splitlines()
    assert len(err) == 1 and "cannot return the recorded output of" in err[0] and "as V2" in err[0], err
    assert "output_type 'pydantic:__main__:V1'" in err[0] and "Traceback" not in changed.stderr


# -- aliases and tagged unions (what the framework adapters pass through steps)


class Aliased(pydantic.BaseModel):
    async_: bool | None = pydantic.Field(default=None, alias="async")
    name: str


def test_a_pydantic_model_with_aliases_round_trips_and_old_journals_still_read() -> None:
    m = Aliased.model_validate({"async": True, "name": "n"})
    value, otype = encode(m, step="s")
    assert value == {"async": True, "name": "n"}  # written by alias: what the model reads by default
    assert decode(value, otype, None) == m and decode(value, None, Aliased) == m
    # a journal written before aliases were kept has field names: read as well
    assert decode({"async_": True, "name": "n"}, otype, None) == m


@dataclasses.dataclass
class CallPart:
    name: str
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    part_kind: Literal["call"] = "call"


@dataclasses.dataclass
class SearchCallPart(CallPart):  # fits any CallPart's fields: only its tag tells it apart
    part_kind: Literal["search-call"] = "search-call"  # type: ignore[assignment]


@dataclasses.dataclass
class TextPart:
    content: str = ""
    part_kind: Literal["text"] = "text"


@dataclasses.dataclass
class Response:
    parts: list[Annotated[SearchCallPart | TextPart | CallPart, "tagged by part_kind"]]


def test_a_tagged_union_of_dataclasses_decodes_by_its_tag_field() -> None:
    r = Response([CallPart("x", {"a": 1}), TextPart("hi"), SearchCallPart("q")])
    value, otype = encode(r, step="s")
    for back in (decode(value, otype, None), decode(value, None, Response)):
        assert [type(p) for p in back.parts] == [CallPart, TextPart, SearchCallPart]
        assert back == r
