"""A run as OpenTelemetry spans, and as one OTLP/JSON ``ExportTraceServiceRequest`` (no dependency).

One trace per run; its id is derived from ``run.json``'s ``uid`` (random, written when the run was created;
a run from before uids: its run id), and every span id from it and what the span stands for (``run``,
``attempt:N``, ``attempt:N:started``, ``step:SEQ``), so exporting a run twice gives the same ids (a backend
sees the same spans again, not a second trace) and two runs of one directory name never share one. The shape:

- a root span for the run (``run <id>``): run.json's status (OK: succeeded, ERROR: failed, else UNSET),
  command, token and cost totals (``gen_ai.aggregated_usage.*``, not ``gen_ai.usage.*``: a backend summing
  these over a trace counts each call once) and what resuming saved; a GenAI workflow span
  (``gen_ai.operation.name`` ``invoke_workflow``, ``gen_ai.agent.name``, ``gen_ai.conversation.id`` and
  ``session.id`` the run's uid);
- a child span per attempt (``attempt N``), from its spawn (or its ``start``
  record) to its exit: attempt number, resume, replayed steps, pid, exit code or
  signal; a crash (a non-zero exit other than 75, a signal) is an ERROR status;
  the supervisor's restarts, backoffs, hangs, memory limits, rollbacks, pauses
  are span events, and the journal's checkpoints and rollbacks too; an agent span
  (``invoke_agent``, the same agent and session attributes);
- under it a short ``attempt N started`` span at its spawn, the parent of the attempt's steps (and of the
  agent's own spans: :func:`attempt_span_context` gives ``TRACEPARENT``): the live exporter sends it at once,
  so the steps it sends while the attempt runs are never orphans;
- a span per step from its ``begin`` record to its ``step`` record, under its
  attempt's ``started`` span; a step on a branch a rollback abandoned has ``agent_supervisor.abandoned``;
  a nested step's (its records' ``parent`` names the begin of the step
  it runs in) under its enclosing step's span. Model calls (``call.kind == "model"``) follow the OpenTelemetry GenAI
  semantic conventions (span ``chat {model}``, kind CLIENT, ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens``/``output_tokens``/``cache_read.input_tokens``), tool
  calls ``execute_tool {name}`` with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``; providers by the
  conventions' names (``gcp.gemini``, ``aws.bedrock``...), the provider the tokens were counted for.
  A failed step has an ERROR status and an ``exception`` event; a begin whose
  attempt ended without its step is ERROR ``interrupted``;
- a span per model call the proxy recorded (``llm.jsonl``, span id from ``llm:SEQ``, its seq in that file), a
  GenAI ``chat {model}`` span like a model-call step's, from its ``started`` to its ``ts``. A call made while
  an SDK step was in flight (its ``started`` not before the step's ``begin``, its ``ts`` before the step's
  record) is a child of that step's span, else of its attempt's; the proxy's notes (``llm call served``,
  ``llm call diverged``) are events of the attempt. The calls' tokens count in the root's totals and each served
  call in saved by resume (:meth:`~supervisor.core.usage.UsageFold.add_call`). Inputs and outputs are
  exported only with ``content=True``, after redaction (:class:`~supervisor.core.redact.Redactor`:
  the exporting environment's secret values and token shapes); a model call's also in GenAI form
  (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``:
  :mod:`supervisor.export.genai`). Its response id and finish reasons are always there where recorded.

:class:`SpanBuilder` takes records and events one at a time and hands back the
spans that are finished, so the supervisor's live exporter (``supervise
--otlp-endpoint``) and the file export build the same spans. OTLP/JSON follows
the OTLP specification: ids lowercase hex (not protobuf JSON's base64), 64-bit
integers as decimal strings, enums as integers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .. import __version__
from ..core import llm_calls, rundir
from ..core.events import read_events
from ..core.history import fold
from ..core.journal_reader import JournalReader
from ..core.pairing import Pairing
from ..core.records import Kind, Record, step_name
from ..core.redact import Redactor
from ..core.times import ts_ns
from ..core.usage import Price, UsageFold, call_of, usage_entries
from . import genai
from .spans import (
    ATTEMPT_EVENTS,
    EXIT_RESTART,
    FINAL_STATUSES,
    KIND_CLIENT,
    KIND_INTERNAL,
    SCOPE,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_UNSET,
    Span,
    SpanEvent,
    _call_attrs,
    _error_on,
    _scalar,
    agent_name,
    id_key,
    provider_name,
    resource_attributes,
    root_status,
    span_id,
    trace_id,
    usage_attributes,
)

__all__ = [
    "FINAL_STATUSES",
    "KIND_CLIENT",
    "KIND_INTERNAL",
    "SCOPE",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "Span",
    "SpanBuilder",
    "SpanEvent",
    "attempt_span_context",
    "build_spans",
    "export_request",
    "id_key",
    "resource_attributes",
    "span_id",
    "trace_id",
    "ts_ns",
    "write_otlp_json",
    "write_otlp_json_spans",
]

def attempt_span_context(run_dir: Path, attempt: int) -> tuple[str, str]:
    """``(trace id, span id)`` of attempt ``attempt``'s ``attempt N started`` span: sent when the attempt is
    spawned, the parent of its steps' spans (and of the agent's own spans, given as ``TRACEPARENT``), so they
    are never orphans while the run goes on. Ids as the exporters emit them (the first attempt of that number)."""
    meta = rundir.read_run_json(run_dir)
    key = id_key(meta, str(meta.get("id") or run_dir.name))
    return trace_id(key), span_id(key, f"attempt:{attempt}:started")


@dataclass
class _Attempt:
    number: int
    key: str
    """``N``, or ``N.I`` for the I-th attempt numbered N (an agent run by hand, then supervised, repeats numbers)."""
    order: int = 0
    started: bool = False
    """Its ``start`` record was seen."""
    spawned: bool = False
    """Its ``spawn`` event was seen."""
    start_ns: int | None = None
    end_ns: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    exited: bool = False
    status: tuple[int, str] = (STATUS_UNSET, "")
    emitted: bool = False
    announced: bool = False
    """Its ``attempt N started`` span went out."""
    interrupted: list[Record] = field(default_factory=list)
    """Begins of this attempt whose step never came (their spans end with the attempt)."""

    def see(self, ns: int) -> None:
        self.start_ns = ns if self.start_ns is None else min(self.start_ns, ns)
        self.end_ns = ns if self.end_ns is None else max(self.end_ns, ns)


class SpanBuilder:
    """Builds a run's spans from its journal records and supervisor events, fed in their files' order.

    :meth:`record` and :meth:`event` return the spans they finish (a step's span
    when its step record comes; in live use an attempt's span when the next
    attempt is spawned); :meth:`finish` returns the rest (attempts, steps still
    open, the root). ``abandoned``: seqs of records on abandoned branches (known
    only after the fact; the file export passes them).
    """

    def __init__(
        self,
        run_id: str,
        meta: Mapping[str, Any] | None = None,
        *,
        content: bool = False,
        redactor: Redactor | None = None,
        price: Price | None = None,
        abandoned: set[int] | None = None,
        default_ns: int | None = None,
        live: bool = False,
    ) -> None:
        self.run_id = run_id
        self.default_ns = default_ns
        self.live = live
        """Fed as the run happens (the supervisor's exporter): an attempt's span goes out when the next
        attempt is spawned. Otherwise (the files, the journal before the events) all go out at :meth:`finish`."""
        """The time of a record without a readable ``ts`` before any that has one (default: now)."""
        self.meta = dict(meta or {})
        self.key = id_key(self.meta, run_id)
        self.trace = trace_id(self.key)
        self.root = span_id(self.key, "run")
        self.content = content
        self.redactor = redactor if redactor is not None else (Redactor() if content else None)
        self.price = _last_of(price) if price is not None else None
        self.abandoned = abandoned or set()
        self.usage = UsageFold(self.price)
        self.attempts: dict[str, _Attempt] = {}
        self.latest: dict[int, str] = {}  # attempt number -> key of its latest instance
        self.cur: str | None = None  # the attempt of the last start record
        self.pairing = Pairing()
        self.begins: dict[int, tuple[Record, str | None]] = {}  # begin seq -> (begin, attempt key)
        self.children: dict[int, list[Span]] = {}  # begin seq -> the proxied calls and nested steps made in its step
        self.begin_ids: dict[str, int] = {}  # id -> seq of each open begin (a nested step's records name it)
        self.nested: dict[int, int] = {}  # a nested step's begin seq -> its enclosing step's begin seq
        self.enclosing: set[int] = set()  # begin seqs of the open steps a nested step's records name
        self.closed: dict[int, str] = {}  # an enclosing step's begin seq -> the span id its step record gave
        self.root_events: list[SpanEvent] = []
        self.first_ns: int | None = ts_ns(self.meta.get("created"))
        self.last_ns: int | None = self.first_ns

    # ------------------------------------------------------------------ helpers
    def _when(self, ts: Any) -> int:
        ns = ts_ns(ts)
        if ns is None:  # a hand-written record without a time: the one before it, else the file's
            if self.last_ns is None:
                self.last_ns = self.default_ns if self.default_ns is not None else time.time_ns()
            ns = self.last_ns
        if self.first_ns is None or ns < self.first_ns:
            self.first_ns = ns
        if self.last_ns is None or ns > self.last_ns:
            self.last_ns = ns
        return ns

    def _new_attempt(self, n: int) -> _Attempt:
        i = sum(1 for a in self.attempts.values() if a.number == n) + 1
        key = str(n) if i == 1 else f"{n}.{i}"
        a = self.attempts[key] = _Attempt(n, key, order=len(self.attempts))
        self.latest[n] = key
        return a

    def _attempt(self, n: int, *, by: str = "") -> _Attempt:
        """The attempt numbered ``n`` that a record or event is about: its latest instance, or a new one when
        that one already had what ``by`` brings (``start``: a start record, ``spawn``: a spawn event) or is
        from before a live exporter started (:meth:`preload`)."""
        a = self.attempts.get(self.latest.get(n, ""))
        if a is None or (by == "start" and (a.started or a.emitted)) or (by == "spawn" and (a.spawned or a.emitted)):
            a = self._new_attempt(n)
        return a

    def _key_of(self, att: Any) -> str | None:
        """The attempt key of a record's ``attempt`` field (else the attempt of the last start record)."""
        if isinstance(att, int) and not isinstance(att, bool):
            return self.latest.get(att, self.cur)
        return self.cur

    def preload(self, entry: Any) -> None:
        """A record from before a live exporter started: it counts in the totals and attempt numbering only."""
        self.usage.add(entry)
        if isinstance(entry, dict) and entry.get("kind") == Kind.START:
            n = entry.get("attempt")
            if isinstance(n, int) and not isinstance(n, bool):
                a = self._attempt(n, by="start")
                a.started = a.emitted = a.announced = True  # exported before: never again, and nothing attaches to it
                self.cur = a.key

    def _parent(self, attempt: str | None) -> str:
        """The parent of a step of ``attempt``: its ``attempt N started`` span (out since its spawn)."""
        return span_id(self.key, f"attempt:{attempt}:started") if attempt is not None else self.root

    def _announce(self, a: _Attempt) -> list[Span]:
        """The attempt's ``attempt N started`` span, once, as soon as the attempt is known (its spawn or start):
        a short child of the attempt's span and the parent of its steps, so a receiver holds a navigable tree
        per attempt while the run goes on (the attempt's own span goes out when it ends, with its outcome)."""
        if a.announced:
            return []
        a.announced = True
        ns = a.start_ns if a.start_ns is not None else (self.first_ns or 0)
        attrs = {"agent_supervisor.attempt": a.number, **a.attrs, **self.session_attrs()}
        return [Span(self.trace, span_id(self.key, f"attempt:{a.key}:started"), span_id(self.key, f"attempt:{a.key}"),
                     f"attempt {a.number} started", ns, ns, KIND_INTERNAL, attrs)]

    def session_attrs(self) -> dict[str, Any]:
        """What groups the run's spans as one session (Phoenix, Langfuse, Honeycomb): its unique id."""
        sid = self.key.removeprefix("uid:")
        return {"gen_ai.conversation.id": sid, "session.id": sid}

    def agent_attrs(self, operation: str) -> dict[str, Any]:
        """A GenAI agent span's attributes (``invoke_workflow``: the run; ``invoke_agent``: an attempt)."""
        return {"gen_ai.operation.name": operation, "gen_ai.agent.name": agent_name(self.meta, self.run_id),
                **self.session_attrs()}

    def _content(self, v: Any) -> str:
        raw = orjson.dumps(v, default=str, option=orjson.OPT_NON_STR_KEYS)
        if self.redactor is not None:
            raw = self.redactor(raw)
        return raw.decode("utf-8", "replace")

    def _event_on(self, attempt: str | None, ev: SpanEvent) -> None:
        a = self.attempts.get(attempt) if attempt is not None else None
        if a is not None and not a.emitted:
            a.events.append(ev)
            a.see(ev.time_ns)
        else:
            self.root_events.append(ev)

    # ------------------------------------------------------------------ journal
    def record(self, rec: Record) -> list[Span]:
        """Take the next journal record (a dict; bad lines are not passed); return the spans it finishes."""
        self.usage.add(rec)
        kind = rec.get("kind", Kind.STEP)
        ns = self._when(rec.get("ts"))
        att = rec.get("attempt")
        out: list[Span] = []
        if kind == Kind.START:
            out.extend(self._close_open(ns))
            self.pairing.add(rec)
            if isinstance(att, int) and not isinstance(att, bool):
                a = self._attempt(att, by="start")
                a.started = True
                self.cur = a.key
                a.see(ns)
                a.attrs["agent_supervisor.resume"] = bool(rec.get("resume"))
                if isinstance(rec.get("replayable_steps"), int):
                    a.attrs["agent_supervisor.replayed_steps"] = rec["replayable_steps"]
                if isinstance(rec.get("pid"), int):
                    a.attrs.setdefault("process.pid", rec["pid"])
                out.extend(self._announce(a))
            return out
        attempt = self._key_of(att)
        if attempt is not None and attempt in self.attempts and not self.attempts[attempt].emitted:
            self.attempts[attempt].see(ns)
        if kind == Kind.BEGIN:
            self.pairing.add(rec)
            self._begin(rec, attempt)
        elif kind == Kind.STEP:
            out.extend(self._step(rec, attempt, ns))
        elif kind == Kind.CHECKPOINT:
            self._event_on(attempt, SpanEvent("checkpoint", ns, self._fields(rec, ("name", "file", "seq"))))
        elif kind == Kind.ROLLBACK:
            out.extend(self._close_open(ns))
            self.pairing.add(rec)
            self._event_on(attempt, SpanEvent(
                "rollback", ns, self._fields(rec, ("checkpoint", "checkpoint_seq", "reason", "by", "failed_step", "seq"))))
        elif kind == Kind.FORK:
            self.root_events.append(SpanEvent("fork", ns, self._fields(rec, ("from_run", "from_seq", "run", "seq"))))
        return out

    @staticmethod
    def _fields(rec: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
        return {f"agent_supervisor.{k}": _scalar(rec[k]) for k in keys if rec.get(k) is not None}

    def _step(self, rec: Record, attempt: str | None, ns: int) -> list[Span]:
        """A step record's span, and the spans made in its step (proxied calls, nested steps). A nested step's
        span waits for its enclosing step's, whose id its step record (after this one) gives."""
        begin = self._begin_of(rec)
        self.pairing.add(rec)
        s = self._step_span(rec, begin, attempt, ns)
        if begin is None:
            return [s]
        bseq = int(begin[0].get("seq", -1))
        kids = self._adopt(bseq, s.span_id)
        if bseq in self.enclosing and not rec.get("transient"):
            self.enclosing.discard(bseq)
            self.closed[bseq] = s.span_id  # a child that finishes after it (a gather not awaited) goes under it still
        enclosing = self.nested.get(bseq)
        if enclosing is None:
            return [s, *kids]
        if not rec.get("transient"):
            del self.nested[bseq]
        if enclosing in self.closed:  # its enclosing step ended before this one finished (a gather not awaited)
            s.parent_id = self.closed[enclosing]
            return [s, *kids]
        self.children.setdefault(enclosing, []).append(s)
        return kids

    def _begin(self, rec: Record, attempt: str | None) -> None:
        """A begin: open until its step; a nested step's begin remembers its enclosing step's (the one its
        ``parent`` names, open in the same attempt)."""
        seq = int(rec.get("seq", -1))
        self.begins[seq] = (rec, attempt)
        parent = rec.get("parent")
        if isinstance(parent, str) and parent in self.begin_ids:
            self.nested[seq] = enclosing = self.begin_ids[parent]
            self.enclosing.add(enclosing)
        rid = rec.get("id")
        if isinstance(rid, str):
            self.begin_ids[rid] = seq

    def _begin_of(self, rec: Record) -> tuple[Record, str | None] | None:
        """The open begin a step record closes, as :class:`Pairing` pairs them (by pos, else the unnumbered one)."""
        p = self.pairing
        if not p.open:
            return None
        b = p.open.get(rec.get("pos"))
        if b is None:
            b = p.open.get(None)
        if b is None:
            return None
        got = self.begins.get(int(b["seq"]))
        if got is not None and not rec.get("transient"):
            del self.begins[int(b["seq"])]
            self.begin_ids.pop(str(got[0].get("id")), None)
        return got

    def _close_open(self, ns: int) -> list[Span]:
        """The begins still open when a start or rollback comes: their steps were interrupted. Their spans end
        with their attempt: they are handed out with the attempt's span (or now, if it is out already)."""
        out: list[Span] = []
        for _, (b, attempt) in sorted(self.begins.items()):
            a = self.attempts.get(attempt) if attempt is not None else None
            if a is not None and not a.emitted:
                a.interrupted.append(b)
            else:
                out.extend(self._open_spans(b, attempt, ns, interrupted=True))
        self.begins.clear()
        self.begin_ids.clear()
        return out

    def _open_spans(self, b: Record, attempt: str | None, end_ns: int, *, interrupted: bool) -> list[Span]:
        """The span of a begin without its step: interrupted (ERROR), or still in flight at the export; then the
        proxied calls and nested steps made in it. A nested one's enclosing step is open too (its step record
        comes after its children's): its span's id is its begin's."""
        s = self._step_span(b, (b, attempt), attempt, end_ns, begin_only=True)
        enclosing = self.nested.pop(int(b.get("seq", -1)), None)
        if enclosing is not None:
            s.parent_id = self.closed.get(enclosing) or span_id(self.key, f"step:{enclosing}")
        if interrupted:
            s.status_code, s.status_message = STATUS_ERROR, "interrupted: its attempt ended before the step finished"
        else:
            s.attributes["agent_supervisor.in_flight"] = True
        return [s, *self._adopt(int(b.get("seq", -1)), s.span_id)]

    def _adopt(self, begin_seq: int, parent: str) -> list[Span]:
        """The proxied calls made in the step of the begin ``begin_seq``, made children of its span ``parent``."""
        kids = self.children.pop(begin_seq, [])
        for k in kids:
            k.parent_id = parent
        return kids

    # ------------------------------------------------------------------ the proxy's calls (llm.jsonl)
    def call(self, rec: Record, *, abandoned: bool = False) -> list[Span]:
        """Take the next record of the proxy's ``llm.jsonl``, in the one timeline's order (the journal's records
        and these merged by time: :func:`~supervisor.core.llm_calls.merge_by_ts`); return the spans it finishes.

        A call is a model-call span under the SDK step in flight when it was made (the open begin latest at or
        before its ``started``: handed out with that step's span), else under its attempt; a note is an event
        of its attempt. ``abandoned``: made on a branch a rollback abandoned."""
        self.usage.add_call(rec)
        ns = self._when(rec.get("ts"))
        attempt = self._key_of(rec.get("attempt"))
        if rec.get("kind", Kind.STEP) != Kind.STEP:
            msg = rec.get("message")
            if msg in (llm_calls.SERVED_NOTE, llm_calls.DIVERGED_NOTE):
                self._event_on(attempt, SpanEvent(str(msg), ns, self._fields(
                    rec, ("step", "served", "key", "recorded_key", "attempt"))))
            return []
        seq = rec.get("seq")
        s = self._step_span(rec, None, attempt, ns, key=f"llm:{seq}", abandoned=abandoned)
        s.attributes["agent_supervisor.source"] = llm_calls.SOURCE
        started = ts_ns(rec.get("started"))
        if started is not None and started <= s.end_ns:
            s.start_ns = started
        in_step = self._in_flight(rec.get("started"), s.start_ns)
        if in_step is None:
            return [s]
        self.children.setdefault(in_step, []).append(s)
        return []

    def _in_flight(self, started: Any, start_ns: int) -> int | None:
        """The seq of the open begin latest at or before a call's start (the step it was made in), else ``None``."""
        best: tuple[int, int] | None = None
        for bseq, (b, _) in self.begins.items():
            bns = ts_ns(b.get("ts"))
            if bns is not None and bns <= start_ns and (best is None or bns >= best[0]):
                best = (bns, bseq)
        return best[1] if best is not None else None

    def _step_span(
        self, rec: Record, begin: tuple[Record, str | None] | None, attempt: str | None,
        end_ns: int, *, begin_only: bool = False, key: str | None = None, abandoned: bool | None = None,
    ) -> Span:
        """A step's span (``key``, ``abandoned``: a proxied call's span key and branch, its seq being its file's)."""
        seq = int(rec.get("seq", -1))
        start = self._step_start(rec, begin, end_ns, begin_only)
        name = step_name(rec)
        attrs: dict[str, Any] = {"agent_supervisor.step": name,
                                 "agent_supervisor.seq" if key is None else "agent_supervisor.llm.seq": seq}
        for k in ("pos", "k", "attempt", "key"):
            v = rec.get(k)
            if isinstance(v, (int, str)) and not isinstance(v, bool):
                attrs[f"agent_supervisor.{k}"] = v
        if (seq in self.abandoned) if abandoned is None else abandoned:
            attrs["agent_supervisor.abandoned"] = True
        call = call_of(rec)
        kind, span_name = _call_attrs(call, attrs) if call is not None else (KIND_INTERNAL, name or "step")
        self._usage_attrs(rec, attrs)
        s = Span(self.trace, span_id(self.key, key or f"step:{seq}"), self._parent(attempt), span_name,
                 start, max(end_ns, start), kind, attrs)
        err = rec.get("error")
        if rec.get("kind", Kind.STEP) == Kind.STEP and err is not None:
            _error_on(s, err, end_ns, transient=bool(rec.get("transient")))
        if call is not None and call["kind"] == "model" and not begin_only:
            _response_attrs(rec, attrs, proxied=key is not None)
        if self.content:
            self._content_attrs(rec, call, attrs, begin_only)
            if call is not None and call["kind"] == "model":
                self._genai_content(rec, attrs, proxied=key is not None, output=not begin_only)
        return s

    def _step_start(self, rec: Record, begin: tuple[Record, str | None] | None, end_ns: int, begin_only: bool) -> int:
        """When a step's span starts: its begin's time, else its end less its duration."""
        if begin is not None:
            return self._when(begin[0].get("ts"))
        dur = rec.get("dur_ms")
        return end_ns - int(dur * 1e6) if isinstance(dur, (int, float)) and not begin_only and dur >= 0 else end_ns

    def _usage_attrs(self, rec: Record, attrs: dict[str, Any]) -> None:
        """The GenAI token counts (and the cost, with a price) of a step that recorded its usage."""
        entries = usage_entries(rec)
        if not entries:
            return
        attrs["gen_ai.usage.input_tokens"] = sum(t.input for _, _, t in entries)
        attrs["gen_ai.usage.output_tokens"] = sum(t.output for _, _, t in entries)
        cached = sum(t.cached for _, _, t in entries)
        if cached:
            attrs["gen_ai.usage.cache_read.input_tokens"] = cached
        resp, provider = entries[0][0], entries[0][1]
        if provider:  # what the tokens were counted as (a FunctionModel named like a real model: its provider)
            attrs["gen_ai.provider.name"] = provider_name(provider)
        if resp:
            attrs["gen_ai.response.model"] = resp
            attrs.setdefault("gen_ai.request.model", resp)
        if self.price is not None:
            cost = self.price(rec)
            if cost is not None:
                attrs["agent_supervisor.cost_usd"] = cost

    def _content_attrs(self, rec: Record, call: dict[str, Any] | None, attrs: dict[str, Any], begin_only: bool) -> None:
        """Inputs and output (redacted), with ``content=True``; a tool call's arguments and result as GenAI names them."""
        tool = call is not None and call["kind"] == "tool"
        if "inputs" in rec:
            attrs["agent_supervisor.inputs"] = self._content(rec["inputs"])
            if tool:
                attrs["gen_ai.tool.call.arguments"] = attrs["agent_supervisor.inputs"]
        if "output" in rec and not begin_only:
            attrs["agent_supervisor.output"] = self._content(rec["output"])
            if tool:
                attrs["gen_ai.tool.call.result"] = attrs["agent_supervisor.output"]

    def _genai_content(self, rec: Record, attrs: dict[str, Any], *, proxied: bool, output: bool) -> None:
        """A model call's messages as the GenAI conventions name them (redacted JSON text)."""
        system, inputs, outputs = genai.call_content(rec) if proxied else genai.step_content(rec, output=output)
        for value, name in ((system, "gen_ai.system_instructions"), (inputs, "gen_ai.input.messages"),
                            (outputs if output else None, "gen_ai.output.messages")):
            if value:
                attrs[name] = self._content(value)

    # ------------------------------------------------------------------ supervisor events
    def event(self, ev: Mapping[str, Any]) -> list[Span]:
        """Take the next ``supervisor.jsonl`` event; return the spans it finishes (earlier attempts, on a spawn)."""
        name = ev.get("event")
        if not isinstance(name, str):
            return []
        ns = self._when(ev.get("ts"))
        att = ev.get("attempt")
        n = att if isinstance(att, int) and not isinstance(att, bool) and att > 0 else None
        if name == "spawn" and n is not None:
            return self._on_spawn(n, ns, ev)
        if name == "exit" and n is not None:
            self._on_exit(n, ns, ev)
        elif name == "restart":
            target = self.latest.get(n - 1) if n is not None and n > 1 else None
            self._event_on(target, SpanEvent("restart", ns, self._ev_attrs(ev)))
        elif name in ATTEMPT_EVENTS:
            self._event_on(self.latest.get(n) if n is not None else None, SpanEvent(name, ns, self._ev_attrs(ev)))
        else:  # supervisor-start, succeeded, and events of a later version
            self.root_events.append(SpanEvent(name, ns, self._ev_attrs(ev)))
        return []

    def _on_spawn(self, n: int, ns: int, ev: Mapping[str, Any]) -> list[Span]:
        """A spawn: a new attempt span; live, the attempts before it are over and go out now."""
        out: list[Span] = []
        a = self._attempt(n, by="spawn")
        a.spawned = True
        for prev in self._in_order() if self.live else ():
            if prev is not a and prev.order < a.order and not prev.emitted:
                for seq, (b, at) in sorted(self.begins.items()):  # their open steps were interrupted
                    if at == prev.key:
                        prev.interrupted.append(b)
                        del self.begins[seq]
                out.extend(self._emit_attempt(prev))
        a.see(ns)
        a.attrs["agent_supervisor.resume"] = bool(ev.get("resume"))
        if isinstance(ev.get("pid"), int):
            a.attrs["process.pid"] = ev["pid"]
        out.extend(self._announce(a))
        return out

    def _on_exit(self, n: int, ns: int, ev: Mapping[str, Any]) -> None:
        """An attempt's exit: its code or signal, and an ERROR status for a crash."""
        a = self._attempt(n)
        a.see(ns)
        a.exited = True
        code, sig = ev.get("code"), ev.get("signal")
        if isinstance(code, int):
            a.attrs["process.exit.code"] = code
        if sig:
            a.attrs["agent_supervisor.exit.signal"] = str(sig)
        for k in ("step", "progress", "uptime_s", "reason"):
            if ev.get(k) is not None:
                a.attrs[f"agent_supervisor.exit.{k}"] = _scalar(ev[k])
        where = f" in step {ev['step']}" if ev.get("step") else ""
        if sig:
            a.status = (STATUS_ERROR, f"killed by signal {sig}{where}")
        elif isinstance(code, int) and code not in (0, EXIT_RESTART):
            a.status = (STATUS_ERROR, f"exit code {code}{where}")

    @staticmethod
    def _ev_attrs(ev: Mapping[str, Any]) -> dict[str, Any]:
        return {f"agent_supervisor.{k}": _scalar(v) for k, v in ev.items()
                if k not in ("ts", "event") and v is not None and k != "stderr_tail"}

    def _in_order(self) -> list[_Attempt]:
        return sorted(self.attempts.values(), key=lambda a: a.order)

    def _emit_attempt(self, a: _Attempt) -> list[Span]:
        """The attempt's span, and the spans of its interrupted steps (ending with it)."""
        out = self._announce(a)
        a.emitted = True
        start = a.start_ns if a.start_ns is not None else (self.first_ns or 0)
        end = max(a.end_ns if a.end_ns is not None else start, start)
        attrs = {"agent_supervisor.attempt": a.number, **a.attrs, **self.agent_attrs("invoke_agent")}
        out += [s for b in a.interrupted for s in self._open_spans(b, a.key, end, interrupted=True)]
        a.interrupted.clear()
        out.append(Span(self.trace, span_id(self.key, f"attempt:{a.key}"), self.root, f"attempt {a.number}",
                        start, end, KIND_INTERNAL, attrs, list(a.events), *a.status))
        return out

    # ------------------------------------------------------------------ the end
    def finish(self, *, root: bool = True) -> list[Span]:
        """The spans not finished yet: steps still open, attempts, and the root span (``root=False``: not it, the
        live exporter's end when ``run.json`` has no final status: a later ``export`` sends it right)."""
        end = self.last_ns or 0
        out: list[Span] = []
        for _, (b, attempt) in sorted(self.begins.items()):
            # still open at the end: interrupted if its attempt has exited, else in flight now
            a = self.attempts.get(attempt) if attempt is not None else None
            if a is not None and a.exited and not a.emitted:
                a.interrupted.append(b)
            else:
                out.extend(self._open_spans(b, attempt, end, interrupted=a is not None and a.exited))
        self.begins.clear()
        self.begin_ids.clear()
        for a in self._in_order():
            if not a.emitted:
                out.extend(self._emit_attempt(a))
        for kids in self.children.values():  # (a begin dropped without its span: none is)
            out.extend(kids)
        self.children.clear()
        if root:
            out.append(self.root_span())
        return out

    def root_span(self) -> Span:
        meta = self.meta
        start = self.first_ns or 0
        end = max(self.last_ns or start, ts_ns(meta.get("ended")) or 0)
        attrs: dict[str, Any] = {"agent_supervisor.run.id": self.run_id}
        if isinstance(meta.get("status"), str):
            attrs["agent_supervisor.run.status"] = meta["status"]
        cmd = meta.get("command")
        if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
            attrs["agent_supervisor.run.command"] = cmd
        if self.attempts:
            attrs["agent_supervisor.run.attempts"] = len(self.attempts)
        attrs.update(usage_attributes(self.usage.result))
        attrs.update(self.agent_attrs("invoke_workflow"))
        return Span(self.trace, self.root, None, f"run {self.run_id}", start, max(end, start), KIND_INTERNAL,
                    attrs, list(self.root_events), *root_status(meta))


def _response_attrs(rec: Record, attrs: dict[str, Any], *, proxied: bool) -> None:
    """A model call's response id and finish reasons, where recorded."""
    rid, reasons = (genai.call_response if proxied else genai.step_response)(rec)
    if rid:
        attrs["gen_ai.response.id"] = rid
    if reasons:
        attrs["gen_ai.response.finish_reasons"] = reasons


def _last_of(price: Price) -> Price:
    """``price`` remembering its last record's cost: the totals and the step's span price each step once."""
    last: list[Any] = [None, None]

    def priced(rec: Mapping[str, Any]) -> float | None:
        if rec is not last[0]:
            last[0], last[1] = rec, price(rec)
        return last[1]  # type: ignore[no-any-return]

    return priced


def build_spans(
    run_dir: Path, *, content: bool = False, price: Price | None = None, redactor: Redactor | None = None
) -> tuple[str, list[Span]]:
    """Every span of the run directory (journal, events, run.json): ``(run id, spans)``, the root last."""
    meta = rundir.read_run_json(run_dir)
    run_id = str(meta.get("id") or run_dir.name)
    reader = JournalReader(run_dir)
    entries = reader.load()
    abandoned = fold(entries).abandoned_seqs
    try:
        default_ns: int | None = (run_dir / rundir.JOURNAL).stat().st_mtime_ns
    except OSError:
        default_ns = None
    b = SpanBuilder(run_id, meta, content=content, redactor=redactor, price=price, abandoned=abandoned,
                    default_ns=default_ns)
    spans: list[Span] = []
    calls = llm_calls.read_calls(run_dir) if run_dir.is_dir() else []
    cut = llm_calls.abandoned_spans(run_dir) if calls else []
    proxied = {id(c) for c in calls}
    for e in llm_calls.merge_by_ts((e for e in entries if isinstance(e, dict)), calls):  # the one timeline
        if id(e) in proxied:
            spans.extend(b.call(e, abandoned=llm_calls.in_spans(e.get("ts"), cut)))
        else:
            spans.extend(b.record(e))
    for ev in read_events(run_dir):
        spans.extend(b.event(ev))
    spans.extend(b.finish())
    return run_id, spans


# ---------------------------------------------------------------------- OTLP/JSON


def _any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [_any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attributes(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value(v)} for k, v in attrs.items()]


def span_json(s: Span) -> dict[str, Any]:
    d: dict[str, Any] = {
        "traceId": s.trace_id,
        "spanId": s.span_id,
        "name": s.name,
        "kind": s.kind,
        "startTimeUnixNano": str(s.start_ns),
        "endTimeUnixNano": str(s.end_ns),
        "attributes": _attributes(s.attributes),
    }
    if s.parent_id:
        d["parentSpanId"] = s.parent_id
    if s.events:
        d["events"] = [{"timeUnixNano": str(e.time_ns), "name": e.name, "attributes": _attributes(e.attributes)}
                       for e in s.events]
    status: dict[str, Any] = {"code": s.status_code}
    if s.status_message:
        status["message"] = s.status_message
    d["status"] = status
    return d


def export_request(run_id: str, spans: Iterable[Span]) -> dict[str, Any]:
    """One OTLP/JSON ``ExportTraceServiceRequest``: one resource, one scope, the spans."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource_attributes(run_id))},
                "scopeSpans": [
                    {"scope": {"name": SCOPE, "version": __version__}, "spans": [span_json(s) for s in spans]}
                ],
            }
        ]
    }


def write_otlp_json(run_dir: Path, out: Path, *, content: bool = False, price: Price | None = None) -> int:
    """Write the run's ``ExportTraceServiceRequest`` to ``out``; return the number of spans."""
    run_id, spans = build_spans(run_dir, content=content, price=price)
    return write_otlp_json_spans(run_id, spans, out)


def write_otlp_json_spans(run_id: str, spans: list[Span], out: Path) -> int:
    """Write ``spans`` as one ``ExportTraceServiceRequest`` to ``out`` (atomically, mode 0600: it may hold
    content); return the number of spans."""
    data = orjson.dumps(export_request(run_id, spans)) + b"\n"
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(spans)
