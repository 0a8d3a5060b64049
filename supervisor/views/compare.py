"""Two runs side by side: their effective histories aligned by step identity, a verdict per step, and totals.

A step's identity is the one resume uses (docs/sdk.md, "Async and concurrent steps": matching on resume and nested steps): its name and
occurrence ``k``, then its parent's identity for a nested step. Both runs' calls are taken in call order
(position); a step both runs have is one row, wherever it sits; a step only one run has is placed after the
common steps that precede it in that run (so an inserted step shows where it was inserted). Each row says:
``same``, ``inputs differ``, ``output differs``, ``failed in A``/``failed in B``, ``only in A``/``only in B``.
The first row that is not ``same`` is the first divergence.

For ``agent-supervisor compare`` and the dashboard's compare view; Textual-free (``views``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ..core import wire
from ..core.history import History, load
from ..core.llm_calls import read_calls
from ..core.records import Kind, Record, step_name
from ..core.usage import Tokens, run_usage

__all__ = ["SAME", "Call", "Comparison", "Row", "Totals", "calls_of", "compare", "compare_runs"]

SAME = "same"
INPUTS = "inputs differ"
OUTPUT = "output differs"
ONLY_A = "only in A"
ONLY_B = "only in B"
FAILED_A = "failed in A"
FAILED_B = "failed in B"

Ident = tuple[Any, ...]
"""``(name, k)``, then the parent's identity for a nested step."""


@dataclass
class Call:
    """One step call of a run's effective history, as it ended there."""

    ident: Ident
    pos: int
    rec: Record
    """Its last record: the committed step, the last failed try, or its ``begin`` (it never finished)."""
    failed_tries: int = 0

    @property
    def name(self) -> str:
        return str(self.ident[0])

    @property
    def path(self) -> str:
        """The names of its enclosing steps, then its own: ``task > tool``."""
        names, i = [self.ident[0]], self.ident
        while len(i) == 3:
            i = i[2]
            names.append(i[0])
        return " > ".join(str(n) for n in reversed(names))

    @property
    def ok(self) -> bool:
        return self.rec.get("kind", wire.STEP) == wire.STEP and self.rec.get("error") is None

    @property
    def error(self) -> str:
        """Why it did not succeed (``""`` if it did)."""
        if self.ok:
            return ""
        err = self.rec.get("error")
        if err is None:
            return "did not finish"
        if isinstance(err, dict):
            return f"{err.get('type', 'error')}: {err.get('message', '')}".strip()
        return str(err)


@dataclass
class Row:
    """One aligned step: ``a`` and/or ``b``, and what differs."""

    verdict: str
    a: Call | None
    b: Call | None

    @property
    def name(self) -> str:
        c = self.a or self.b
        assert c is not None
        return c.path

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "verdict": self.verdict,
            "pos_a": None if self.a is None else self.a.pos,
            "pos_b": None if self.b is None else self.b.pos,
            "differs": _differs(self),
        }


@dataclass
class Totals:
    """A run's figures for the side-by-side totals."""

    steps: int = 0
    failures: int = 0
    time_s: float | None = None
    tokens: Tokens = field(default_factory=Tokens)
    cost_usd: float | None = None
    unpriced: int = 0
    attempts: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "failures": self.failures, "time_s": self.time_s,
                "input_tokens": self.tokens.input, "output_tokens": self.tokens.output,
                "cached_tokens": self.tokens.cached, "cost_usd": self.cost_usd, "unpriced": self.unpriced,
                "attempts": self.attempts}


@dataclass
class Comparison:
    a: Path
    b: Path
    rows: list[Row]
    totals_a: Totals
    totals_b: Totals

    @property
    def same(self) -> bool:
        return all(r.verdict == SAME for r in self.rows)

    @property
    def first_divergence(self) -> Row | None:
        return next((r for r in self.rows if r.verdict != SAME), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "a": str(self.a), "b": str(self.b), "same": self.same,
            "first_divergence": None if first is None else first.to_json(),
            "counts": {v: sum(1 for r in self.rows if r.verdict == v)
                       for v in (SAME, INPUTS, OUTPUT, FAILED_A, FAILED_B, ONLY_A, ONLY_B)},
            "totals": {"a": self.totals_a.to_json(), "b": self.totals_b.to_json()},
            "steps": [r.to_json() for r in self.rows],
        }


# ---------------------------------------------------------------------------------- a run's calls
def calls_of(h: History) -> list[Call]:
    """The step calls of a folded run's effective history in call order, each as it ended.

    Attempts whose ``start`` says ``numbering: "name-k"`` carry each call's ``k`` (and a nested call its
    ``parent``); for other journals (hand-written, other languages) a call is its position and name, and ``k``
    counts the earlier calls with the same name.
    """
    numbered = {e.get("attempt") for e in h.entries
                if type(e) is dict and e.get("kind") == Kind.START and e.get("numbering") == "name-k"}
    by_ident: dict[Ident, Call] = {}
    by_pos: dict[tuple[int, str], Call] = {}
    begins: dict[Any, Ident] = {}
    for r in h.effective:
        kind = r.get("kind", wire.STEP)
        if kind not in (wire.BEGIN, wire.STEP) or r.get("was"):
            continue
        pos = int(r.get("pos", -1))
        if r.get("attempt") in numbered:
            ident: Ident = (step_name(r), int(r.get("k") or 0))
            if "parent" in r:
                up = begins.get(r["parent"])
                if up is None:
                    continue  # its parent's begin is not on the effective history
                ident = (*ident, up)
            if kind == wire.BEGIN and "id" in r:
                begins[r["id"]] = ident
            _take(by_ident, ident, ident, pos, r, kind)
        else:
            # a call is its position and name: a failed call whose position the next call took stays its own
            _take(by_pos, (pos, step_name(r)), (step_name(r), 0), pos, r, kind)  # its k: below
    counts: dict[str, int] = {}
    for c in sorted(by_pos.values(), key=lambda c: c.pos):  # unnumbered calls: k from the positions
        name = step_name(c.rec)
        c.ident = (name, counts.get(name, 0))
        counts[name] = counts.get(name, 0) + 1
        by_ident.setdefault(c.ident, c)
    return sorted(by_ident.values(), key=lambda c: c.pos)


