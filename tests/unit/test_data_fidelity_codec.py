"""Issue 28 at the codec's and the journal writer's level: the output_type forms for keys that are not strings
(``dict[K,T]``, ``any[...]``), what older readers make of them, and which free text the writer escapes."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import codec
from supervisor.core import journal_writer as journal
from supervisor.core.codec import decode, encode


class Color(enum.Enum):
    RED = "red"


class Num(enum.Enum):
    ONE = 1


NOW = dt.datetime(2026, 11, 30, 13, 45, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))


def on_disk(value: Any) -> tuple[Any, str | None]:
    out, otype = encode(value, step="s")
    return orjson.loads(orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS)), otype


def key_types(v: Any) -> Any:
    if isinstance(v, dict):
        return [(type(k), key_types(x)) for k, x in v.items()]
    if isinstance(v, (list, tuple)):
        return [key_types(x) for x in v]
    return type(v)


@pytest.mark.parametrize(
    ("value", "otype"),
    [
        ({1: "a"}, "dict[int,json]"),
        ({-2.5: "a"}, "dict[float,json]"),
        ({False: 1}, "dict[bool,json]"),
        ({None: 1}, "dict[null,json]"),
        ({NOW: 1}, "dict[datetime,json]"),
        ({NOW.date(): NOW}, "dict[date,datetime]"),
        ({NOW.timetz(): 1}, "dict[time,json]"),
        ({uuid.UUID(int=1): [1]}, "dict[uuid,json]"),
        ({Color.RED: 1}, f"dict[enum:{__name__}:Color,json]"),
        ({Num.ONE: 1}, f"dict[enum:{__name__}:Num,json]"),
        ({"a": {1: "x"}}, "dict[dict[int,json]]"),
        ([{1: "a"}, {}, None], "list[dict[int,json]?]"),
        ([1, {"k": {3: 4}}], "list[any[dict[dict[int,json]]]]"),
        ({"n": 1, "m": [{2: "b"}]}, "dict[any[list[dict[int,json]]]]"),
        ([[1], [{1: "a"}], {2: "b"}], "list[any[list[any[dict[int,json]]],dict[int,json]]]"),
    ],
)
def test_keys_come_back_by_the_output_type_alone(value: Any, otype: str) -> None:
    out, recorded = on_disk(value)
    assert recorded == otype
    back = decode(out, recorded, None)
    assert back == value and key_types(back) == key_types(value)


def test_the_json_on_disk_is_what_orjson_writes_for_non_string_keys() -> None:
    """Only the output_type is new: the output's bytes are the ones written before (a public format)."""
    value = [1, {"k": {3: 4}}, {"j": {5: None}}]
    data, otype = codec.encode_bytes(value, step="s")
    assert data == orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS) and otype is not None


def test_a_hint_that_says_nothing_of_the_keys_leaves_them_to_the_output_type() -> None:
    from collections import Counter, OrderedDict
    from collections.abc import Mapping

    out, otype = on_disk({1: NOW})
    for hint in (dict, dict[Any, Any], Mapping[Any, dt.datetime], Counter, OrderedDict):
        back = decode(out, otype, hint)
        assert back == {1: NOW} and type(next(iter(back))) is int, hint
    assert decode(out, otype, dict[int, dt.datetime]) == {1: NOW}
    assert decode(out, otype, dict[str, str]) == {"1": NOW.isoformat()}  # the hint wins: str keys, as it says
    assert decode(out, otype, list[int] | dict[int, dt.datetime]) == {1: NOW}  # a union: by the recorded head


def test_an_older_reader_returns_the_new_forms_as_json_and_a_newer_form_is_ignored() -> None:
    """The forms are built so that a reader that does not know them parses them as json (the output as is)."""
    for otype in ("dict[int,json]", "any[dict[int,json]]", "list[any[dict[int,json]]]", "dict[null,datetime]"):
        assert codec._parse(otype) != ("json",)
    for bad in ("dict[int,json", "dict[long,json]", "any[datetime]", "any[list[json],tuple[json]]", "any[]", "dict[,json]"):
        assert decode({"1": "a"}, bad, None) == {"1": "a"}, bad


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (float("nan"), "output is nan"),
        ([1.0, float("-inf")], "output[1] is -inf"),
        ({"a": [{"b": float("inf")}]}, "output['a'][0]['b'] is inf"),
        ({"a": (1, None, float("nan"))}, "output['a'][2] is nan"),  # a tuple beside a null: walked
        ({"t": NOW, "x": [float("nan")]}, "output['x'][0] is nan"),
        ({1: float("nan")}, "output[1] is nan"),
        ({float("inf"): 1}, "a key of output is inf"),
    ],
)
def test_encode_refuses_nan_and_infinity_where_they_are(value: Any, where: str) -> None:
    with pytest.raises(ValueError) as exc:
        encode(value, step="s")
    assert str(exc.value).startswith("step 's' returned a value the journal cannot hold exactly: " + where)


def test_plain_json_with_nulls_is_still_the_fast_path() -> None:
    value = {"a": None, "b": [1.5, None], "c": (1, None), "d": uuid.UUID(int=1)}
    out, otype = encode(value, step="s")
    assert out is value and otype is None


def test_the_writer_escapes_lone_surrogates_in_free_text_only(tmp_path: Path) -> None:
    with journal.JournalWriter(tmp_path) as w:
        w.append({"kind": "note", "message": "m\ud800", "field": {"k\udcff": ["v\ud800"]}}, sync=False)
        w.append({"kind": "step", "step": "s", "pos": 0, "output": 1, "error_free": "x\ud800"}, sync=False)
        for rec in (
            {"kind": "begin", "step": "s\ud800", "pos": 0},
            {"kind": "begin", "step": "s", "pos": 0, "inputs": {"args": ["\ud800"]}},
            {"kind": "step", "step": "s", "pos": 0, "output": orjson.Fragment(b"1"), "state_patch": [
                {"op": "add", "path": "/a", "value": "\ud800"}]},
        ):
            with pytest.raises(TypeError):
                w.append(rec, sync=False)  # what a resume matches or compares is never changed: the SDK names it
    lines = [orjson.loads(x) for x in (tmp_path / "journal.jsonl").read_bytes().splitlines()]
    assert lines[0]["message"] == "m\\ud800" and lines[0]["field"] == {"k\\udcff": ["v\\ud800"]}
    assert lines[1]["error_free"] == "x\\ud800" and len(lines) == 2
