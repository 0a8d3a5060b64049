"""``supervise --otlp-endpoint``: the supervisor exports the run's spans over OTLP/HTTP while it runs.

The agent is not slowed: the SDK does nothing more; the supervisor's loop only
queues what its journal watcher read and the events it wrote (one ``put`` each),
and a thread of its own builds the spans (:class:`~supervisor.export.otlp.SpanBuilder`,
the same spans as ``export``) and sends them in batches, at most every
``interval`` seconds or ``batch`` spans. An attempt's ``attempt N started`` span
goes out at its spawn (the parent of its steps: a receiver holds a navigable tree
while the run goes on); a step's span once its step record is read and it is safe
from a rollback (below); an attempt's own span (its outcome) when the next attempt
is spawned; the rest when the supervisor ends, the run's root span only once
``run.json`` holds the run's final status (never a "running" root: receivers keep
the first copy of a span or set a trace's state on its first insert).

Rollbacks: the spans of steps after the latest checkpoint are held (a rollback to
it abandons them: the SDK's after a step failed in attempt after attempt, the
supervisor's crash-loop one) until a later checkpoint is recorded or the run ends;
a rollback marks the held spans of its abandoned branch (``agent_supervisor.abandoned``)
before they go, so the first copy a receiver gets has the mark. Held at most
:data:`HOLD_S` seconds and :data:`HOLD` spans (then the oldest go, and a later
rollback cannot mark them), and a rollback to an older checkpoint than the latest
(a manual one) finds the spans before the latest gone: ``export`` marks those.
Sending never stops the run: a failure
is reported once (:meth:`OtlpLive.take_reports`, which the loop writes to
``supervisor.jsonl``); the spans of a failed batch, and those finished in the
``pause`` seconds after a failure, are dropped (counted in :attr:`OtlpLive.dropped`),
so an unreachable collector costs neither memory nor a backlog; then sending resumes.

Only what this supervisor reads is exported live (the records of earlier
supervisors of the same run directory: ``agent-supervisor export``); the records
before it count in the root span's totals (tokens, cost, saved by resume), so the
root says the same as ``export``'s.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rundir
from ..core.journal_reader import JournalReader

__all__ = ["HOLD", "OtlpLive"]

HOLD = 10_000
"""Spans held at most while a rollback could abandon them (about 20 MB)."""
HOLD_S = 120.0
"""Seconds a span is held at most: a run without checkpoints still shows its steps while it runs."""

if TYPE_CHECKING:  # imported when the thread starts: the exporter costs nothing until then
    from ..export.otlp import Span, SpanBuilder

_STOP = object()


class OtlpLive:
    """The live exporter of one supervised run (see the module docstring)."""

    def __init__(
        self, run_dir: Path, run_id: str, endpoint: str | None, *, interval: float = 1.0, batch: int = 256,
        timeout: float = 5.0, pause: float = 30.0, known_records: int = 0,
    ) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.endpoint = endpoint
        self.interval = interval
        self.batch = batch
        self.timeout = timeout
        self.pause = pause
        self.known_records = known_records
        """Journal records the supervisor had read before it started feeding us (they count in the totals)."""
        self.dropped = 0
        """Spans not sent: of failed batches, or finished while sending paused after a failure."""
        self._paused_until = 0.0
        self.sent = 0
        """Spans sent so far."""
        self.failures = 0
        """Batches that could not be sent."""
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reports: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._reported = False
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)

    def start(self) -> OtlpLive:
        self._thread.start()
        return self

    # the supervisor's loop: cheap, never blocks
    def journal(self, entries: Iterable[Any]) -> None:
        """Records the journal watcher read (bad lines are skipped by the thread)."""
        self._q.put(("j", entries))

    def calls(self, records: list[Any], *, preload: bool = False) -> None:
        """Records of the proxy's ``llm.jsonl`` (blobs expanded); ``preload``: written before this exporter
        started (they count in the totals only, as the journal's do)."""
        if records:
            self._q.put(("p" if preload else "c", records))

    def event(self, event: str, attempt: int, fields: Mapping[str, Any]) -> None:
        """An event the supervisor wrote to ``supervisor.jsonl``."""
        self._q.put(("e", {"event": event, "attempt": attempt, **fields}))

    def take_reports(self) -> list[dict[str, Any]]:
        """Fields of the ``export-error`` events to write (at most one in the exporter's life)."""
        out = []
        while True:
            try:
                out.append(self._reports.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float = 10.0) -> None:
        """Send what is left (the root span among it), waiting at most ``timeout`` seconds."""
        if self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(timeout)

    # the thread
    def _run(self) -> None:
        from ..export.otlp import SpanBuilder
        from ..export.otlp_http import OtlpSender
        from ..export.pricing import step_cost

        try:
            sender = OtlpSender(self.run_id, self.endpoint, timeout=self.timeout)
        except Exception as e:
            self._fail(f"{type(e).__name__}: {e}", 0)
            return
        self.url = sender.url
        builder = SpanBuilder(self.run_id, rundir.read_run_json(self.run_dir), price=step_cost, live=True)
        self._preload(builder)
        self._hold = _Hold()
        pending: list[Span] = []
        next_send = time.monotonic() + self.interval
        stop = False
        while not stop:
            try:
                item = self._q.get(timeout=max(0.0, next_send - time.monotonic()))
            except queue.Empty:
                item = None
            stop = item is _STOP
            if item is not None:
                pending.extend(self._spans_of(builder, item))
            pending.extend(self._hold.due(time.monotonic()))
            if pending and (stop or len(pending) >= self.batch or time.monotonic() >= next_send):
                if stop:
                    self._paused_until = 0.0  # the last spans (the root among them) are tried whatever happened
                self._send(sender, pending)
                pending = []
            if time.monotonic() >= next_send:
                next_send = time.monotonic() + self.interval
        sender.close()

    def _preload(self, builder: SpanBuilder) -> None:
        """The records from before this exporter started count in the totals (unparsed unless they carry usage)."""
        if not self.known_records:
            return
        for ent in JournalReader(self.run_dir).load(lazy=True):
            if (ent["seq"] if isinstance(ent, dict) else ent.seq) >= self.known_records:
                break
            builder.preload(ent)

    def _spans_of(self, builder: SpanBuilder, item: Any) -> list[Span]:
        """The spans to send after one queued item: the stop (all that is left), journal records, or an event."""
        hold = self._hold
        if item is _STOP:
            return hold.release() + builder.finish(root=self._final(builder))
        what, data = item
        if what == "e":
            return hold.event(data, builder.event(data))
        if what == "p":
            for rec in data:
                builder.usage.add_call(rec)
            return []
        out: list[Span] = []
        for rec in data:
            if isinstance(rec, dict):
                out.extend(hold.record(rec, builder.record(rec)) if what == "j" else hold.add(builder.call(rec)))
        return out

    def _final(self, builder: SpanBuilder) -> bool:
        """Whether ``run.json`` holds the run's final status now (then the root span says it)."""
        from ..export.otlp import FINAL_STATUSES

        try:
            meta = rundir.read_run_json(self.run_dir)
        except Exception:  # unreadable now: no root rather than a wrong one ('export' sends it)
            return False
        builder.meta.update(meta)
        return meta.get("status") in FINAL_STATUSES

    def _send(self, sender: Any, spans: list[Any]) -> None:
        if time.monotonic() < self._paused_until:
            self.dropped += len(spans)
            return
        if sender.send(spans):
            self.sent += len(spans)
            return
        self.failures += 1
        self.dropped += len(spans)
        self._paused_until = time.monotonic() + self.pause
        self._fail(sender.last_error or "unknown error", len(spans))

    def _fail(self, error: str, spans: int) -> None:
        if self._reported:
            return
        self._reported = True
        self._reports.put({
            "endpoint": getattr(self, "url", None) or self.endpoint,
            "error": error,
            "spans_dropped": spans,
            "note": f"spans finished in the next {self.pause:g} s are dropped, then export is tried again; "
                    "later failures are not reported again",
        })


class _Hold:
    """The step spans a rollback could still abandon (see the module docstring), released and marked."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.since: list[float] = []  # when each held span came (monotonic), in the same order
        self.checkpoints: dict[str, tuple[int, int]] = {}  # name -> (seq, time) of its latest checkpoint record

    def add(self, spans: list[Span]) -> list[Span]:
        """Hold step and call spans (the others go now); the oldest go when more than :data:`HOLD` are held."""
        out: list[Span] = []
        now = time.monotonic()
        for s in spans:
            a = s.attributes
            if "agent_supervisor.seq" in a or "agent_supervisor.llm.seq" in a:
                self.spans.append(s)
                self.since.append(now)
            else:
                out.append(s)
        if len(self.spans) > HOLD:
            out += self._take(HOLD // 2)
        return out

    def due(self, now: float) -> list[Span]:
        """The spans held longer than :data:`HOLD_S`."""
        n = 0
        while n < len(self.since) and now - self.since[n] > HOLD_S:
            n += 1
        return self._take(n) if n else []

    def _take(self, n: int) -> list[Span]:
        out = self.spans[:n]
        del self.spans[:n], self.since[:n]
        return out

    def release(self) -> list[Span]:
        return self._take(len(self.spans))

    def record(self, rec: dict[str, Any], spans: list[Span]) -> list[Span]:
        """A journal record's spans: held; a checkpoint releases what is before it, a rollback marks its branch."""
        from ..export.otlp import ts_ns

        kind = rec.get("kind")
        if kind == "checkpoint" and isinstance(rec.get("seq"), int):
            self.checkpoints[str(rec.get("name"))] = (rec["seq"], ts_ns(rec.get("ts")) or 0)
            return self.release() + self.add(spans)
        if kind == "rollback":
            cp = rec.get("checkpoint_seq")
            cp_seq = cp if isinstance(cp, int) else self.checkpoints.get(str(rec.get("checkpoint")), (0, 0))[0]
            self._mark(cp_seq, self._time_of(cp_seq))
            return self.release() + self.add(spans)
        return self.add(spans)

    def event(self, ev: Mapping[str, Any], spans: list[Span]) -> list[Span]:
        """A supervisor event's spans; its rollback (whose journal record may be read after the next spawn) marks
        and releases what it abandoned."""
        if ev.get("event") == "rollback":
            cp = ev.get("checkpoint")
            self._mark(*(self.checkpoints.get(str(cp), (0, 0)) if cp is not None else (0, 0)))
            return self.release() + self.add(spans)
        return self.add(spans)  # a spawn's: the attempts before it, and their interrupted steps (held)

    def _time_of(self, seq: int) -> int:
        return next((ns for s, ns in self.checkpoints.values() if s == seq), 0)

    def _mark(self, cp_seq: int, cp_ns: int) -> None:
        """Mark the held spans after the checkpoint at ``cp_seq`` (a call: made after its time), and their children."""
        marked: set[str] = set()
        for _ in range(2):  # children come before or after their parent in the list
            for s in self.spans:
                a = s.attributes
                seq = a.get("agent_supervisor.seq")
                if (seq > cp_seq if isinstance(seq, int) else s.start_ns >= cp_ns) or s.parent_id in marked:
                    a["agent_supervisor.abandoned"] = True
                    marked.add(s.span_id)
