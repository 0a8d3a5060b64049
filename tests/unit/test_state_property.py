"""The state patch is exact: the state a patch rebuilds dumps to the same bytes as the state it was made from.

``jsonpatch`` (a separate RFC 6902 implementation) applies every patch too, as an
oracle for the patch itself. Values mix ints, floats and bools that Python's
``==`` calls equal (``1 == 1.0 == True``), and lists grow and shrink anywhere.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.core.state import apply_patch, diff, json_copy, make_patch, same

NSK = orjson.OPT_NON_STR_KEYS

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 1.0, True, False, 0.0, -0.0])
    | st.text(max_size=3)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=25,
)
states = st.dictionaries(st.text(max_size=3), json_values, max_size=5)


def dumps(v: Any) -> bytes:
    return orjson.dumps(v, option=NSK)


@st.composite
def edited(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with a few edits: list items removed or inserted anywhere, values swapped for look-alikes."""
    doc = copy.deepcopy(doc)
    containers: list[Any] = []

    def collect(v: Any) -> None:
        if isinstance(v, (dict, list)):
            containers.append(v)
            for c in v.values() if isinstance(v, dict) else v:
                collect(c)

    collect(doc)
    for _ in range(draw(st.integers(0, 4))):
        c = draw(st.sampled_from(containers))
        if isinstance(c, list):
            op = draw(st.sampled_from(["pop", "insert", "swap", "clear"]))
            if op == "pop" and c:
                del c[draw(st.integers(0, len(c) - 1)) : draw(st.integers(0, len(c)))]
            elif op == "insert":
                c.insert(draw(st.integers(0, len(c))), draw(scalars))
            elif op == "swap" and c:
                i = draw(st.integers(0, len(c) - 1))
                c[i] = draw(st.sampled_from([1, 1.0, True, 0, 0.0, -0.0, False, None]))
            elif op == "clear":
                c.clear()
        elif c:
            k = draw(st.sampled_from(sorted(c)))
            if draw(st.booleans()):
                del c[k]
            else:
                c[k] = draw(st.sampled_from([1, 1.0, True, 0, -0.0, [1], [True], [1.0], {}]))
        else:
            c[draw(st.text(max_size=2))] = draw(scalars)
    return doc


def check(a: Any, b: Any) -> list[dict[str, Any]]:
    """Patch ``a`` to ``b``: both appliers rebuild ``b`` byte for byte; an empty patch means the same bytes."""
    patch = orjson.loads(dumps(make_patch(a, b)))  # as the journal holds it
    ours = apply_patch(json_copy(a), patch)
    assert dumps(ours) == dumps(b), (a, b, patch)
    oracle = jsonpatch.apply_patch(json_copy(a), patch)
    assert dumps(oracle) == dumps(b), (a, b, patch)
    assert (patch == []) == (dumps(a) == dumps(b)), (a, b, patch)
    assert same(a, b) == (dumps(a) == dumps(b))
    if patch:  # the SDK's entry when it knows the dumps differ: the same patch without comparing first
        assert orjson.loads(dumps(make_patch(a, b, changed=True))) == patch
    sort = NSK | orjson.OPT_SORT_KEYS  # a diff for people does not show a change of key order
    assert (diff(a, b) == []) == (orjson.dumps(a, option=sort) == orjson.dumps(b, option=sort))
    return patch


@settings(max_examples=400, deadline=None)
@given(a=states, b=states)
def test_patch_between_any_two_states_is_exact(a: dict[str, Any], b: dict[str, Any]) -> None:
    check(a, b)


@settings(max_examples=600, deadline=None)
@given(data=st.data(), a=states)
def test_patch_of_an_edit_is_exact(data: st.DataObject, a: dict[str, Any]) -> None:
    b = data.draw(edited(a))
    check(a, b)


@settings(max_examples=200, deadline=None)
@given(a=st.lists(scalars, max_size=30), i=st.integers(0, 40), j=st.integers(0, 40))
def test_removing_a_slice_of_a_list_writes_only_removes(a: list[Any], i: int, j: int) -> None:
    lo, hi = sorted((min(i, len(a)), min(j, len(a))))
    b = a[:lo] + a[hi:]
    patch = check({"l": a}, {"l": b})
    assert all(op["op"] == "remove" for op in patch)
    assert len(patch) <= hi - lo


