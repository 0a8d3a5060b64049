"""``supervise --otlp-endpoint``: the supervisor exports the run's spans over OTLP/HTTP while it runs.

The agent is not slowed: the SDK does nothing more; the supervisor's loop only
queues what its journal watcher read and the events it wrote (one ``put`` each),
and a thread of its own builds the spans (:class:`~supervisor.export.otlp.SpanBuilder`,
the same spans as ``export``) and sends them in batches, at most every
``interval`` seconds or ``batch`` spans. A step's span goes out once its step
record is read, an attempt's when the next attempt is spawned, the rest and the
run's root span when the supervisor ends. Sending never stops the run: a failure
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

__all__ = ["OtlpLive"]

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

    @staticmethod
    def _spans_of(builder: SpanBuilder, item: Any) -> list[Span]:
        """The spans one queued item finishes: the stop (all that is left), journal records, or an event."""
        if item is _STOP:
            return builder.finish()
        what, data = item
        out: list[Span] = []
        if what == "e":
            return builder.event(data)
        if what == "p":
            for rec in data:
                builder.usage.add_call(rec)
            return out
        for rec in data:
            if isinstance(rec, dict):
                out.extend(builder.record(rec) if what == "j" else builder.call(rec))
        return out

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
