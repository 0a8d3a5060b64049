"""The agent's own OpenTelemetry spans in the run's trace: ``TRACEPARENT`` made the active context.

The supervisor gives each attempt a W3C ``TRACEPARENT`` (the attempt's ``attempt N started`` span, see
:func:`supervisor.export.otlp.attempt_span_context`), as the environment-carrier convention of OpenTelemetry
says. OpenTelemetry's Python API does not read it by itself, so :func:`join_env_trace` (called when a
:class:`~supervisor.sdk.Run` opens) makes it the current context: the spans the agent's instrumentation
starts afterwards (HTTP clients, Pydantic AI's ``instrument=True``, logfire...) nest under the attempt.

Nothing is imported unless it is of use: without ``TRACEPARENT`` this module does nothing, and with it only an
installed ``opentelemetry-api`` is imported (a process without it runs as before). A span already current when
the run opens (the agent's own root) is left alone: the agent chose its parent.
"""

from __future__ import annotations

import os

ENV_TRACEPARENT = "TRACEPARENT"
ENV_TRACESTATE = "TRACESTATE"


def join_env_trace(environ: dict[str, str] | None = None) -> object | None:
    """Attach the context ``TRACEPARENT`` names; the token (for ``opentelemetry.context.detach``) or ``None``
    when there is none, OpenTelemetry is not installed, the value is not a valid traceparent, or a span is
    already current."""
    env = os.environ if environ is None else environ
    parent = env.get(ENV_TRACEPARENT)
    if not parent:
        return None
    try:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # the agent has no OpenTelemetry: nothing would use the context
        return None
    if trace.get_current_span().get_span_context().is_valid:
        return None
    carrier = {"traceparent": parent}
    if env.get(ENV_TRACESTATE):
        carrier["tracestate"] = env[ENV_TRACESTATE]
    ctx = TraceContextTextMapPropagator().extract(carrier)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None  # a malformed value: the spans stay in their own traces rather than fail the agent
    return context.attach(ctx)
