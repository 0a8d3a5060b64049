"""OpenAI Agents SDK adapter: every model call and function-tool call of an ``agents.Agent`` is a journaled step.

::

    from agents import Runner
    from supervisor import Run
    from supervisor.integrations.openai_agents import durable

    with Run.open() as run:
        result = Runner.run_sync(durable(agent, run), "question")

:func:`durable` returns a clone of the agent (the original is not changed) whose model is wrapped
(:class:`DurableModel`: each ``get_response``/``stream_response`` is the step ``model:<model name>``) and
whose function tools are wrapped (each call is the step ``tool:<tool name>``, with the call id in the
record's ``call`` field); agents it hands off to are made durable the same way. On resume, the recorded
model responses and tool outputs are served and neither the model nor the tool is called again.

:class:`JournalTracingProcessor` only observes: it appends each finished span of the SDK's tracing
as a ``note`` record (``"message": "span"``) and each finished trace as ``"message": "trace"``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

try:
    from agents import Agent, FunctionTool, Handoff, ModelResponse, ModelSettings, ModelTracing
    from agents.items import TResponseStreamEvent
    from agents.models import get_default_model
    from agents.models.interface import Model, ModelProvider
    from agents.tool_context import ToolContext
    from agents.tracing import Span, Trace, TracingProcessor
    from pydantic import TypeAdapter
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        f"supervisor.integrations.openai_agents needs the OpenAI Agents SDK ({e}): "
        "pip install 'agent-supervisor-tui[openai-agents]'"
    ) from e

from ..sdk import Run

__all__ = ["DurableModel", "JournalTracingProcessor", "durable"]

# ModelResponse is a dataclass of pydantic models whose fields have aliases (``async`` of a function
# call): a TypeAdapter that dumps by alias gives JSON that validates back to an equal object.
_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_EVENTS: TypeAdapter[list[TResponseStreamEvent]] = TypeAdapter(list[TResponseStreamEvent])

# The step functions below are closures made per call: without annotations the SDK looks for no return
# type hint (it would cache a hint per closure, keeping each call's input alive).
_NO_HINT: dict[str, Any] = {}

# Model classes whose provider is known without being told.
_PROVIDERS = {"OpenAIResponsesModel": "openai", "OpenAIChatCompletionsModel": "openai",
              "OpenAIResponsesWSModel": "openai"}


def _json_default(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return repr(obj)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON (the step inputs must compare equal to the recorded ones on resume)."""
    return orjson.loads(orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS))