@settings(max_examples=200, deadline=None)
@given(a=st.lists(st.sampled_from([0, 1, 1.0, True, "x", [1], {"k": 1}]), min_size=9, max_size=120),
       i=st.integers(0, 200), new=st.sampled_from([1, 1.0, True, -0.0, "y", [True], {"k": 1.0}]), grow=st.integers(0, 2))
def test_long_lists_edited_anywhere(a: list[Any], i: int, new: Any, grow: int) -> None:
    # the common prefix and suffix of long lists are found by halving (slices compared at C speed)
    b = list(a)
    i %= len(b)
    if grow == 0:
        b[i] = new
    elif grow == 1:
        b.insert(i, new)
    else:
        del b[i]
    patch = check({"l": a}, {"l": b})
    assert make_patch({"l": a}, {"l": tuple(b)}) == make_patch({"l": a}, {"l": b}) == patch


def test_look_alike_values_are_changes() -> None:
    for old, new in [(1, True), (1, 1.0), ([1], [True]), (0.0, -0.0), (False, 0), ({"a": 1}, {"a": 1.0})]:
        patch = check({"v": old}, {"v": new})
        assert patch, (old, new)
    assert make_patch({"v": [1, 2]}, {"v": (1, 2)}) == []  # a tuple is the same JSON as a list


def test_key_order_is_kept() -> None:
    a = {"x": 1, "k": {"deep": [1]}, "y": 2, "z": 3}
    b = {"x": 1, "y": 2, "z": 3, "k": {"deep": [1]}}  # k deleted and set again: it moved to the end
    assert check(a, b) == [{"op": "remove", "path": "/k"}, {"op": "add", "path": "/k", "value": {"deep": [1]}}]
    assert check({"a": 1, "b": 2}, {"b": 2, "a": 1, "c": 3}) == [
        {"op": "remove", "path": "/a"}, {"op": "add", "path": "/a", "value": 1}, {"op": "add", "path": "/c", "value": 3}
    ]


def test_pop0_of_a_big_queue_is_one_remove() -> None:
    queue = [{"url": f"https://example.com/{i}", "depth": i % 3} for i in range(5000)]
    a = {"queue": queue, "seen": 0}
    b = {"queue": queue[1:], "seen": 0}
    patch = check(a, b)
    assert patch == [{"op": "remove", "path": "/queue/0"}]
    assert len(dumps(patch)) < 40
    assert check(a, {"queue": queue[:-1], "seen": 0}) == [{"op": "remove", "path": "/queue/4999"}]
    assert check(a, {"queue": [queue[0], *queue[2:]], "seen": 0}) == [{"op": "remove", "path": "/queue/1"}]
    assert check(a, {"queue": [{"new": 1}, *queue], "seen": 0}) == [{"op": "add", "path": "/queue/0", "value": {"new": 1}}]


@settings(max_examples=200, deadline=None)
@given(
    a=states,
    extra=st.dictionaries(st.integers(-5, 5) | st.booleans() | st.none() | st.floats(-2, 2, allow_nan=False), scalars, max_size=4),
)
def test_non_string_keys_become_json_strings_in_place(a: dict[str, Any], extra: dict[Any, Any]) -> None:
    """JSON's rule: the state's keys are converted to JSON's strings, in the agent's own dicts, as a patch is made."""
    b = copy.deepcopy(a)
    inner: dict[Any, Any] = dict(extra)
    b["inner"] = inner
    b.update(extra)
    want = dumps(b)  # what orjson writes for the state with its original keys
    patch = orjson.loads(dumps(make_patch(a, b, fix_keys=True)))
    assert b["inner"] is inner  # the agent's dict is converted in place, not replaced
    assert all(type(k) is str for k in b) and all(type(k) is str for k in inner)
    got = apply_patch(json_copy(a), patch)
    assert dumps(got) == dumps(b) == dumps(orjson.loads(want))  # the state in memory is the state a resume gives
    assert dumps(jsonpatch.apply_patch(json_copy(a), patch)) == dumps(b)
    assert make_patch(got, b, fix_keys=True) == []


def test_an_int_key_is_not_a_list_append() -> None:
    a: dict[str, Any] = {"by_id": {}}
    b: dict[str, Any] = {"by_id": {7: "seven"}}
    patch = make_patch(a, b, fix_keys=True)
    assert patch == [{"op": "add", "path": "/by_id/7", "value": "seven"}]
    assert b == {"by_id": {"7": "seven"}}
    assert apply_patch(json_copy(a), patch) == {"by_id": {"7": "seven"}}


mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "pop0", "pop", "insert", "del", "intkey", "tuple", "move", "nested"]),
        st.sampled_from(["a", "b", "q"]),
        st.sampled_from([0, 1, 1.0, True, False, -0.0, 0.0, None, "s", [1], [True], {"k": 1}]),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=12,
)


def _mutate(state: dict[Any, Any], op: str, key: str, value: Any, i: int) -> None:
    q = state.setdefault("q", [1, 2.0, True, "x", None, 5])
    if op == "set":
        state[key] = copy.deepcopy(value)
    elif op == "pop0" and isinstance(q, list) and q:
        q.pop(0)
    elif op == "pop" and isinstance(q, list) and q:
        q.pop(min(i, len(q) - 1))
    elif op == "insert" and isinstance(q, list):
        q.insert(i, copy.deepcopy(value))
    elif op == "del":
        state.pop(key, None)
    elif op == "intkey":
        state.setdefault("by_id", {})[i] = copy.deepcopy(value)
    elif op == "tuple":
        state[key] = (value, i)
    elif op == "move" and key in state:
        state[key] = state.pop(key)  # the key moves to the end
    elif op == "nested":
        state.setdefault("n", {"l": []})["l"].append({i: value})


def _record(base: Any, ops: list[tuple[str, str, Any, int]]) -> list[bytes]:
    """Run the ops as steps whose functions change ``run.state``; the state's bytes after each step."""
    from supervisor import Run

    had: list[bytes] = []
    with Run.open(base / "run") as run:
        for n, (op, key, value, i) in enumerate(ops):
            run.step(f"s{n}", _mutate, run.state, op, key, value, i)
            assert all(type(k) is str for k in run.state.get("by_id", {}))  # JSON's keys, in memory too
            had.append(dumps(run.state))
    return had


@settings(max_examples=40, deadline=None)
@given(ops=mutations)
def test_the_sdk_journal_rebuilds_each_step_state_byte_for_byte(ops: list[tuple[str, str, Any, int]]) -> None:
    """Step functions change ``run.state``; the state the journal gives at each step record is the agent's, as JSON bytes."""
    import shutil
    import tempfile
    from pathlib import Path

    from supervisor.core.history import load, state_at

    base = Path(tempfile.mkdtemp(prefix="stateprop-"))
    try:
        had = _record(base, ops)
        h = load(base / "run")
        seqs = [r["seq"] for r in h.steps]
        assert len(seqs) == len(ops)
        for seq, want in zip(seqs, had, strict=False):
            assert dumps(state_at(base / "run", h, seq)) == want
    finally:
        shutil.rmtree(base, ignore_errors=True)


@settings(max_examples=40, deadline=None)
@given(ops=mutations)
def test_the_sdk_resumes_each_step_state_byte_for_byte(ops: list[tuple[str, str, Any, int]]) -> None:
    """On resume the step functions do not run: the patches alone bring the state back, byte for byte."""
    import shutil
    import tempfile
    from pathlib import Path

    from supervisor import Run

    base = Path(tempfile.mkdtemp(prefix="stateprop-"))
    try:
        had = _record(base, ops)
        with Run.open(base / "run") as again:
            for n in range(len(ops)):
                again.step(f"s{n}", lambda *a: None)  # replayed: the function is not called
                assert dumps(again.state) == had[n], n
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_two_keys_that_become_one_string_keep_what_json_loads_keeps() -> None:
    for d in ({1: "a", "1": "b"}, {"1": "b", 1: "a", 2: "c"}, {None: 1, "null": 2, True: 3}):
        b = {"d": dict(d)}
        want = orjson.loads(dumps(b))  # orjson writes both keys; loading keeps the first position, the last value
        patch = make_patch({}, b, fix_keys=True)
        assert list(b["d"].items()) == list(want["d"].items())  # the agent's dict, converted in place
        assert dumps(apply_patch({}, orjson.loads(dumps(patch)))) == dumps(want)
