"""The ``log`` command's output lines: the text line of a record (:func:`format_record`) and the one loop
that renders the walk's items as text (:class:`TextLog`) or JSON (:func:`json_lines`).

The records of the model-call proxy's ``llm.jsonl`` (``"source": "llm"``) come in the same loops, merged into
the journal's by time: their text line (:func:`call_line`) says the file and its seq there, ``(llm.jsonl #3)``,
since the seq column is the journal's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import orjson

from ..core import llm_calls, stream, wire
from ..core.nesting import PATH_SEP
from ..core.pairing import Pairing
from ..core.records import DAMAGED, Kind, Record, preview, step_name
from ..core.usage import call_of, step_tokens
from ..export.pricing import step_cost

__all__ = ["CHANGED_INPUTS", "TextLog", "answer_text", "call_line", "call_summary", "format_record", "json_lines"]

_STEP, _BEGIN = wire.STEP, wire.BEGIN
_INTERRUPTED = "  (interrupted: no step record in its attempt)"
_IN_FLIGHT = "  (in flight: no step record yet)"


CHANGED_INPUTS = "changed inputs"
"""The ``message`` of the SDK's note for a step served on resume whose inputs differ from the call's."""


def call_summary(rec: Record) -> str:
    """What ``log`` adds to a model or tool call's step line: ``  [120 in (100 cached), 30 out, $0.000210]``
    (tokens summed over its ``usage``; the cost when the price table knows the model) or ``  [tool search]``.
    Nothing for a step without usage or ``call``, or with a malformed one (never a wrong figure)."""
    call = call_of(rec)
    if call is not None and call.get("kind") == "tool":
        name = call.get("tool")
        return f"  [tool {name}]" if isinstance(name, str) and name else ""
    tokens = step_tokens(rec)
    if tokens is None:
        return ""
    cached = f" ({tokens.cached} cached)" if tokens.cached else ""
    cost = step_cost(rec)
    price = f", ${cost:.6f}" if cost is not None else ""
    return f"  [{tokens.input} in{cached}, {tokens.output} out{price}]"


def format_record(rec: Record, pairing: Pairing | None = None, path: tuple[str, ...] = ()) -> str:
    """One line for a record, as ``log`` prints it.

    With ``pairing`` (the begins of the records shown paired with their steps by
    ``pos``): a begin whose step never came says so (in flight, or interrupted by
    the end of its process attempt), and if steps overlapped (concurrent steps) a
    begin or step shows its ``pos`` after the name (``search:a #4``), so a reader
    pairs a step with its begin however many records come between.

    ``path``: the names of the steps a nested step's record is nested in, outermost first; the line shows them
    before its name, joined by :data:`nesting.PATH_SEP` (a path, not an indent: it survives ``grep``, ``--tail``
    and ``--step``, and tells concurrent children of different parents apart).
    """
    kind = rec.get("kind", _STEP)
    if rec.get("source") == llm_calls.SOURCE:
        return call_line(rec)
    shown = kind if isinstance(kind, str | int | float) else preview(kind, 20)  # a hand-written null or list: as JSON
    head = f"{rec.get('seq', ''):>6} {str(rec.get('ts', ''))[:23]:23} {shown:10}"
    body = _step_body(rec, kind, pairing, path) if kind in (_STEP, _BEGIN) else _other_body(rec, kind)
    return f"{head} {body}"


def call_line(rec: Record) -> str:
    """The line of a record of ``llm.jsonl``: ``-`` in the journal's seq column, then for a call its step name
    (``llm:<provider>:<model>``), its answer's status and text, tokens and cost, latency, ``streamed``; for a
    note what it says; and the file and the record's seq there."""
    kind = str(rec.get("kind", _STEP))
    head = f"{'-':>6} {str(rec.get('ts', ''))[:23]:23} {kind:10}"
    where = f"  ({llm_calls.CALLS} #{rec.get('seq', '?')})"
    if kind != _STEP:
        return f"{head} {_note_body(rec)}{where}"
    body = step_name(rec) + _call_outcome(rec) + call_summary(rec) + _call_timing(rec)
    return f"{head} {body}{where}"


def _note_body(rec: Record) -> str:
    """What a note of ``llm.jsonl`` says: a call served on resume, one that diverged, or any other as its fields."""
    msg = rec.get("message")
    if msg == llm_calls.SERVED_NOTE:
        return f"llm call served: #{rec.get('served')} {rec.get('step')} to attempt {rec.get('attempt')}"
    if msg == llm_calls.DIVERGED_NOTE:
        return (f"LLM CALL DIVERGED: {rec.get('step')} was served #{rec.get('served')}, recorded for another "
                f"body (key {rec.get('recorded_key')}, now {rec.get('key')}; --llm-match order)")
    return preview({k: v for k, v in rec.items() if k not in ("kind", "seq", "ts", "id", "source")}, 90)


def _call_outcome(rec: Record) -> str:
    """A call's ``  ERROR`` with its type, status and message, or ``  -> `` its answer's status and text."""
    out, err = rec.get("output"), rec.get("error")
    if isinstance(err, dict):
        what = " ".join(str(err[k]) for k in ("type", "status") if err.get(k) is not None)
        return f"  ERROR {what}: {preview(err.get('message', ''), 60)}"
    if err is not None:
        return f"  ERROR {preview(err, 60)}"
    if isinstance(out, dict):
        text = answer_text(out)
        return f"  -> {out.get('status', '?')}" + (f" {preview(text, 60)}" if text is not None else "")
    return f"  -> {preview(out, 60)}"


def _call_timing(rec: Record) -> str:
    """A call's latency (``  830 ms``, ``  4.2 ms``) and ``  streamed`` if its answer came as a stream."""
    dur = rec.get("dur_ms")
    timing = ""
    if isinstance(dur, (int, float)) and not isinstance(dur, bool):
        timing = f"  {dur:.0f} ms" if dur >= 10 else f"  {dur:.1f} ms"
    call = call_of(rec)
    return timing + ("  streamed" if call is not None and call.get("stream") is True else "")


def answer_text(output: dict[str, Any]) -> str | None:
    """The text a proxied call's answer carries (Chat Completions, Responses, Anthropic Messages; a stream's
    deltas joined), ``None`` if it carries none that can be told (a tool call, another API)."""
    body = output.get("body")
    parts = _body_texts(body) if isinstance(body, dict) else []
    for block in output.get("events") or ():
        d = llm_calls.event_data(block) if isinstance(block, str) else None
        if isinstance(d, dict):
            parts += _event_texts(d)
    return "".join(parts) if parts else None


def _body_texts(body: dict[str, Any]) -> list[str]:
    """The texts of an answer's body: Chat Completions' choices' messages, Anthropic's text blocks, Responses'
    message items (or an ``output_text`` field where a body has no ``output`` list)."""
    parts = [m["content"] for c in _dicts(body.get("choices"))
             if isinstance(m := c.get("message"), dict) and isinstance(m.get("content"), str)]
    parts += _texts(body.get("content"))
    items = body.get("output")
    if isinstance(items, list):
        for item in _dicts(items):
            parts += _texts(item.get("content"), "output_text")
    elif isinstance(body.get("output_text"), str):  # the SDKs' convenience field, in a body dumped by one
        parts.append(body["output_text"])
    return parts


def _dicts(values: Any) -> list[dict[str, Any]]:
    """The dicts of ``values`` (none if it is not a list)."""
    return [v for v in values if isinstance(v, dict)] if isinstance(values, list) else []


def _texts(blocks: Any, kind: str | None = None) -> list[str]:
    """The ``text`` of each content block (of type ``kind`` only, if given)."""
    return [b["text"] for b in _dicts(blocks) if isinstance(b.get("text"), str) and (kind is None or b.get("type") == kind)]


def _event_texts(d: dict[str, Any]) -> list[str]:
    """The text pieces of a streamed event: Chat Completions' choices' deltas, Anthropic's ``content_block_delta``,
    Responses' ``response.output_text.delta``."""
    parts: list[str] = []
    for c in d.get("choices") or ():
        delta = c.get("delta") if isinstance(c, dict) else None
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
    delta = d.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("text"), str):  # Anthropic's content_block_delta
        parts.append(delta["text"])
    elif isinstance(delta, str) and d.get("type") == "response.output_text.delta":
        parts.append(delta)
    return parts


