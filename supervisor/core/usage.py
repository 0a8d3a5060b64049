"""Tokens a run's model calls consumed, read from the step records' ``usage`` and ``call`` fields.

A step record's ``usage`` is a list of what its model calls consumed, each
``{model, provider, input_tokens, output_tokens, cached_tokens}`` (the keys
given to ``run.usage``). ``input_tokens`` counts every prompt token, the cached
ones included (``cached_tokens`` is the part of them read from the provider's
prompt cache), as OpenAI, Pydantic AI, LangChain and genai-prices count them; so
a step's total is input plus output. Readers take ``usage`` and ``call`` absent
or malformed without crashing: such a step has no tokens (``None``), never a
guessed figure.

:func:`run_usage` sums a whole run: every step record of every attempt (the
abandoned branches and failed tries included: their tokens were paid), and
**saved by resume**: the tokens of the steps resuming attempts served from the
journal instead of calling the model again, each step once: an attempt (a
``start`` record) serves the successful steps of the effective history as it
stands at its start (a rollback before it: only the steps up to the checkpoint
it returned to), and those an earlier attempt served already are not counted
again, so a crash loop that serves the same steps again and again does not make
it grow. A fork counts from its ``fork`` record on: its origin's attempts saved
nothing in it; its own first attempt serves the steps it copied.
Cost comes from a price function the caller passes (``supervisor.export.pricing.step_cost``):
the core imports no price table.

The model calls the proxy recorded (``llm.jsonl``, :func:`supervisor.core.llm_calls.read_calls`) are counted by
:meth:`UsageFold.add_call` (``run_usage(..., calls=...)``), in any order relative to the journal: every call
record with usage is in the totals (paid, whatever branch it was on), and each ``llm call served`` note adds
the usage of the call record it names (its ``served`` seq) to saved by resume, once a call: a proxied call is
saved when the proxy answered it from the record, not when an attempt starts (the calls are no steps of the
effective history, so a ``start`` record does not count them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .history import Fold, History
from .journal_reader import Entry
from .llm_calls import SERVED_NOTE
from .records import Kind, LazyRecord
from .wire import USAGE_WORD

__all__ = [
    "Price",
    "RunUsage",
    "Tokens",
    "UsageFold",
    "call_of",
    "run_usage",
    "step_model",
    "step_tokens",
    "usage_entries",
]

CALL_KINDS = ("model", "tool")
_TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_tokens")

Price = Callable[[Mapping[str, Any]], "float | None"]
"""A step record's cost in USD, or ``None`` when it cannot be told (``supervisor.export.pricing.step_cost``)."""


class Tokens(NamedTuple):
    """Token counts; ``cached`` is the part of ``input`` read from a prompt cache."""

    input: int = 0
    output: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        """Input plus output (cached tokens are part of the input)."""
        return self.input + self.output

    def plus(self, other: Tokens) -> Tokens:
        """The element-wise sum (``+`` on a tuple concatenates, so it is not ``__add__``)."""
        return Tokens(self.input + other.input, self.output + other.output, self.cached + other.cached)

    @staticmethod
    def sum(items: Iterable[Tokens]) -> Tokens:
        """The element-wise sum of ``items`` (``Tokens()`` for none)."""
        i = o = c = 0
        for t in items:
            i += t.input
            o += t.output
            c += t.cached
        return Tokens(i, o, c)


ZERO = Tokens()


