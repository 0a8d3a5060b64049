"""Issue 28, "Data changed": what a resume gives back is exactly what the live run had, or the step fails with a
clear error naming the step and the place; a value is never changed silently.

Each test runs its steps live, then the same code again in a fresh ``Run.open`` on the same run directory (the
steps are served from the journal's file), and compares what both returned, type and value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor import Run


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Reading:
    label: str
    value: float


@dataclasses.dataclass
class Index:
    by_id: dict  # type: ignore[type-arg]  # a bare dict: its keys are read back as they were recorded


NOW = dt.datetime(2026, 11, 30, 13, 45, 1, tzinfo=dt.UTC)


def journal(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "journal.jsonl").read_bytes().splitlines()]


def step_records(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in journal(run_dir) if r.get("kind") == "step"]


def shape(v: Any) -> Any:
    """A value's types all the way down (keys included): ``==`` says ``{1: 'a'} == {1.0: 'a'}`` and ``(1,) != [1]``
    only at the top."""
    if isinstance(v, dict):
        return (type(v), [(type(k), k, shape(x)) for k, x in v.items()])
    if isinstance(v, (list, tuple, set, frozenset)):
        return (type(v), [shape(x) for x in v])
    return type(v)


def live_then_resumed(run_dir: Path, script: Callable[[Run], list[Any]]) -> tuple[list[Any], list[Any]]:
    """``script`` run live, then again in a fresh ``Run.open`` (every step served); what each returned."""
    with Run.open(run_dir) as run:
        live = script(run)
        n = len(run.executed)
    with Run.open(run_dir) as run:
        resumed = script(run)
        assert len(run.replayed) == n and len(run.executed) == 0, "the resume served every step"
    return live, resumed


def assert_exact(live: list[Any], resumed: list[Any]) -> None:
    for a, b in zip(live, resumed, strict=True):
        assert b == a and shape(b) == shape(a), (a, b)


# ---------------------------------------------------------------------------------------- 1. NaN and Infinity
@pytest.mark.parametrize(
    ("out", "where"),
    [
        ({"scores": [1.0, 2.0, float("nan")]}, "output['scores'][2] is nan"),
        (float("inf"), "output is inf"),
        ([{"t": (1, None)}, -float("inf")], "output[1] is -inf"),  # a tuple and a null beside it: still found
        ({"when": NOW, "x": float("nan")}, "output['x'] is nan"),  # the typed path
        (Reading("t", float("nan")), "output.value is nan"),  # a dataclass field
        ({1: float("inf")}, "output[1] is inf"),  # a dict the codec types (int keys)
        ({float("nan"): 1}, "a key of output is nan"),
    ],
)
def test_a_nan_or_an_infinity_in_an_output_is_refused_at_the_step(tmp_path: Path, out: Any, where: str) -> None:
    """orjson writes them as null: a resume would return None. The step fails with a ValueError naming the step
    and the place, nothing is recorded for it, and it runs again (here with a finite value) on resume."""
    with Run.open(tmp_path) as run, pytest.raises(ValueError) as exc:
        run.step("score", lambda: out)
    msg = str(exc.value)
    assert "step 'score'" in msg and where in msg and "JSON has no NaN or Infinity" in msg
    assert "return None, or a string" in msg and "runs again on resume" in msg
    assert step_records(tmp_path) == []  # the journal holds nothing wrong: no output for the step
    live, resumed = live_then_resumed(tmp_path, lambda run: [run.step("score", lambda: {"scores": [1.0, None, -0.0]})])
    assert_exact(live, resumed)


def test_a_nan_in_run_state_is_refused_and_the_resumed_state_is_the_live_one(tmp_path: Path) -> None:
    def script(run: Run) -> list[Any]:
        if not run.resuming:
            run.state["scores"] = [0.5, float("nan")]
            with pytest.raises(ValueError) as exc:
                run.step("a", lambda: 1)
            assert "step 'a'" in str(exc.value) and "run.state['scores'][1] is nan" in str(exc.value)
            with pytest.raises(ValueError, match=r"checkpoint 'cp'.*run.state\['scores'\]\[1\] is nan"):
                run.checkpoint("cp")
            run.state["scores"][1] = None  # what the message says to do
            run.state["big"] = 1e308
        a = run.step("a", lambda: 1)
        after_a = orjson.dumps(run.state)
        run.checkpoint("cp")
        return [a, after_a, dict(run.state)]

    live, resumed = live_then_resumed(tmp_path, script)
    assert_exact(live, resumed)
    assert resumed[2] == {"scores": [0.5, None], "big": 1e308}
    for r in journal(tmp_path):
        assert b"NaN" not in orjson.dumps(r)


def test_a_lone_surrogate_in_run_state_is_refused_naming_the_place(tmp_path: Path) -> None:
    with Run.open(tmp_path) as run:
        run.state["files"] = ["ok", "a\udcffb"]
        with pytest.raises(ValueError) as exc:
            run.step("a", lambda: 1)
        assert "step 'a'" in str(exc.value) and "run.state['files'][1] holds a lone surrogate" in str(exc.value)
        run.state["files"][1] = "a?b"
        assert run.step("a", lambda: 1) == 1
    with Run.open(tmp_path) as run:
        assert run.step("a", lambda: 2) == 1 and run.state == {"files": ["ok", "a?b"]}


def test_finite_floats_and_nulls_come_back_exactly(tmp_path: Path) -> None:
    values = [0.1, -0.0, 1e-308, 5e-324, 1.7976931348623157e308, None, {"a": None, "b": [2.5, None]}, [None]]
    live, resumed = live_then_resumed(tmp_path, lambda run: [run.step(f"v{i}", lambda v=v: v) for i, v in enumerate(values)])
    assert_exact(live, resumed)


# ---------------------------------------------------------------------------------------- 2. types and keys
def test_a_top_level_uuid_enum_or_tuple_comes_back_typed_without_a_hint(tmp_path: Path) -> None:
    values: list[Any] = [uuid.UUID(int=7), Color.RED, Level.LOW, (1, "a", None), (NOW, NOW), frozenset({1, 2})]

    def script(run: Run) -> list[Any]:
        return [run.step(f"v{i}", lambda v=v: v) for i, v in enumerate(values)]  # lambdas: no annotation

    live, resumed = live_then_resumed(tmp_path, script)
    assert_exact(live, resumed)
    assert [type(x) for x in resumed] == [uuid.UUID, Color, Level, tuple, tuple, frozenset]


def test_a_top_level_uuid_comes_back_typed_from_an_async_step(tmp_path: Path) -> None:
    import asyncio

    async def fetch() -> Any:
        return uuid.UUID(int=9)

    def script(run: Run) -> list[Any]:
        return [asyncio.run(run.astep("fetch", fetch))]

    live, resumed = live_then_resumed(tmp_path, script)
    assert_exact(live, resumed)


KEYED: list[Any] = [
    {1: "a", 2: ["b"]},
    {None: "x"},
    {True: 1, False: 0},
    {1.5: "x", -0.0: "y"},
    {NOW: 1, NOW + dt.timedelta(1): 2},
    {NOW.date(): [NOW]},
    {uuid.UUID(int=1): "u"},
    {Color.RED: 1},
    {Level.LOW: "low"},
    [1, {"k": {3: 4}}],
    {"count": 3, "by_id": {1: "a"}, "tags": ["x"], "seen": None},
    {"when": "2026-01-01", "n": 2.5, "index": {10: {"ok": True}}},
    [{1: "a"}, {}, None, {2: "b"}],
    [[1], [{1: "a"}], "s"],
    ({1: 2}, "x"),
]


def test_dicts_with_keys_that_are_not_strings_come_back_exactly(tmp_path: Path) -> None:
    """JSON writes every key as a string: the output_type says the keys' type (``dict[int,json]``), also where
    such a dict sits beside values of other kinds (``list[any[dict[dict[int,json]]]]``)."""
    live, resumed = live_then_resumed(tmp_path, lambda run: [run.step(f"k{i}", lambda v=v: v) for i, v in enumerate(KEYED)])
    assert_exact(live, resumed)
    first = step_records(tmp_path)[0]
    assert first["output"] == {"1": "a", "2": ["b"]} and first["output_type"] == "dict[int,json]"  # JSON on disk


def test_keyed_dicts_with_a_return_annotation(tmp_path: Path) -> None:
    """A hint that says nothing of the keys (a bare ``dict``, ``dict[Any, ...]``, a ``Counter``) leaves them to the
    output_type; ``dict[int, str]`` converts them itself."""
    from collections import Counter

    def bare() -> dict:  # type: ignore[type-arg]
        return {1: "a"}

    def any_keys() -> dict[Any, str]:
        return {2: "b"}

    def typed() -> dict[int, str]:
        return {3: "c"}

    def counter() -> Counter[int]:
        return Counter({4: 2})

    def script(run: Run) -> list[Any]:
        return [run.step("bare", bare), run.step("any", any_keys), run.step("typed", typed), run.step("counter", counter)]

    live, resumed = live_then_resumed(tmp_path, script)
    assert_exact(live[:3], resumed[:3])
    assert resumed[3] == {4: 2} and type(next(iter(resumed[3]))) is int  # a dict (not a Counter): its keys as they were


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ({1: "a", "b": 2}, "a key of output is 'b' (str) where an earlier key is of type int"),
        ([{"a": 1}, {1: "b"}], "output[1] holds a dict whose keys are not strings"),
        ({"x": [Color.RED, {1: "b"}]}, "output['x'][1] holds a dict whose keys are not strings"),
        (Index({1: "a"}), "output.by_id holds a dict whose keys are not strings, in a field annotated dict"),
    ],
)
def test_keys_that_could_not_come_back_are_refused_at_the_step(tmp_path: Path, out: Any, says: str) -> None:
    with Run.open(tmp_path) as run, pytest.raises(TypeError) as exc:
        run.step("keys", lambda: out)
    msg = str(exc.value)
    assert msg.startswith("step 'keys' returned a value that cannot be journaled") and says in msg, msg
    assert step_records(tmp_path) == []


# ---------------------------------------------------------------------------------------- 3. surrogates and depth
def test_a_step_error_with_a_lone_surrogate_is_journaled_and_raised_as_itself(tmp_path: Path) -> None:
    """The agent gets its own exception (not an encoder's TypeError), and the failed try is journaled, its message's
    lone surrogate written as the six characters ``\\udcff``: the failure counts, and a resume runs it again."""

    def flaky() -> str:
        raise RuntimeError("bad byte \udcff in a file name")

    with pytest.raises(RuntimeError, match="bad byte"), Run.open(tmp_path, retries=0) as run:
        run.step("first", lambda: 1)
        run.step("read", flaky)
    (failed,) = [r for r in step_records(tmp_path) if "error" in r]
    assert failed["step"] == "read" and failed["error"]["type"] == "RuntimeError"
    assert failed["error"]["message"] == "bad byte \\udcff in a file name"
    assert "\\udcff" in failed["error"]["traceback"]
    with Run.open(tmp_path) as run:  # the failed step is not done: it runs again, after the served one
        assert run.step("first", lambda: 2) == 1 and run.step("read", lambda: "ok") == "ok"
        assert len(run.replayed) == 1 and len(run.executed) == 1


def test_lone_surrogates_in_an_output_inputs_or_a_name_are_errors_naming_the_step(tmp_path: Path) -> None:
    ran: list[str] = []

    def seen(x: Any) -> int:
        ran.append("inputs")
        return 1

    with Run.open(tmp_path) as run:
        with pytest.raises(ValueError) as exc:
            run.step("out", lambda: {"t": ["ok", "x\ud800"]})
        assert "step 'out'" in str(exc.value) and "output['t'][1] holds a lone surrogate" in str(exc.value)
        with pytest.raises(ValueError) as exc:
            run.step("inp", seen, "a\udcffb")
        assert "step 'inp'" in str(exc.value) and "args[0] holds a lone surrogate" in str(exc.value)
        with pytest.raises(ValueError) as exc:
            run.step("inp", seen, key={"k\ud800": 1})
        assert "a key of kwargs['key'] holds a lone surrogate" in str(exc.value)
        assert ran == []  # refused at its begin: the step did not run
        with pytest.raises(ValueError, match="the step name 'na\\\\udc80me' holds a lone surrogate"):
            run.step("na\udc80me", lambda: 1)
        run.note("note \ud800", path="/tmp/\udcff")  # free text: escaped, written
        live = run.step("fine", lambda: "text ✓")
    records = journal(tmp_path)
    assert [r["step"] for r in records if r.get("kind") == "step"] == ["fine"]
    (note,) = [r for r in records if r.get("kind") == "note"]
    assert note["message"] == "note \\ud800" and note["path"] == "/tmp/\\udcff"
    with Run.open(tmp_path) as run:
        assert run.step("fine", lambda: "changed") == live


def test_values_nested_too_deeply_are_errors_naming_the_step(tmp_path: Path) -> None:
    deep: list[Any] = []
    for _ in range(10_000):
        deep = [deep]
    ran: list[int] = []
    with Run.open(tmp_path) as run:
        with pytest.raises(TypeError) as exc:
            run.step("deep-in", lambda x: ran.append(1), deep)
        assert "step 'deep-in'" in str(exc.value) and "nested too deeply" in str(exc.value) and ran == []
        with pytest.raises(TypeError) as exc:
            run.step("deep-out", lambda: deep)
        assert "step 'deep-out'" in str(exc.value) and "nested too deeply" in str(exc.value)
        with pytest.raises(TypeError, match=r"the note 'deep' cannot be journaled: .*nested too deeply"):
            run.note("deep", value=deep)
        assert run.step("fine", lambda: 1) == 1
    assert [r["step"] for r in step_records(tmp_path)] == ["fine"]
