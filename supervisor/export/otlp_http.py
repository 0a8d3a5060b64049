"""Sending a run's spans over OTLP/HTTP with the official exporter (the only module importing OpenTelemetry).

``opentelemetry-exporter-otlp-proto-http`` is an optional extra
(``pip install 'agent-supervisor-tui[otlp]'``), imported when a sender is made.
The spans of :mod:`supervisor.export.otlp` become the SDK's ``ReadableSpan``
objects (same ids, times, attributes, events, status) and go through
``OTLPSpanExporter.export``, so what a collector gets is encoded by
OpenTelemetry's own code; where the exporter has its HTTP client (``_client.export(bytes)``, the versions this
was measured with), the spans are encoded by :mod:`supervisor.export.otlp_proto` and sent through that client
(the same retries, headers, TLS and compression) without the SDK's objects: the live exporter sends every step.
The exporter honours the standard environment:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL: ``/v1/traces`` is appended),
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_TIMEOUT`` and the TLS variables. An endpoint given on the
command line is a base URL too (``http://localhost:4318``), as the variable is; a
URL that already ends in ``/v1/traces`` is taken as it is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SupervisorError
from .otlp import resource_attributes
from .spans import KIND_CLIENT, SCOPE, STATUS_ERROR, STATUS_OK, Span

__all__ = ["INSTALL_HINT", "OtlpSender", "require", "traces_url"]

INSTALL_HINT = "pip install 'agent-supervisor-tui[otlp]'"
TRACES_PATH = "/v1/traces"


def require() -> None:
    """Raise a user error (one line, what to install) if the OTLP/HTTP exporter is not installed."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as e:
        raise SupervisorError(
            f"exporting over OTLP/HTTP needs the OpenTelemetry exporter, which is not installed ({e.name}); "
            f"install it with {INSTALL_HINT}"
        ) from None


def traces_url(endpoint: str) -> str:
    """The traces URL of a base endpoint (``http://host:4318`` -> ``http://host:4318/v1/traces``)."""
    e = endpoint.rstrip("/")
    return e if e.endswith(TRACES_PATH) else e + TRACES_PATH


def endpoint_from_env() -> str | None:
    """The endpoint the standard variables name, if any (the exporter reads them itself)."""
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


class _LastError(logging.Handler):
    """Keeps the exporter's last error line (it logs why a batch failed; ``export`` returns only FAILURE)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.last = record.getMessage()
        except Exception:  # a malformed log call of the library: keep the raw format string
            self.last = str(record.msg)
        cause = record.exc_info[1] if record.exc_info else None
        while cause is not None and cause.__cause__ is not None and not isinstance(cause, ConnectionRefusedError):
            cause = cause.__cause__
        if cause is not None:  # the reason the line only alludes to ("connection refused", a timeout)
            why = "connection refused" if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower() \
                else f"{type(cause).__name__}: {cause}"
            self.last = f"{self.last} ({why})"


FORCE_SDK = False
"""Send through the SDK's spans and encoder even where the fast path is there (tests compare the two)."""
BATCH = 500
"""Spans a request: about 250 KB of protobuf; MLflow took 100 s for one request of 20,002 spans (11 MB) and the
exporter's timeout failed it."""