def _request(instructions: str | None, input: Any) -> dict[str, Any]:
    """A model call's recorded inputs: a digest of the whole request, the number of input items and the last one.

    Not the whole conversation: it grows with every turn, and its items are in the journal already
    (earlier model outputs and tool outputs); recorded whole, a long run's journal would grow with
    the square of its length. The digest still tells a changed request on resume.
    """
    data = orjson.dumps([instructions, input], default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    items = [input] if isinstance(input, str) else list(input)
    return {
        "digest": hashlib.sha256(data).hexdigest()[:16],
        "items": len(items),
        "last": _plain(items[-1]) if items else None,
    }


def _usage(run: Run, model: str, provider: str | None, usage: Any) -> None:
    details = getattr(usage, "input_tokens_details", None)
    run.usage(
        model=model,
        provider=provider,
        input_tokens=getattr(usage, "input_tokens", None),
        output_tokens=getattr(usage, "output_tokens", None),
        cached_tokens=getattr(details, "cached_tokens", None),
    )


def _provider_of_name(name: str) -> str:
    """The provider ``MultiProvider`` picks for a model name: ``openai`` without a prefix, ``litellm/P/...`` P."""
    parts = name.split("/")
    if len(parts) == 1:
        return "openai"
    if parts[0] in ("litellm", "any-llm", "openai") and len(parts) > 2:
        return parts[1] if parts[0] != "openai" else "openai"
    return parts[0]


class DurableModel(Model):
    """A :class:`agents.models.interface.Model` whose calls are journaled steps ``model:<name>``.

    ``model`` is a ``Model``, or a model name (``None``: the SDK's default) resolved on first use by
    ``model_provider`` (default: the SDK's ``MultiProvider``, as ``Runner`` does).
    """

    def __init__(
        self, model: Model | str | None, run: Run, *, provider: str | None = None,
        model_provider: ModelProvider | None = None,
    ) -> None:
        self._inner = model if isinstance(model, Model) else None
        self._name_wanted = model if isinstance(model, str) else None
        self._model_provider = model_provider
        self.run = run
        if self._inner is not None:
            name = getattr(self._inner, "model", None)
            self.model_name = name if isinstance(name, str) else type(self._inner).__name__
            guess = _PROVIDERS.get(type(self._inner).__name__)
            if guess is None and "/" in self.model_name:  # LiteLLM's "provider/model"
                guess = self.model_name.split("/", 1)[0]
        else:
            self.model_name = self._name_wanted or get_default_model()
            guess = _provider_of_name(self.model_name) if model_provider is None else None
        self.provider = provider or guess
        call: dict[str, Any] = {"kind": "model", "model": self.model_name}
        if self.provider is not None:
            call["provider"] = self.provider
        self._call = call
        self._step = f"model:{self.model_name}"

    @property
    def inner(self) -> Model:
        """The wrapped model (resolved from its name on first use)."""
        if self._inner is None:
            if self._model_provider is None:
                from agents.models.multi_provider import MultiProvider

                self._model_provider = MultiProvider()
            self._inner = self._model_provider.get_model(self._name_wanted)
        return self._inner

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        run = self.run

        async def call(**_: Any) -> Any:
            resp = await self.inner.get_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
            )
            _usage(run, self.model_name, self.provider, resp.usage)
            return _RESPONSE.dump_python(resp, mode="json", by_alias=True, exclude_unset=True)

        call.__annotations__ = _NO_HINT
        out = await run.with_options(call=self._call).astep(
            self._step, call, **_request(system_instructions, input)
        )
        # Live and served alike, the runner gets the object the journal holds.
        return _RESPONSE.validate_python(out)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """The stream is one step: its events are journaled and delivered once the model call has completed."""
        run = self.run

        async def call(**_: Any) -> Any:
            events = [
                ev async for ev in self.inner.stream_response(
                    system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                    previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
                )
            ]
            for ev in events:
                resp = getattr(ev, "response", None)
                if getattr(ev, "type", None) == "response.completed" and resp is not None and resp.usage is not None:
                    u = resp.usage
                    run.usage(model=self.model_name, provider=self.provider, input_tokens=u.input_tokens,
                              output_tokens=u.output_tokens, cached_tokens=u.input_tokens_details.cached_tokens)
            return _EVENTS.dump_python(events, mode="json", by_alias=True, exclude_unset=True)

        call.__annotations__ = _NO_HINT
        out = await run.with_options(call=self._call).astep(
            self._step, call, **_request(system_instructions, input)
        )
        for ev in _EVENTS.validate_python(out):
            yield ev

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            await self._inner._cleanup_on_run_end(owner)


class _DurableToolInvoker:
    """A function tool's ``on_invoke_tool`` that runs the original as the step ``tool:<name>``."""

    def __init__(self, original: Callable[[ToolContext[Any], str], Awaitable[Any]], name: str, run: Run) -> None:
        self.original = original
        self.name = name
        self.step = f"tool:{name}"
        self.run = run

    def prepare_arguments(self, input: str, tool_name: str) -> Any:
        # the SDK's approval checks ask the invoker to parse arguments; the original knows how
        prepare = getattr(self.original, "prepare_arguments", None)
        return prepare(input, tool_name) if prepare is not None else None

    async def __call__(self, ctx: ToolContext[Any], arguments: str) -> Any:
        call_id = getattr(ctx, "tool_call_id", None)
        call = {"kind": "tool", "tool": self.name, "call_id": call_id} if call_id else {"kind": "tool", "tool": self.name}

        async def invoke(*_: Any, **__: Any) -> Any:
            return await self.original(ctx, arguments)

        invoke.__annotations__ = _NO_HINT  # a tool's typed output is decoded by the record's output_type
        try:
            parsed = orjson.loads(arguments) if arguments else {}
        except orjson.JSONDecodeError:
            parsed = None
        view = self.run.with_options(call=call)
        if isinstance(parsed, dict):  # the tool's arguments are the step's inputs
            return await view.astep(self.step, invoke, **parsed)
        return await view.astep(self.step, invoke, arguments)