def _take(calls: dict[Any, Call], key: Any, ident: Ident, pos: int, r: Record, kind: str) -> None:
    """A call's record, in file order: a later begin (a re-run after a crash) or failed try replaces an
    unfinished or failed one; a later commit replaces any (as resume serves the last: ``fork --live``)."""
    old = calls.get(key)
    if old is None:
        calls[key] = Call(ident, pos, r, int(kind == wire.STEP and r.get("error") is not None))
        return
    if kind == wire.STEP and r.get("error") is not None:
        old.failed_tries += 1
    if old.ok and not (kind == wire.STEP and r.get("error") is None):
        return  # committed: only a later commit of the same call (a fork that ran it again) replaces it
    old.rec, old.pos = r, pos


# ---------------------------------------------------------------------------------- alignment
def _align(a: list[Call], b: list[Call]) -> Iterator[tuple[Call | None, Call | None]]:
    """Pairs by identity in A's order; a step only one run has comes after the common steps before it there (A's
    before B's at one place, as ``diff`` puts deletions before insertions)."""
    in_a = {c.ident for c in a}
    b_by = {c.ident: c for c in b}
    done: set[Ident] = set()
    i = j = 0
    while i < len(a) or j < len(b):
        if j < len(b) and b[j].ident in done:
            j += 1
        elif i < len(a) and a[i].ident not in b_by:
            yield a[i], None
            i += 1
        elif j < len(b) and b[j].ident not in in_a:
            yield None, b[j]
            j += 1
        elif i < len(a):
            done.add(a[i].ident)
            yield a[i], b_by[a[i].ident]
            i += 1
        else:  # pragma: no cover - every B step A has is paired when A's comes
            j += 1


def _verdict(a: Call | None, b: Call | None) -> str:
    if a is None:
        return ONLY_B
    if b is None:
        return ONLY_A
    if a.ok != b.ok:
        return FAILED_B if a.ok else FAILED_A
    if not _same_inputs(a.rec, b.rec):
        return INPUTS
    if a.ok:
        return SAME if _canon(a.rec.get("output")) == _canon(b.rec.get("output")) else OUTPUT
    return SAME if a.error == b.error else OUTPUT


def _same_inputs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if "inputs" in a and "inputs" in b:
        return _canon(a["inputs"]) == _canon(b["inputs"])
    ha, hb = a.get("inputs_hash"), b.get("inputs_hash")
    return ha is None or hb is None or ha == hb


def _canon(v: Any) -> bytes:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)


def _differs(row: Row) -> list[str]:
    """Which of ``inputs``, ``output``, ``error`` differ between the row's two calls."""
    a, b = row.a, row.b
    if a is None or b is None:
        return []
    out = []
    if not _same_inputs(a.rec, b.rec):
        out.append("inputs")
    if a.ok and b.ok and _canon(a.rec.get("output")) != _canon(b.rec.get("output")):
        out.append("output")
    if a.error != b.error:
        out.append("error")
    return out


# ---------------------------------------------------------------------------------- totals
def _ts(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _totals(h: History, calls: list[Call], price: Callable[[Mapping[str, Any]], Any] | None,
            llm: list[Mapping[str, Any]]) -> Totals:
    stamps = [t for t in (_ts(e.get("ts")) for e in h.entries if type(e) is dict) if t is not None]
    u = run_usage(h, price, llm)
    return Totals(
        steps=sum(1 for c in calls if c.ok),
        failures=sum(c.failed_tries for c in calls) + sum(1 for c in calls if not c.ok and c.rec.get("error") is None),
        time_s=round(max(stamps) - min(stamps), 3) if stamps else None,
        tokens=u.tokens, cost_usd=u.cost_usd, unpriced=u.unpriced,
        attempts=u.attempts,
    )


def compare(a: History, b: History, run_a: Path, run_b: Path, *,
            price: Callable[[Mapping[str, Any]], Any] | None = None,
            llm_a: list[Mapping[str, Any]] | None = None, llm_b: list[Mapping[str, Any]] | None = None) -> Comparison:
    """Align two folded runs (``price``: a step record's cost, for the totals; ``llm_*``: their proxied calls)."""
    ca, cb = calls_of(a), calls_of(b)
    rows = [Row(_verdict(x, y), x, y) for x, y in _align(ca, cb)]
    return Comparison(run_a, run_b, rows, _totals(a, ca, price, llm_a or []), _totals(b, cb, price, llm_b or []))


def compare_runs(run_a: Path, run_b: Path, *, price: Callable[[Mapping[str, Any]], Any] | None = None) -> Comparison:
    """:func:`compare` of two run directories (or bare journals), read from their files."""
    def calls(p: Path) -> list[Mapping[str, Any]]:
        return list(read_calls(p)) if p.is_dir() else []

    return compare(load(run_a), load(run_b), run_a, run_b, price=price, llm_a=calls(run_a), llm_b=calls(run_b))