class OtlpSender:
    """Sends spans to one OTLP/HTTP endpoint (``None``: the one the environment names)."""

    def __init__(self, run_id: str, endpoint: str | None = None, *, timeout: float | None = None) -> None:
        require()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import SpanExporter
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from .. import __version__

        self.url = traces_url(endpoint) if endpoint else None
        # typed as the SDK's interface, whose methods are annotated (the exporter's shutdown is not)
        self._exporter: SpanExporter = OTLPSpanExporter(endpoint=self.url, timeout=timeout)
        self.url = self.url or str(getattr(self._exporter, "_endpoint", "") or endpoint_from_env() or "")
        self._attrs = resource_attributes(run_id)
        self._resource = Resource(self._attrs)  # the same resource as the file's (no detectors added)
        self._scope = InstrumentationScope(SCOPE, __version__)
        self._log = logging.getLogger("opentelemetry.exporter")
        self.last_error: str | None = None
        self.sent = 0
        """Spans the last :meth:`send` delivered."""

    def _readable(self, s: Span) -> Any:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        tid = int(s.trace_id, 16)
        ctx = SpanContext(tid, int(s.span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        parent = (
            SpanContext(tid, int(s.parent_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            if s.parent_id
            else None
        )
        code = StatusCode.ERROR if s.status_code == STATUS_ERROR else StatusCode.OK if s.status_code == STATUS_OK else StatusCode.UNSET
        return ReadableSpan(
            s.name,
            context=ctx,
            parent=parent,
            resource=self._resource,
            attributes=dict(s.attributes),
            events=[Event(e.name, dict(e.attributes), timestamp=e.time_ns) for e in s.events],
            kind=SpanKind.CLIENT if s.kind == KIND_CLIENT else SpanKind.INTERNAL,
            status=Status(code, s.status_message or None) if code is StatusCode.ERROR else Status(code),
            start_time=s.start_ns,
            end_time=s.end_ns,
            instrumentation_scope=self._scope,
        )

    def send(self, spans: Sequence[Span], progress: Callable[[int, int], None] | None = None) -> bool:
        """Export ``spans`` in requests of :data:`BATCH` spans (a receiver takes a 20,000-span run in pieces, each
        within the timeout), in order, the run's root last as given; ``progress(sent, total)`` after each.
        ``False`` at the first batch that failed, with :attr:`last_error` saying why (and :attr:`sent` how many
        went before it)."""
        self.sent = 0
        if spans and not self._reachable():
            return False
        for i in range(0, len(spans), BATCH):
            if not self._send(spans[i : i + BATCH]):
                return False
            self.sent = min(len(spans), i + BATCH)
            if progress is not None:
                progress(self.sent, len(spans))
        return True

    def _reachable(self) -> bool:
        """A refused connection is said at once, as such (the exporter retries it until its timeout, then says
        only "timeout, max retries or shutdown")."""
        import socket
        from urllib.parse import urlsplit

        u = urlsplit(self.url or "")
        if u.scheme not in ("http", "https") or not u.hostname:
            return True
        try:
            with socket.create_connection((u.hostname, u.port or (443 if u.scheme == "https" else 80)), timeout=2):
                return True
        except ConnectionRefusedError:
            self.last_error = f"connection refused by {u.hostname}:{u.port}: nothing listens there"
        except OSError:
            return True  # slow or unreachable: the exporter's own retries and timeout decide
        return False

    def _send(self, spans: Sequence[Span]) -> bool:
        """One request (the exporter retries transient failures until its timeout)."""
        if not spans:
            return True
        catch = _LastError()
        self._log.addHandler(catch)  # also keeps the exporter's lines off the user's terminal
        old_propagate = self._log.propagate
        self._log.propagate = False
        try:
            ok = self._post(spans)
        finally:
            self._log.removeHandler(catch)
            self._log.propagate = old_propagate
        if ok:
            return True
        self.last_error = catch.last or "the exporter reported a failure"
        return False

    def _post(self, spans: Sequence[Span]) -> bool:
        """The spans sent: encoded here and through the exporter's HTTP client where it has one, else as the
        SDK's spans through :meth:`OTLPSpanExporter.export`."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        from .. import __version__
        from .otlp_proto import encode_request

        export = getattr(getattr(self._exporter, "_client", None), "export", None)
        if callable(export) and not FORCE_SDK:
            return getattr(export(encode_request(self._attrs, (SCOPE, __version__), spans)), "success", None) is True
        return self._exporter.export([self._readable(s) for s in spans]) is SpanExportResult.SUCCESS

    def close(self) -> None:
        self._exporter.shutdown()
