"""The model calls the proxy recorded (``llm.jsonl``): their identity, their compacted bodies, their usage.

The proxy (:mod:`supervisor.supervise.llm_proxy`) is the file's one writer; this module is what every reader
and the proxy share, and imports no HTTP library. The layout (docs/run-directory.md, "Model calls"):

- one record per finished call, of kind ``step`` (``step``: ``llm:<provider>:<model>``), with ``call``
  (``{"kind": "model", "via": "proxy", "provider", "model", "api", "stream"}``), ``key`` and ``k`` (the call's
  identity and its occurrence in its attempt), ``match`` (the order mode's identity), ``inputs`` (``method``,
  ``path``, allowlisted ``headers``, ``body``), ``output`` (``status``, ``headers``, ``body`` or the SSE
  ``events``) or ``error`` (an answer with status >= 400, or none), and ``usage`` as every step has it;
- repeated content is stored once: an item of a request's ``messages``/``input`` list, or its whole ``tools``,
  ``system`` or ``instructions``, of at least :data:`BLOB_MIN` bytes, is written as ``{"$blob": H}``, and the
  first record of the file that uses ``H`` carries it in its ``blobs`` map (:func:`compact`, :func:`expand`);
- ``note`` records: ``llm call served`` (informational, not synced) and ``llm call diverged``.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from . import rundir, wire
from .journal_reader import JournalReader
from .records import Record

__all__ = [
    "BLOB_MIN",
    "CALLS",
    "abandoned_spans",
    "api_of",
    "body_value",
    "compact",
    "expand",
    "identity",
    "order_identity",
    "read_calls",
    "sse_events",
    "step_calls",
    "usage_of",
]

CALLS = rundir.CALLS
"""The proxy's file in the run directory (its lock: ``llm.lock``)."""
SOURCE = "llm"
"""The ``source`` readers give the records of :data:`CALLS` (the journal's have none)."""
BLOB_MIN = 128
"""A message item this long (canonical JSON bytes) or longer is stored once, as a blob."""
BLOB = "$blob"
SERVED_NOTE = "llm call served"
DIVERGED_NOTE = "llm call diverged"

_BLOB_LISTS = ("messages", "input")
_BLOB_VALUES = ("tools", "system", "instructions")
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical(value: Any) -> bytes:
    """``value`` as canonical JSON (sorted keys): what identities and blob names hash."""
    return orjson.dumps(value, option=_SORTED)


