"""Benchmark of the typed-output codec (not a test: prints figures, asserts nothing).

    .venv/bin/python tests/bench/bench_codec.py [--number 20000]

Every figure is printed with its floor measured in the same run: ``encode`` of a plain
output against ``orjson.dumps`` of it (the journal writer dumps it anyway, so the codec's
share is what it adds per step), ``encode`` of a pydantic model against
``model_dump(mode="json")`` (the work any encoding of it must do), and ``decode`` against
``model_validate_json`` / the dataclass constructor. Best of 5 rounds (the machine is shared).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import timeit
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from supervisor.core.codec import decode, encode, output_hint

OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY  # the journal writer's
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@dataclasses.dataclass
class Hit:
    url: str
    seen: dt.datetime
    score: float


@dataclasses.dataclass
class Page:
    query: str
    hits: list[Hit]


def best(fn: Any, number: int) -> float:
    """Seconds per call, best of 5 rounds."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def line(what: str, t: float, floor_what: str, floor: float) -> None:
    print(f"  {what:<44} {t * 1e6:8.2f} us   {floor_what:<36} {floor * 1e6:8.2f} us   x{t / floor:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=20000)
    n = ap.parse_args().number

    small = {"value": 42}
    medium = {
        "query": "q1",
        "hits": [
            {"url": f"https://example.com/{i}", "title": "t" * 40, "score": i / 7, "tags": ["a", "b"]}
            for i in range(10)
        ],
        "meta": {"model": "m", "tokens": 1234, "cached": None, "ok": True},
    }
    print(f"plain JSON outputs (the fast path: output_type None), {n} calls")
    for name, v in (
        ("small dict " + orjson.dumps(small).decode(), small),
        (f"dict of {len(orjson.dumps(medium))} bytes", medium),
    ):
        line(
            f"encode {name}",
            best(lambda v=v: encode(v, step="s"), n),
            "orjson.dumps (the floor)",
            best(lambda v=v: orjson.dumps(v, option=OPTS), n),
        )
    line(
        "encode 'a string'",
        best(lambda: encode("a string", step="s"), n),
        "orjson.dumps",
        best(lambda: orjson.dumps("a string"), n),
    )
    line(
        "decode small dict, no hint",
        best(lambda: decode(small, None, None), n),
        "a function call returning it",
        best(lambda: (lambda v: v)(small), n),
    )
    hint = dict[str, int]
    line(
        "decode small dict, hint dict[str, int]",
        best(lambda: decode(small, None, hint), n),
        "a function call returning it",
        best(lambda: (lambda v: v)(small), n),
    )

    def fn() -> list[Page]: ...

    line(
        "output_hint(fn) (cached)",
        best(lambda: output_hint(fn), n),
        "getattr(fn, '__annotations__')",
        best(lambda: fn.__annotations__, n),
    )

    page = Page("q1", [Hit(f"https://example.com/{i}", NOW, i / 7) for i in range(10)])
    pout, ptype = encode(page, step="s")
    print(f"\ndataclass Page with 10 Hit (datetime fields), output_type {ptype!r}")
    line(
        "encode",
        best(lambda: encode(page, step="s"), n // 10),
        "orjson.dumps(page) (native, untyped)",
        best(lambda: orjson.dumps(page, option=OPTS), n // 10),
    )
    line(
        "decode by output_type",
        best(lambda: decode(pout, ptype, None), n // 10),
        "Page(...) built by hand",
        best(
            lambda: Page(
                pout["query"], [Hit(h["url"], dt.datetime.fromisoformat(h["seen"]), h["score"]) for h in pout["hits"]]
            ),
            n // 10,
        ),
    )

    try:
        import pydantic
    except ImportError:
        print("\npydantic not installed: .venv/bin/pip install 'pydantic>=2'")
        return

    class Step(pydantic.BaseModel):
        text: str
        due: dt.datetime

    class Plan(pydantic.BaseModel):
        goal: str
        steps: list[Step]
        budget: Decimal
        created: dt.datetime

    plan = Plan(
        goal="g" * 30, steps=[Step(text=f"step {i}", due=NOW) for i in range(10)], budget=Decimal("12.50"), created=NOW
    )
    mout, mtype = encode(plan, step="s")
    mbytes = orjson.dumps(mout)
    print(f"\npydantic Plan with 10 Step (datetime fields), output_type {mtype!r}")
    line(
        "encode",
        best(lambda: encode(plan, step="s"), n // 10),
        "model_dump(mode='json') (the floor)",
        best(lambda: plan.model_dump(mode="json"), n // 10),
    )
    line(
        "decode with the hint",
        best(lambda: decode(mout, mtype, Plan), n // 10),
        "model_validate(dump)",
        best(lambda: Plan.model_validate(mout), n // 10),
    )
    line(
        "decode with the hint",
        best(lambda: decode(mout, mtype, Plan), n // 10),
        "model_validate_json(bytes)",
        best(lambda: Plan.model_validate_json(mbytes), n // 10),
    )


if __name__ == "__main__":
    main()