def _durable_tool(tool: Any, run: Run) -> Any:
    if not isinstance(tool, FunctionTool) or isinstance(tool.on_invoke_tool, _DurableToolInvoker):
        return tool  # hosted tools (web search, code interpreter...) run inside the model call's step
    invoker = _DurableToolInvoker(tool.on_invoke_tool, tool.name, run)
    clone = dataclasses.replace(tool, on_invoke_tool=invoker)
    # the SDK's own invoker resolves its failure policy against the tool it is bound to: bind it to the clone
    bind = getattr(invoker.original, "__agents_bind_function_tool__", None)
    if callable(bind):
        invoker.original = bind(clone)
    return clone


def durable(
    openai_agent: Agent[Any], run: Run, *, provider: str | None = None,
    model_provider: ModelProvider | None = None,
) -> Agent[Any]:
    """A clone of ``openai_agent`` whose model calls and function tools are journaled steps of ``run``.

    Run it with ``Runner.run`` / ``Runner.run_sync`` as usual. ``provider`` names the model's provider in
    the records (guessed for the SDK's OpenAI models and ``"provider/model"`` names); a model given by
    name is resolved by ``model_provider`` (default: the SDK's ``MultiProvider``). Agents it hands off
    to are made durable too. A model set in ``RunConfig(model=...)`` replaces the agent's and is not journaled.
    """
    return _Cloner(run, provider, model_provider).agent(openai_agent)


class _Cloner:
    """Makes an agent and the agents it hands off to durable, each once (handoffs may form cycles)."""

    def __init__(self, run: Run, provider: str | None, model_provider: ModelProvider | None) -> None:
        self.run = run
        self.provider = provider
        self.model_provider = model_provider
        self.done: dict[int, Agent[Any]] = {}

    def agent(self, a: Agent[Any]) -> Agent[Any]:
        got = self.done.get(id(a))
        if got is not None:
            return got
        if isinstance(a.model, DurableModel):
            return a
        model = DurableModel(a.model, self.run, provider=self.provider, model_provider=self.model_provider)
        # model_settings given explicitly: clone() would otherwise reset a named model's implicit defaults
        clone = a.clone(model=model, model_settings=a.model_settings, tools=[_durable_tool(t, self.run) for t in a.tools])
        self.done[id(a)] = clone
        clone.handoffs = [self.handoff(h) for h in a.handoffs]
        return clone

    def handoff(self, h: Any) -> Any:
        if isinstance(h, Agent):
            return self.agent(h)
        if isinstance(h, Handoff):
            original = h.on_invoke_handoff

            async def on_invoke_handoff(ctx: Any, input_json: str) -> Any:
                target = await original(ctx, input_json)
                return self.agent(target) if isinstance(target, Agent) else target

            return dataclasses.replace(h, on_invoke_handoff=on_invoke_handoff)
        return h


class JournalTracingProcessor(TracingProcessor):
    """Observe only: each finished span becomes a ``note`` record of ``run`` (``"message": "span"``).

    Fields: ``span_id``, ``trace_id``, ``parent_id``, ``started_at``, ``ended_at``, ``span`` (the span's
    data as the SDK exports it: ``type`` — ``agent``, ``generation``, ``response``, ``function``,
    ``handoff``, ``guardrail``, ``custom`` ... — and its own fields), ``span_error`` (when it failed). A finished
    trace is a note ``"message": "trace"`` with ``trace_id``, ``name``, ``group_id``, ``metadata``.
    Register it with ``agents.add_trace_processor`` (next to the SDK's exporter) or
    ``agents.set_trace_processors([...])`` (instead of it: nothing leaves the machine).
    """

    def __init__(self, run: Run) -> None:
        self.run = run

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        data = trace.export() or {}
        self.run.note("trace", **_plain({
            "trace_id": trace.trace_id, "name": trace.name,
            "group_id": data.get("group_id"), "metadata": data.get("metadata"),
        }))

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        fields: dict[str, Any] = {
            "span_id": span.span_id, "trace_id": span.trace_id, "parent_id": span.parent_id,
            "started_at": span.started_at, "ended_at": span.ended_at, "span": span.span_data.export(),
        }
        if span.error is not None:
            fields["span_error"] = span.error
        self.run.note("span", **_plain(fields))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass
