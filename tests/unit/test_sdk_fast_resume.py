"""Resume's sequential fast path matches a recorded step's inputs as the general path does, for every shape
of a call's inputs (none, positional, keyword, both; a recorded ``{}``), changed or not: the same outputs
served, the same steps run again (``on_changed_inputs="rerun"``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from supervisor import Run

CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    ((1,), {}),
    ((), {"a": 1}),
    ((1, "x"), {"b": [1, 2]}),
    (([],), {}),
    ((), {"a": None}),
]


def _agent(run: Run, general: bool, changed: set[int]) -> list[Any]:
    step = run.with_options().step if general else run.step  # with_options: the general path (_step, _enter)
    out = []
    for i, (args, kwargs) in enumerate(CALLS * 2):
        if i in changed:  # the same shape, another value; or another shape
            args, kwargs = (args + (0,), kwargs) if i % 2 else (args, {**kwargs, "z": 0})
        out.append(step(f"s:{i}", lambda *a, i=i, **k: {"i": i, "a": list(a), "k": k}, *args, **kwargs))
    return [out, len(run.replayed), len(run.executed)]


def test_fast_path_matches_inputs_as_the_general_path(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with Run.open(src) as run:
        _agent(run, general=True, changed=set())
    for changed in (set(), {1, 2, 5, 8}, {0, 3}):
        results = []
        for general in (False, True):
            d = tmp_path / f"resume-{general}-{len(changed)}"
            shutil.copytree(src, d)
            with Run.open(d, on_changed_inputs="rerun") as run:
                results.append(_agent(run, general, changed))
        assert results[0] == results[1], changed
        assert results[0][1:] == [len(CALLS) * 2 - len(changed), len(changed)], results[0]  # the changed ones ran again