def _step_body(rec: Record, kind: str, pairing: Pairing | None, path: tuple[str, ...] = ()) -> str:
    """A begin's or step's text after its kind: the name (after its enclosing steps' names), ``#pos`` with
    overlapping steps, the marks or the output (or error), and a model or tool call's summary."""
    body = PATH_SEP.join((*path, step_name(rec))) if path else step_name(rec)
    if pairing is not None and pairing.overlapped and rec.get("pos") is not None:
        body += f" #{rec.get('pos')}"
    if kind == _BEGIN:
        if pairing is not None:
            seq = rec.get("seq")
            if seq in pairing.interrupted:
                body += _INTERRUPTED
            elif any(b.get("seq") == seq for b in pairing.open.values()):
                body += _IN_FLIGHT
        return body
    if rec.get("error") is not None:
        err = rec["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        body += f"  ERROR {preview(msg, 70)}"
    else:
        body += f"  -> {preview(rec.get('output'), 70)}"
    if "usage" in rec or "call" in rec:  # a model or tool call's step also shows its tokens and cost, or its tool
        body += call_summary(rec)
    return body


def _other_body(rec: Record, kind: str) -> str:
    """The text after the kind of any record but a begin or step."""
    if kind == Kind.CHECKPOINT:
        return f"{rec.get('name')} ({rec.get('file')})"
    if kind == Kind.ROLLBACK:
        return f"to {rec.get('checkpoint') or 'start'}: {rec.get('reason', '')}"
    if kind == Kind.START:
        return f"attempt {rec.get('attempt')} pid {rec.get('pid')}" + (" (resume)" if rec.get("resume") else "")
    if kind == Kind.NOTE and rec.get("message") == CHANGED_INPUTS:
        return f"CHANGED INPUTS: step {step_name(rec)!r} #{rec.get('pos')} was served with the output recorded for other inputs"
    if kind == DAMAGED:
        held = f"step position {rec.get('pos')}" if rec.get("holds_step") else f"was {rec.get('was')!r}"
        text = repr(str(rec.get("text") or ""))[1:-1]  # escaped: NUL and control bytes never reach the terminal
        return f"{rec.get('file')}:{rec.get('line')}: {rec.get('reason')} ({held}): {preview(text, 40)}"
    return preview({k: v for k, v in rec.items() if k not in ("kind", "seq", "ts", "id", "pos")}, 90)


class TextLog:
    """:func:`format_record` for the items of :meth:`stream.Walk.batches` (``parse_steps=True``), in one loop
    (:meth:`lines`): a writer step or begin line is made from what the walk read (a begin is not parsed at
    all, a step only for its output); any other record by :func:`format_record`."""

    def __init__(self, pairing: Pairing, all_: bool) -> None:
        self.pairing = pairing
        self.overlapped = pairing.overlapped
        self.interrupted = pairing.interrupted
        self.open = {int(b["seq"]) for b in pairing.open.values()}
        self.marked = self.interrupted | self.open
        """The begins shown in flight or interrupted."""
        leads = ("  ", "~ ") if all_ else ("", "")  # --all: the mark before each line (abandoned: "~ ")
        self.lead = tuple(x.encode() for x in leads)
        self._step = tuple(x + "%6d %-23.23s step       %s  -> %s" for x in leads)  # the mark in the format
        self._begin = tuple(x.encode() + b"%6d %s begin      %s" for x in leads)

    def lines(self, items: Iterable[stream.Row]) -> list[bytes]:
        """The lines of ``items`` (:meth:`stream.Walk.batches`' rows). The loop runs once a line of a million-record
        journal: the common lines, a writer step and a plain begin without ``#pos`` or a mark, are made here, with no
        call a line."""
        out: list[bytes] = []
        add = out.append
        fmt_step, fmt_begin = self._step, self._begin
        plain, marked = not self.overlapped, self.marked
        item: Any
        for item in items:
            seq, _, pos, raw, rec, ab, name, ts = item
            if raw is None:
                add(self.other(cast(stream.Item, item)))  # a row without its line is an Item
            elif rec is not None and plain:  # a writer step, parsed for its output
                o = rec.get("output")
                if type(o) is not str or len(o) > 70 or "\n" in o:
                    o = preview(o, 70)
                if "usage" in rec or "call" in rec:
                    o += call_summary(rec)
                add((fmt_step[ab] % (seq, ts, name, o)).encode())
            elif pos is None and seq not in marked:  # a plain begin (``plain_begins``): its name and ts as shown
                add(fmt_begin[ab] % (seq, ts, name))
            else:
                add(self.canon(item))
        return out

    def canon(self, item: stream.Row) -> bytes:
        """The line of a writer begin or step item by the general rules (escapes, ``#pos``, the marks)."""
        seq, kind, pos, raw, rec, ab, name, ts = item
        if rec is not None:  # parsed for its output: its name and ts are text
            body, when = str(rec["step"]), str(rec["ts"])
        else:
            assert name is not None and ts is not None and raw is not None
            body = orjson.loads(b'"' + name + b'"') if b"\\" in name else name.decode()
            when = ts.decode()
        if self.overlapped:
            body += f" #{pos}"
        if kind == _STEP:
            body += self.tail(rec if rec is not None else orjson.loads(raw or b"{}"))
        elif seq in self.interrupted:
            body += _INTERRUPTED
        elif seq in self.open:
            body += _IN_FLIGHT
        return self.lead[ab] + f"{seq:>6} {when[:23]:23} {kind:10} {body}".encode()

    @staticmethod
    def tail(rec: Record) -> str:
        """What a step line's text adds after its name: ``  -> `` the output's preview, and the call summary."""
        out = rec.get("output")
        tail = "  -> " + (out if type(out) is str and len(out) <= 70 and "\n" not in out else preview(out, 70))
        if "usage" in rec or "call" in rec:
            tail += call_summary(rec)
        return tail

    def other(self, item: stream.Item) -> bytes:
        """The line of a record that is not canonical (parsed; a nested step's with its path)."""
        path = item.path if isinstance(item, stream.NestedItem) else ()
        return self.lead[item.abandoned] + format_record(item.record(), self.pairing, path).encode()


def json_lines(items: Iterable[stream.Row]) -> list[bytes]:
    """``log --json``'s lines of ``items``: a writer line as its bytes (no decode, no encode), any other record
    encoded; ``"abandoned": true`` added on an abandoned branch (``--all``); ``"cost_usd"`` added to a step with
    usage the price table knows (:func:`~supervisor.export.pricing.step_cost`, as ``log``, ``cost`` and the
    exporter price it)."""
    out: list[bytes] = []
    add = out.append
    dumps, opt, tail = orjson.dumps, orjson.OPT_NON_STR_KEYS, wire.ABANDONED_TAIL
    for item in items:
        raw = item[3]
        if raw is not None:
            if b'"usage"' in raw:  # only then parsed
                raw = _with_cost(raw)
            add(raw[:-1] + tail if item[5] else raw)
        else:
            line = dict(item[4] or ())
            if item[5]:
                line["abandoned"] = True
            cost = step_cost(line) if "usage" in line else None
            if cost is not None:
                line["cost_usd"] = cost
            add(dumps(line, option=opt))
    return out


def _with_cost(raw: bytes) -> bytes:
    """A writer line with its step's ``cost_usd`` appended (the line as it is when it has none)."""
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    cost = step_cost(rec) if isinstance(rec, dict) else None
    if cost is None or not raw.endswith(b"}"):
        return raw
    return raw[:-1] + b',"cost_usd":' + orjson.dumps(cost) + b"}"