def call_of(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's ``call`` if it is a dict whose ``kind`` is ``model`` or ``tool``, else ``None``."""
    call = rec.get("call")
    if isinstance(call, dict) and call.get("kind") in CALL_KINDS:
        return call
    return None


def _count(v: Any) -> int | None:
    """A token count as written (a non-negative int, not a bool), else ``None``."""
    return v if type(v) is int and v >= 0 else None


def _tokens_of(u: dict[str, Any]) -> tuple[Tokens, bool] | None:
    """One usage entry's tokens (a missing count is 0) and whether it had any count; ``None`` if one is malformed."""
    n: list[int] = []
    counted = False
    for key in _TOKEN_KEYS:
        v = u.get(key)
        if v is None:
            n.append(0)
            continue
        c = _count(v)
        if c is None:
            return None
        n.append(c)
        counted = True
    return Tokens(n[0], n[1], n[2]), counted


def _name(v: Any, fallback: Any) -> str | None:
    """An entry's model or provider: its own if a non-empty string, else the step call's if a string."""
    if isinstance(v, str) and v:
        return v
    return fallback if isinstance(fallback, str) else None


def usage_entries(rec: Mapping[str, Any]) -> list[tuple[str | None, str | None, Tokens]] | None:
    """Each entry of the record's ``usage`` list as ``(model, provider, tokens)``.

    An entry without a model or provider takes the step's ``call`` model or provider.
    ``None`` when the record has no usage, when no entry carries a token count, or when
    any entry is malformed (not an object, a count that is not a non-negative integer):
    a part of the figure cannot be read, so there is no figure.
    """
    usage = rec.get("usage")
    if not isinstance(usage, list) or not usage:
        return None
    call = call_of(rec)
    c_model = call.get("model") if call is not None and call.get("kind") == "model" else None
    c_provider = call.get("provider") if call is not None and call.get("kind") == "model" else None
    out: list[tuple[str | None, str | None, Tokens]] = []
    counted = False
    for u in usage:
        if not isinstance(u, dict):
            return None
        got = _tokens_of(u)
        if got is None:
            return None
        tokens, any_count = got
        counted = counted or any_count
        out.append((_name(u.get("model"), c_model), _name(u.get("provider"), c_provider), tokens))
    return out if counted else None


def step_tokens(rec: Mapping[str, Any]) -> Tokens | None:
    """The step's tokens summed over its ``usage`` list; ``None`` if it has none or they are malformed."""
    entries = usage_entries(rec)
    if entries is None:
        return None
    return Tokens.sum(t for _, _, t in entries)


def step_model(rec: Mapping[str, Any]) -> str | None:
    """The model a step called: its ``call``'s model, else the first usage entry's model."""
    call = call_of(rec)
    if call is not None and call.get("kind") == "model":
        m = call.get("model")
        if isinstance(m, str) and m:
            return m
    usage = rec.get("usage")
    if isinstance(usage, list):
        for u in usage:
            if isinstance(u, dict):
                m = u.get("model")
                if isinstance(m, str) and m:
                    return m
    return None


@dataclass
class RunUsage:
    """A run's token and cost totals, and what resuming saved.

    Costs are in USD; ``None`` when no step could be priced (no price function, unknown
    models, genai-prices not installed). A total over steps some of which could not be
    priced is the sum of those that could: ``unpriced`` says how many could not (show it,
    e.g. ``$0.42 + 3 unpriced``), so a figure is never silently short.
    """

    tokens: Tokens = ZERO
    """Every step record with usage, of every attempt and branch (what was paid)."""
    by_model: dict[str, Tokens] = field(default_factory=dict)
    """``tokens`` per model (usage entries without a model under ``""``)."""
    steps: int = 0
    """Step records with tokens."""
    cost_usd: float | None = None
    unpriced: int = 0
    """Step records with tokens whose cost could not be told."""
    saved_tokens: Tokens = ZERO
    """Tokens of the steps served from the journal on resume, summed over attempts."""
    saved_steps: int = 0
    """Steps with tokens served from the journal, summed over attempts."""
    saved_cost_usd: float | None = None
    saved_unpriced: int = 0
    """Steps with tokens served on resume whose cost could not be told, summed over attempts."""
    attempts: int = 0
    """``start`` records seen."""


class _Sum:
    """Tokens, cost and counts of a set of steps (cheap to copy: a checkpoint keeps one)."""

    __slots__ = ("cost", "priced", "steps", "tokens", "unpriced")

    def __init__(self) -> None:
        self.tokens = ZERO
        self.steps = 0
        self.cost = 0.0
        self.priced = 0
        self.unpriced = 0

    def add(self, t: Tokens, cost: float | None) -> None:
        self.tokens = self.tokens.plus(t)
        self.steps += 1
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost
            self.priced += 1

    def add_sum(self, s: _Sum) -> None:
        self.tokens = self.tokens.plus(s.tokens)
        self.steps += s.steps
        self.cost += s.cost
        self.priced += s.priced
        self.unpriced += s.unpriced

    def copy(self) -> _Sum:
        c = _Sum()
        c.add_sum(self)
        return c

    def minus(self, s: _Sum) -> _Sum:
        """What this sum holds beyond ``s`` (a prefix of the same steps)."""
        d = _Sum()
        d.tokens = Tokens(self.tokens.input - s.tokens.input, self.tokens.output - s.tokens.output,
                          self.tokens.cached - s.tokens.cached)
        d.steps, d.cost = self.steps - s.steps, self.cost - s.cost
        d.priced, d.unpriced = self.priced - s.priced, self.unpriced - s.unpriced
        return d


class UsageFold:
    """:func:`run_usage` fed one journal entry at a time (a live reader keeps one and calls :meth:`add`).

    It rides the one counting fold (``Fold(keep=False)``) for the effective history:
    it keeps the running sum of the effective successful steps and a copy of it at each
    effective checkpoint, so a rollback returns the sum to its checkpoint's; memory stays
    flat however long the run.
    """

    def __init__(self, price: Price | None = None) -> None:
        self._price = price
        self._fold = Fold(keep=False)
        self._total = _Sum()
        self._by_model: dict[str, Tokens] = {}
        self._effective = _Sum()  # the effective history's successful steps with tokens
        self._at_cp: list[_Sum] = []  # ``_effective`` at each effective checkpoint (parallel to fold.checkpoints)
        self._saved = _Sum()  # proxied calls served, each once
        self._saved_steps = _Sum()  # steps served on resume, each once
        self._counted = _Sum()  # the prefix of the effective history counted in saved already
        self._served_seqs: set[int] = set()
        self._attempts = 0
        self._calls: dict[int, tuple[Tokens, float | None]] = {}  # llm.jsonl seq -> the call's tokens and cost
        self._served: list[int] = []  # served notes whose call record was not seen yet

    def add_call(self, rec: Mapping[str, Any]) -> None:
        """Fold a record of the proxy's ``llm.jsonl`` (in its file's order; at any point of the journal's):
        a call record with usage counts in the totals and by model; a ``llm call served`` note adds the
        usage of the call it names to saved by resume."""
        kind = rec.get("kind", Kind.STEP)
        if kind == Kind.STEP:
            self._add_call_record(rec)
        elif kind == Kind.NOTE and rec.get("message") == SERVED_NOTE:
            self._add_served(rec.get("served"))

    def _add_call_record(self, rec: Mapping[str, Any]) -> None:
        """A call record: counted, and kept by its seq for the served notes (one read before it is saved now)."""
        counted = self._count(rec)
        seq = rec.get("seq")
        if counted is None or type(seq) is not int:
            return
        self._calls[seq] = counted
        if seq in self._served:  # a note read before its call (a reader that got them out of order)
            self._served = [s for s in self._served if s != seq]
            if seq not in self._served_seqs:
                self._served_seqs.add(seq)
                self._saved.add(*counted)

    def _add_served(self, seq: Any) -> None:
        """A served note: the usage of the call it names is saved by resume (once that call's record is read)."""
        if type(seq) is not int:
            return
        got = self._calls.get(seq)
        if got is None:
            self._served.append(seq)
        elif seq not in self._served_seqs:  # served again in a later attempt: saved once
            self._served_seqs.add(seq)
            self._saved.add(*got)

    def add_calls(self, recs: Iterable[Mapping[str, Any]]) -> None:
        """:meth:`add_call` for each record."""
        for r in recs:
            self.add_call(r)

    def add(self, entry: Entry | LazyRecord) -> None:
        """Fold the next entry in journal order (a parsed record, a bad line or a lazy step line)."""
        f = self._fold
        rec: Mapping[str, Any] | None
        if type(entry) is LazyRecord:
            if USAGE_WORD not in entry.raw:  # most steps: no parse (a lazy line is a successful step)
                f.add(entry)
                return
            rec = entry.record()
        elif isinstance(entry, dict):
            rec = entry
        else:
            rec = None  # a bad line: the fold counts it; it has no readable usage
        f.add(entry)
        if rec is None:
            return
        kind = rec.get("kind", Kind.STEP)
        if kind == Kind.STEP:
            self._add_step(rec)
        elif kind == Kind.CHECKPOINT:
            self._at_cp.append(self._effective.copy())  # the fold appended it to f.checkpoints too
        elif kind == Kind.ROLLBACK:
            if f.last_target is None:
                return  # names no effective checkpoint: no cut (a problem the fold counts)
            n = len(f.checkpoints)
            del self._at_cp[n:]
            self._effective = self._at_cp[-1].copy() if n else _Sum()
            if self._counted.steps > self._effective.steps:  # the counted prefix ends after the checkpoint
                self._counted = self._effective.copy()
        elif kind == Kind.START:
            self._attempts += 1
            if rec.get("resume") is not False:  # it serves the effective steps: those not counted yet are saved
                self._saved_steps.add_sum(self._effective.minus(self._counted))
                self._counted = self._effective.copy()
        elif kind == Kind.FORK:  # the records before it are the origin's: what they served saved nothing here
            self._counted = _Sum()
            self._saved_steps = _Sum()

    def _add_step(self, rec: Mapping[str, Any]) -> None:
        """A step's usage: in the totals and by model; in the effective sum if it succeeded."""
        counted = self._count(rec)
        call = rec.get("call")
        if counted is not None and rec.get("error") is None and not (isinstance(call, dict) and call.get("observed")):
            self._effective.add(*counted)  # an observed call (a tracing processor saw it) is never served: not saved

    def _count(self, rec: Mapping[str, Any]) -> tuple[Tokens, float | None] | None:
        """A step's or call's usage into the totals and by model; return its tokens and cost (``None``: no usage)."""
        entries = usage_entries(rec)
        if entries is None:
            return None
        t = Tokens.sum(e[2] for e in entries)
        cost = self._price(rec) if self._price is not None else None
        self._total.add(t, cost)
        for model, _, et in entries:
            key = model or ""
            self._by_model[key] = self._by_model.get(key, ZERO).plus(et)
        return t, cost

    def extend(self, entries: Iterable[Entry | LazyRecord]) -> None:
        for e in entries:
            self.add(e)

    @property
    def result(self) -> RunUsage:
        """The totals so far."""
        tot, saved = self._total, self._saved.copy()
        saved.add_sum(self._saved_steps)
        return RunUsage(
            tokens=tot.tokens,
            by_model=dict(self._by_model),
            steps=tot.steps,
            cost_usd=tot.cost if tot.priced else None,
            unpriced=tot.unpriced,
            saved_tokens=saved.tokens,
            saved_steps=saved.steps,
            saved_cost_usd=saved.cost if saved.priced else None,
            saved_unpriced=saved.unpriced,
            attempts=self._attempts,
        )


def run_usage(
    history: History | Iterable[Entry | LazyRecord], price: Price | None = None,
    calls: Iterable[Mapping[str, Any]] = (),
) -> RunUsage:
    """A run's totals and saved by resume (see the module docstring) from its folded history or its entries,
    and the proxy's records (``calls``: :func:`supervisor.core.llm_calls.read_calls`).

    ``price`` prices one step record (``supervisor.export.pricing.step_cost``); without it costs are ``None``.
    """
    u = UsageFold(price)
    u.extend(history.entries if isinstance(history, History) else history)
    u.add_calls(calls)
    return u.result