def _h(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def identity(provider: str, method: str, path: str, body: Any) -> str:
    """A call's identity (``key``): provider, method, path and canonical body (blobs expanded)."""
    return _h(canonical([provider, method, path, body]))


def order_identity(provider: str, method: str, path: str, model: Any) -> str:
    """A call's identity in ``--llm-match order`` (``match``): the endpoint and the model, not the body."""
    return _h(canonical([provider, method, path, model if isinstance(model, str) else None]))


def api_of(path: str) -> str:
    """Which API a request path is: ``chat``, ``responses``, ``messages``, ``embeddings`` or ``other``."""
    p = path.split("?", 1)[0].rstrip("/")
    for suffix, api in (("/chat/completions", "chat"), ("/responses", "responses"), ("/messages", "messages"),
                        ("/embeddings", "embeddings")):
        if p.endswith(suffix):
            return api
    return "other"


def body_value(raw: bytes, content_type: str = "") -> Any:
    """A body as stored: its JSON value, else ``{"$text": ...}`` (UTF-8) or ``{"$base64": ...}``."""
    if not raw:
        return None
    if "json" in content_type or raw[:1] in (b"{", b"["):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # not JSON after all: kept whole as text or base64 below
    try:
        return {"$text": raw.decode()}
    except UnicodeDecodeError:
        return {"$base64": base64.b64encode(raw).decode()}


def body_bytes(value: Any) -> bytes:
    """The bytes of a body stored by :func:`body_value` (JSON is re-encoded compactly)."""
    if value is None:
        return b""
    if isinstance(value, dict) and len(value) == 1:
        if "$text" in value:
            return str(value["$text"]).encode()
        if "$base64" in value:
            return base64.b64decode(value["$base64"])
    return orjson.dumps(value)


# --------------------------------------------------------------------------- blobs and prefixes
def compact(body: Any, known: set[str], blobs: dict[str, Any]) -> Any:
    """``body`` with its long message items replaced by ``{"$blob": H}``; the items no line defined yet
    (not in ``known``) are added to ``blobs`` (the record's ``blobs`` map). ``known`` is not changed: the
    caller adds a record's blobs once its line is written. (:class:`Compactor` also writes prefixes.)"""
    return Compactor(known).compact(body, blobs)


class Compactor:
    """The writer's side of the layout: which blobs the file defines, and which message lists its records hold.

    A request resends its conversation: its ``messages`` (or ``input``) list starts with the whole list of an
    earlier request. That part is written as ``{"$prefix": SEQ, "n": N, "items": [...]}``: the first ``N`` items
    of the same field of the record at ``SEQ`` of this file, then ``items``; so a conversation of ``T`` turns
    writes each message once, not ``T`` times. Lists are known by a chained hash of their items' blob names."""

    def __init__(self, known: set[str] | None = None) -> None:
        self.known: set[str] = known if known is not None else set()
        self.lists: dict[str, dict[str, int]] = {name: {} for name in _BLOB_LISTS}
        """Per list field: the chained hash of a record's whole list -> that record's seq."""

    def compact(self, body: Any, blobs: dict[str, Any], heads: dict[str, str] | None = None) -> Any:
        """``body`` as written: long items as blobs (new ones added to ``blobs``), a known prefix as a reference;
        ``heads`` gets the hash of each whole list, for :meth:`written`."""
        if not isinstance(body, dict):
            return body
        out = dict(body)
        for name in _BLOB_LISTS:
            items = out.get(name)
            if isinstance(items, list):
                out[name] = self._list(name, items, blobs, heads)
        for name in _BLOB_VALUES:
            if name in out:
                out[name] = _blob(out[name], self.known, blobs)
        return out

    def _list(self, name: str, items: list[Any], blobs: dict[str, Any], heads: dict[str, str] | None) -> Any:
        seen = self.lists[name]
        chain = _chain(items)
        if heads is not None and chain:
            heads[name] = chain[-1]
        if seen:
            for n in range(len(items), 0, -1):
                seq = seen.get(chain[n - 1])
                if seq is not None:
                    return {PREFIX: seq, "n": n, "items": [_blob(item, self.known, blobs) for item in items[n:]]}
        return [_blob(item, self.known, blobs) for item in items]

    def written(self, seq: int, heads: Mapping[str, str], blobs: Mapping[str, Any]) -> None:
        """The record at ``seq``, whose lists :meth:`compact` named ``heads``, is in the file: later records may
        use its blobs and its lists."""
        self.known.update(blobs)
        for name, head in heads.items():
            self.lists[name][head] = seq

    @classmethod
    def load(cls, run_dir: Path) -> Compactor:
        """The state of the run's ``llm.jsonl`` as it is (for a writer that opens it again)."""
        c = cls()
        if (run_dir / CALLS).exists():
            reader = CallsReader(run_dir)
            for rec in reader.read_new():
                inputs = rec.get("inputs")
                body = inputs.get("body") if isinstance(inputs, dict) else None
                if isinstance(rec.get("seq"), int) and isinstance(body, dict):
                    heads = {name: _chain(body[name])[-1] for name in _BLOB_LISTS
                             if isinstance(body.get(name), list) and body[name]}
                    c.written(rec["seq"], heads, {})
            c.known = set(reader.blobs)  # the blob names the lines define, from the same read
        return c


PREFIX = "$prefix"


def _chain(items: list[Any]) -> list[str]:
    """For each ``n``, a hash naming the first ``n`` items (chained: each from the one before and the item)."""
    out = []
    h = b""
    for item in items:
        h = hashlib.sha256(h + canonical(item)).digest()[:16]
        out.append(h.hex())
    return out


def _blob(value: Any, known: set[str], blobs: dict[str, Any]) -> Any:
    data = canonical(value)
    if len(data) < BLOB_MIN and not (isinstance(value, dict) and (BLOB in value or PREFIX in value)):
        return value
    h = _h(data)
    if h not in known:
        blobs[h] = value
    return {BLOB: h}


def expand(body: Any, blobs: Mapping[str, Any], lists: Mapping[tuple[int, str], list[Any]] | None = None) -> Any:
    """``body`` with every ``{"$blob": H}`` and ``{"$prefix": ...}`` of :class:`Compactor` replaced by what they
    name: ``blobs`` by name, ``lists`` (the expanded lists of earlier records by ``(seq, field)``). A name no line
    defined stays as it is: a reader shows it, never guesses."""
    if not isinstance(body, dict):
        return body
    out = dict(body)
    for name in _BLOB_LISTS:
        items = out.get(name)
        if isinstance(items, dict) and PREFIX in items and lists is not None:
            full = _unprefix(items, name, blobs, lists)
            if full is not None:
                out[name] = full
        elif isinstance(items, list):
            out[name] = [_unblob(item, blobs) for item in items]
    for name in _BLOB_VALUES:
        if name in out:
            out[name] = _unblob(out[name], blobs)
    return out


def _unprefix(items: Mapping[str, Any], name: str, blobs: Mapping[str, Any],
              lists: Mapping[tuple[int, str], list[Any]]) -> list[Any] | None:
    """A ``{"$prefix": seq, "n": n, "items": rest}`` list whole: the first ``n`` items of record ``seq``'s list
    ``name``, then ``rest`` (``None``: that record's list is not known, or ``n`` does not fit it)."""
    base = lists.get((items[PREFIX], name)) if isinstance(items.get(PREFIX), int) else None
    n, rest = items.get("n"), items.get("items")
    if base is not None and type(n) is int and 0 <= n <= len(base) and isinstance(rest, list):
        return base[:n] + [_unblob(item, blobs) for item in rest]
    return None


def _unblob(value: Any, blobs: Mapping[str, Any]) -> Any:
    if isinstance(value, dict) and len(value) == 1 and BLOB in value:
        h = value[BLOB]
        if isinstance(h, str) and h in blobs:
            return blobs[h]
    return value


# --------------------------------------------------------------------------- answers
def sse_events(data: bytes) -> tuple[list[str], bytes]:
    """The complete SSE event blocks in ``data`` (each without its blank line), and the rest (incomplete)."""
    data = data.replace(b"\r\n", b"\n")
    events: list[str] = []
    while True:
        i = data.find(b"\n\n")
        if i < 0:
            return events, data
        block = data[:i]
        data = data[i + 2 :]
        if block.strip():
            events.append(block.decode(errors="replace"))


def event_data(block: str) -> Any:
    """The JSON of an SSE event's ``data:`` lines (``None``: none, ``[DONE]`` or not JSON)."""
    parts = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
    if not parts:
        return None
    text = "\n".join(parts)
    if text == "[DONE]":
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def is_final_event(block: str) -> bool:
    """Whether an SSE event ends its stream (OpenAI's ``[DONE]``, Anthropic's ``message_stop``, the Responses
    API's ``response.completed``/``failed``/``incomplete``): the proxy sends it only once the call is durable."""
    for line in block.split("\n"):
        if line.startswith("data:") and line[5:].strip() == "[DONE]":
            return True
        if line.startswith("event:") and line[6:].strip() in (
            "message_stop", "response.completed", "response.failed", "response.incomplete"):
            return True
    return False


def _n(v: Any) -> int:
    return v if type(v) is int and v >= 0 else 0


def _usage(provider: str, model: Any, u: Mapping[str, Any], anthropic: bool) -> dict[str, Any]:
    if anthropic:
        read = _n(u.get("cache_read_input_tokens"))
        write = _n(u.get("cache_creation_input_tokens"))
        out: dict[str, Any] = {"input_tokens": _n(u.get("input_tokens")) + read + write,
                               "output_tokens": _n(u.get("output_tokens")), "cached_tokens": read}
        if write:
            out["cache_write_tokens"] = write
    else:
        inp = u.get("prompt_tokens", u.get("input_tokens"))
        outp = u.get("completion_tokens", u.get("output_tokens"))
        details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
        odetails = u.get("completion_tokens_details") or u.get("output_tokens_details") or {}
        out = {"input_tokens": _n(inp), "output_tokens": _n(outp),
               "cached_tokens": _n(details.get("cached_tokens")) if isinstance(details, dict) else 0}
        reasoning = _n(odetails.get("reasoning_tokens")) if isinstance(odetails, dict) else 0
        if reasoning:
            out["reasoning_tokens"] = reasoning
    return {"model": model if isinstance(model, str) else None, "provider": provider, **out}


def usage_of(provider: str, body: Any = None, events: Iterable[str] = (), model: Any = None) -> list[dict[str, Any]] | None:
    """What the answer says it consumed, as a step's ``usage`` (``None``: it says nothing).

    OpenAI Chat Completions and Responses (the usage chunk of a stream, ``response.completed``), Anthropic
    Messages (``message_start`` then ``message_delta`` of a stream; cache reads and writes are input), and
    OpenAI-compatible servers (the same ``usage`` object)."""
    anthropic = provider == "anthropic"
    if isinstance(body, dict):
        u = body.get("usage")
        if isinstance(body.get("response"), dict):  # a Responses event wrapper
            u = body["response"].get("usage")
        if isinstance(u, dict):
            return [_usage(provider, body.get("model", model), u, anthropic)]
        return None
    fold = _anthropic_event if anthropic else _openai_event
    found: dict[str, Any] = {}
    seen = False
    for block in events:
        d = event_data(block)
        if not isinstance(d, dict):
            continue
        if isinstance(d.get("model"), str):
            model = d["model"]
        model, said = fold(d, model, found)
        seen = seen or said
    return [_usage(provider, model, found, anthropic)] if seen else None


def _anthropic_event(d: Mapping[str, Any], model: Any, found: dict[str, Any]) -> tuple[Any, bool]:
    """One event of an Anthropic stream into ``found``: ``message_start`` has the model and the input,
    ``message_delta`` adds the output; return the model and whether the event said a usage."""
    msg = d.get("message")
    if d.get("type") == "message_start" and isinstance(msg, dict):
        model = msg.get("model", model)
        if isinstance(msg.get("usage"), dict):
            found.update(msg["usage"])
            return model, True
    elif d.get("type") == "message_delta" and isinstance(d.get("usage"), dict):
        found.update({k: v for k, v in d["usage"].items() if v is not None})
        return model, True
    return model, False


def _openai_event(d: Mapping[str, Any], model: Any, found: dict[str, Any]) -> tuple[Any, bool]:
    """One chunk of an OpenAI (or compatible) stream: the last ``usage`` said replaces ``found`` (a Responses
    event's is in its ``response``, with the model); return the model and whether the chunk said a usage."""
    resp = d.get("response")
    if isinstance(resp, dict):
        model = resp.get("model", model)
        u = resp.get("usage")
    else:
        u = d.get("usage")
    if not isinstance(u, dict):
        return model, False
    found.clear()
    found.update(u)
    return model, True


# --------------------------------------------------------------------------- reading
def read_calls(run_dir: Path) -> list[Record]:
    """Every record of the run's ``llm.jsonl`` in file order, blobs expanded, each with ``"source": "llm"``
    (``[]`` without the file). A line that is not a JSON object is skipped here; ``JournalReader`` on the file
    reports it with its line number."""
    if not (run_dir / CALLS).exists():
        return []
    return CallsReader(run_dir).read_new()


class CallsReader:
    """Reads ``llm.jsonl`` as it grows: :meth:`read_new` gives the records committed since the last read, blobs
    and prefixes expanded (what the lines before defined is kept), each with ``"source": "llm"``."""

    def __init__(self, run_dir: Path) -> None:
        self.reader = JournalReader(run_dir / CALLS)
        self.blobs: dict[str, Any] = {}
        self.lists: dict[tuple[int, str], list[Any]] = {}

    def read_new(self) -> list[Record]:
        out: list[Record] = []
        for entry in self.reader.read_new():
            if not isinstance(entry, dict):
                continue
            rec = dict(entry)
            defined = rec.pop("blobs", None)
            if isinstance(defined, dict):
                self.blobs.update(defined)
            inputs = rec.get("inputs")
            if isinstance(inputs, dict) and "body" in inputs:
                body = expand(inputs["body"], self.blobs, self.lists)
                rec["inputs"] = {**inputs, "body": body}
                seq = rec.get("seq")
                if isinstance(body, dict) and isinstance(seq, int):
                    for name in _BLOB_LISTS:
                        if isinstance(body.get(name), list):
                            self.lists[(seq, name)] = body[name]
            rec["source"] = SOURCE
            out.append(rec)
        return out


def step_calls(run_dir: Path) -> list[Record]:
    """The call records (kind ``step``) of :func:`read_calls`."""
    return [r for r in read_calls(run_dir) if r.get("kind", wire.STEP) == wire.STEP]


def known_blobs(run_dir: Path) -> set[str]:
    """The blob names the lines of ``llm.jsonl`` define (what a new writer need not write again)."""
    path = run_dir / CALLS
    names: set[str] = set()
    if path.exists():
        for entry in JournalReader(path).load():
            if isinstance(entry, dict) and isinstance(entry.get("blobs"), dict):
                names.update(entry["blobs"])
    return names


def abandoned_spans(run_dir: Path) -> list[tuple[str, str]]:
    """``(checkpoint ts, rollback ts)`` of every rollback of the journal that cut: a proxied call whose record's
    ``ts`` lies in one of them was made on a branch the rollback abandoned (it is never served again)."""
    from .history import Fold  # the journal's one fold, only when there is a journal to fold

    if not _mentions(run_dir, wire.ROLLBACK.encode()):
        return []  # a raw scan, not a parse: a supervisor calls this before every attempt
    entries = [e for e in JournalReader(run_dir).load() if isinstance(e, dict)]
    if not any(e.get("kind") == wire.ROLLBACK for e in entries):
        return []
    fold = Fold()
    fold.extend(entries)
    ts_of = {e.get("seq"): e.get("ts") for e in entries if e.get("kind") in (wire.CHECKPOINT, wire.ROLLBACK)}
    spans = []
    for target, rb in fold.cuts:
        t0, t1 = ts_of.get(target), ts_of.get(rb)
        if isinstance(t0, str) and isinstance(t1, str):
            spans.append((t0, t1))
    return spans


def _mentions(run_dir: Path, word: bytes) -> bool:
    """Whether any file of the journal holds ``word`` at all."""
    import mmap

    from .segments import segment_paths

    for path in segment_paths(run_dir):
        try:
            with os.fdopen(rundir.open_run_file(path, os.O_RDONLY), "rb") as f:
                if not os.fstat(f.fileno()).st_size:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    if m.find(word) >= 0:
                        return True
        except (FileNotFoundError, ValueError):
            continue
    return False


def in_spans(ts: Any, spans: Iterable[tuple[str, str]]) -> bool:
    """Whether ``ts`` lies after the start and before the end of one of ``spans``."""
    return isinstance(ts, str) and any(t0 < ts < t1 for t0, t1 in spans)


def merge_by_ts(journal: Iterable[Record], calls: Iterable[Record]) -> Iterator[Record]:
    """The journal's records and the proxy's in one timeline: by ``ts``, the journal's first at equal times,
    each file's own order kept."""
    import heapq

    def keyed(recs: Iterable[Record], src: int) -> Iterator[tuple[str, int, int, Record]]:
        last = ""
        for i, r in enumerate(recs):
            ts = r.get("ts")
            last = ts if isinstance(ts, str) and ts > last else last
            yield last, src, i, r

    for _, _, _, r in heapq.merge(keyed(journal, 0), keyed(calls, 1)):
        yield r
