"""Pydantic AI adapter: every model request and every tool call of an agent run is a journaled step.

    from supervisor import Run
    from supervisor.integrations.pydantic_ai import DurableAgent

    with Run.open() as run:
        result = DurableAgent(agent, run).run_sync("question")

``DurableAgent(agent, run)`` is a Pydantic AI ``WrapperAgent``: ``run``, ``run_sync``, ``run_stream``,
``run_stream_events``, ``iter`` and ``override`` are the wrapped agent's, and every run gets one more capability,
:class:`JournalCapability` (Pydantic AI's public hooks ``get_wrapper_model`` / ``get_wrapper_toolset`` /
``wrap_run``). It wraps the model that serves each request in :class:`JournaledModel` (a step ``model:<model
name>`` whose output is the ``ModelResponse``; a streamed request is recorded whole and replayed as a stream) and
the run's toolset in :class:`JournaledToolset` (a step ``tool:<tool name>`` per call). An agent run started inside
a journaled tool call (a sub-agent a tool delegates to, wrapped or not) is journaled too, its steps the children of
that tool's step. On resume the recorded responses and tool results are served: the model is not asked again and
the tool functions are not called. See docs/adapters.md, "Pydantic AI".
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

try:
    from pydantic import TypeAdapter
    from pydantic_ai import RunContext
    from pydantic_ai.agent import AbstractAgent, Agent, AgentRun, AgentRunResult, WrapperAgent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.durable_exec import durable_unit_scope, record_durable_unit, replay_scope
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.output import OutputDataT
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import AgentDepsT
    from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
    from pydantic_ai.usage import RunUsage
    from pydantic_core import to_jsonable_python
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        f"supervisor.integrations.pydantic_ai needs Pydantic AI ({e}): pip install 'agent-supervisor-tui[pydantic-ai]'"
    ) from e

from ..core import codec

if TYPE_CHECKING:
    from ..sdk import Run, StepOptions

__all__ = [
    "DurableAgent", "JournalCapability", "JournaledModel", "JournaledToolset", "ToolRaised", "ToolUsed",
    "priced_as",
]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
# Fields of a request that change from one process to the next (times, the per-run ids): left out of the
# step inputs, so a resumed run's inputs equal the recorded ones (no "changed inputs" warning).
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})
# What Pydantic AI's offline models (FunctionModel, TestModel) give as their system: no provider to price by.
_PLACEHOLDER_SYSTEMS = frozenset({"function", "test"})


def dump_response(response: ModelResponse) -> Any:
    """A ``ModelResponse`` as plain JSON (the step output in the journal), by Pydantic AI's own schema.

    Without its ``None`` fields (a third of the size, and the parts come first), unless one of them is a required
    field: then the response would not load back equal, and it is written whole (checked on each live call).
    """
    compact = _RESPONSE.dump_python(response, mode="json", exclude_none=True)
    try:
        if _RESPONSE.validate_python(compact) == response:
            return compact
    except ValueError:  # pydantic's ValidationError: a required field was None
        pass
    return _RESPONSE.dump_python(response, mode="json")


def load_response(data: Any) -> ModelResponse:
    """The ``ModelResponse`` that :func:`dump_response` wrote (its parts' kinds told apart by ``part_kind``)."""
    return _RESPONSE.validate_python(data)


def request_inputs(messages: list[ModelMessage]) -> Any:
    """What a model step records as its inputs: the newest message (the prompt or the tool results the model
    answers), as JSON without its times and run ids. The whole history would make the journal grow with the
    square of the run's length; the history is the earlier steps' records."""
    if not messages:
        return None
    (msg,) = ModelMessagesTypeAdapter.dump_python(messages[-1:], mode="json")
    return _strip(msg)


def _strip(msg: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in msg.items() if k not in _VOLATILE}
    parts = out.get("parts")
    if isinstance(parts, list):
        out["parts"] = [
            {k: v for k, v in p.items() if k not in _VOLATILE} if isinstance(p, dict) else p for p in parts
        ]
    return out


def priced_as(model_name: str, system: str | None) -> tuple[str, str | None]:
    """The model name and provider a call is priced by: as the model names them, except that an offline model
    (``FunctionModel``, ``TestModel``: system ``function``/``test``) named like a real one (``openai:gpt-4o``)
    is priced as that one (``gpt-4o``, ``openai``); one named otherwise keeps its placeholder system, which
    prices nothing."""
    if system in _PLACEHOLDER_SYSTEMS and ":" in model_name:
        provider, name = model_name.split(":", 1)
        if provider and name and provider not in _PLACEHOLDER_SYSTEMS:
            return name, provider
    return model_name, system


class JournaledModel(WrapperModel):
    """A model whose every request is the step ``model:<model name>`` (``call``: kind, model, provider).

    The step output is the ``ModelResponse`` (as JSON by Pydantic AI's own schema: the SDK's dataclass codec
    cannot tell its part kinds apart); inside the step ``run.usage`` records the response's tokens. A streamed
    request is one step too: the model's stream is read to its end inside the step, and the run is handed the
    response as a stream of its parts, the same live and served (as Pydantic AI's own durable agents do).
    """

    def __init__(self, wrapped: Model, run: Run) -> None:
        super().__init__(wrapped)
        self._sdk_run = run
        name = self.wrapped.model_name
        self._step = f"model:{name}"
        self._priced = priced_as(name, self.wrapped.system)
        call = {"kind": "model", "model": self._priced[0], "provider": self._priced[1]}
        self._opts: StepOptions = run.with_options(call=call)
        self._stream_opts: StepOptions = run.with_options(call={**call, "stream": True})

    def _record_usage(self, response: ModelResponse) -> None:
        """The response's tokens in the step running (``run.usage``), priced as :func:`priced_as` says."""
        model, provider = self._priced
        if response.model_name and response.model_name != self.wrapped.model_name:  # the exact version answering
            model, provider = priced_as(response.model_name, provider)
        u = response.usage
        self._sdk_run.usage(
            model=model,
            provider=response.provider_name or provider,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_tokens=u.cache_read_tokens,
        )

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        live: list[ModelResponse] = []
        send = super().request

        async def model_request(request: Any) -> Any:  # ``request``: recorded as the step's inputs only
            response = await send(messages, model_settings, model_request_parameters)
            self._record_usage(response)
            live.append(response)
            return dump_response(response)

        out = await self._opts.astep(self._step, model_request, request=request_inputs(messages))
        record_durable_unit(executed=bool(live))  # Pydantic AI's telemetry leaves out the spans of served calls
        return live[-1] if live else load_response(out)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        live: list[tuple[ModelResponse, ModelRequestParameters]] = []
        send = super().request_stream

        async def model_stream(request: Any) -> Any:  # ``request``: recorded as the step's inputs only
            async with send(messages, model_settings, model_request_parameters, run_context) as streamed:
                async for _ in streamed:  # read to its end: the response is recorded whole
                    pass
            response = streamed.get()
            self._record_usage(response)
            live.append((response, streamed.model_request_parameters))
            return dump_response(response)

        out = await self._stream_opts.astep(self._step, model_stream, request=request_inputs(messages))
        record_durable_unit(executed=bool(live))
        if live:
            response, params = live[-1]
        else:
            response = load_response(out)
            # The parameters the model sends (an output mode "auto" resolved), by which the parts are told apart
            # when replayed; the settings it does not support were warned about by the attempt that called it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                params = self.wrapped.prepare_request(model_settings, model_request_parameters)[1]
        # Replayed as one event per part, live as served: nothing reached the run before the step committed, so a
        # retry of the step sends no event twice, and a resumed run streams exactly what the first one did.
        yield CompletedStreamedResponse(response, model_request_parameters=params, replay_events=True)


_DeferredKind = Literal["external", "question"]


@dataclass
class ToolRaised:
    """A tool's answer that Pydantic AI raises rather than returns (``ModelRetry``, ``ToolFailed``, ``CallDeferred``,
    ``ApprovalRequired``), journaled as the tool step's output so that it is no step failure (three of them in a
    row would make the SDK roll the run back) and is raised again, the same, when the step is served. ``usage``:
    what the call's sub-agent runs added to the run's usage (as :class:`ToolUsed`), ``None`` if nothing."""

    exception: str
    message: str | None = None
    metadata: dict[str, Any] | None = None
    kind: str | None = None
    usage: dict[str, Any] | None = None

    @classmethod
    def of(cls, e: Exception) -> ToolRaised:
        if isinstance(e, (ModelRetry, ToolFailed)):
            return cls(type(e).__name__, message=e.message)
        if isinstance(e, CallDeferred):
            return cls("CallDeferred", metadata=e.metadata, kind=e.kind)
        if isinstance(e, ApprovalRequired):
            return cls("ApprovalRequired", metadata=e.metadata)
        raise TypeError(f"{type(e).__name__} is not a tool answer Pydantic AI raises")  # pragma: no cover

    def exception_again(self) -> Exception:
        make: dict[str, Callable[[], Exception]] = {
            "ModelRetry": lambda: ModelRetry(self.message or ""),
            "ToolFailed": lambda: ToolFailed(self.message or ""),
            # the kind was recorded from a CallDeferred: one of the kinds it accepts
            "CallDeferred": lambda: CallDeferred(self.metadata, kind=cast(_DeferredKind, self.kind or "external")),
            "ApprovalRequired": lambda: ApprovalRequired(self.metadata),
        }
        return make[self.exception]()


@dataclass
class ToolUsed:
    """The output of a tool step whose call added to the run's usage (a sub-agent run with ``usage=ctx.usage``):
    the tool's return value (``value``, encoded as the SDK encodes step outputs, ``value_type`` its output_type)
    and that usage (``usage``, Pydantic AI's ``RunUsage`` as JSON). Served, the usage is added to the run's again,
    so a resumed run counts its served sub-agent calls as a clean run does."""

    value: Any
    value_type: str | None
    usage: dict[str, Any]

    def returned(self, step: str) -> Any:
        """The tool's return value, as its type again."""
        return codec.decode(self.value, self.value_type, step=step)


_RAISED = (ModelRetry, ToolFailed, CallDeferred, ApprovalRequired)

# The capability of the journaled tool call in flight in this task: an agent run it starts is journaled with it.
_IN_TOOL: ContextVar[JournalCapability | None] = ContextVar("supervisor_pydantic_ai_tool", default=None)
# Whether a journaled agent run's replay scope is open in this task (a sub-agent's run keeps its caller's).
_IN_SCOPE: ContextVar[bool] = ContextVar("supervisor_pydantic_ai_scope", default=False)


def _copy_usage(usage: RunUsage) -> RunUsage:
    """A copy of ``usage`` that shares nothing with it (``copy`` would share its ``details`` dict)."""
    out = RunUsage()
    out.incr(usage)
    return out


def _delta(after: RunUsage, before: RunUsage) -> dict[str, Any] | None:
    """What ``after`` holds beyond ``before``, as JSON; ``None`` if nothing."""
    d = after - before
    if not d.has_values():
        return None
    out: dict[str, Any] = _USAGE.dump_python(d, mode="json", exclude_defaults=True)
    return out


@dataclass
class JournaledToolset(WrapperToolset[AgentDepsT]):
    """A toolset whose every tool call is the step ``tool:<tool name>`` (``call``: kind, tool, call_id).

    The step inputs are the validated arguments (as JSON: ``{"kwargs": {...}}``); the output is the tool's return
    value, typed as the SDK's codec types step outputs (a pydantic model or dataclass comes back as itself), or a
    :class:`ToolUsed` when the call added to the run's usage. Concurrent tool calls (Pydantic AI runs a response's
    calls in parallel) are matched on resume by ``(name, k)``: the step name is the tool name, not the call id, so
    the journal reads as the run's calls. An agent run the tool starts is journaled inside its step.
    """

    run: Run | None = None
    capability: JournalCapability | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        run, capability = self.run, self.capability
        if run is None or capability is None:  # pragma: no cover - JournalCapability always gives both
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        call: dict[str, Any] = {"kind": "tool", "tool": name}
        if ctx.tool_call_id:
            call["call_id"] = ctx.tool_call_id
        step = f"tool:{name}"
        wrapped = self.wrapped
        live: list[Any] = []

        async def tool_call(**_args: Any) -> Any:  # the arguments: recorded as the step's inputs only
            # The call gets its own copy of the run's usage: what its sub-agent runs add to it (usage=ctx.usage) is
            # this call's alone, even beside parallel calls, and is recorded with its output, to count again when
            # the step is served (its sub-agent's steps are then never visited).
            before = _copy_usage(ctx.usage)
            mine = _copy_usage(ctx.usage)
            token = _IN_TOOL.set(capability)
            try:
                with durable_unit_scope():  # for Pydantic AI: this call's result is recorded (submit_output refuses)
                    value = await wrapped.call_tool(name, tool_args, replace(ctx, usage=mine), tool)
            except _RAISED as e:
                raised = ToolRaised.of(e)
                raised.usage = _delta(mine, before)
                live.append(raised)
                return raised
            finally:
                _IN_TOOL.reset(token)
            live.append(value)
            usage = _delta(mine, before)
            if usage is None:
                return value
            encoded, value_type = codec.encode(value, step=step)
            return ToolUsed(encoded, value_type, usage)

        out = await run.with_options(call=call).astep(step, tool_call, **_json_args(tool_args))
        record_durable_unit(executed=bool(live))
        usage = out.usage if isinstance(out, (ToolUsed, ToolRaised)) else None
        if usage:
            ctx.usage.incr(_USAGE.validate_python(usage))
        if isinstance(out, ToolRaised):
            raise out.exception_again()
        if live:
            return live[-1]
        return out.returned(step) if isinstance(out, ToolUsed) else out


def _json_args(args: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments as JSON for the record (a pydantic model argument as its fields)."""
    out = to_jsonable_python(args, fallback=repr)
    return out if isinstance(out, dict) else {"args": out}


@dataclass
class JournalCapability(AbstractCapability[Any]):
    """The capability :class:`DurableAgent` adds to each run: it journals the run's model requests and tool calls.

    Give it to an agent yourself (``Agent(..., capabilities=[JournalCapability(run)])``) to journal every run of
    it; it wraps the model of each request and the run's toolset (output tools, which run no code of yours, are
    not journaled), and keeps the telemetry of served calls out of Pydantic AI's traces (``replay_scope``).
    """

    run: Run
    _models: dict[int, tuple[Model, JournaledModel]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        _journal_sub_agents()

    def get_wrapper_model(self, model: Model) -> Model | None:
        if isinstance(model, JournaledModel):
            return None
        # called for every request attempt, with the same few models: one wrapper each (the model is kept with it,
        # so its id is not reused while the entry lives)
        got = self._models.get(id(model))
        if got is None or got[0] is not model:
            got = self._models[id(model)] = (model, JournaledModel(model, self.run))
        return got[1]

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        if isinstance(toolset, JournaledToolset):
            return None
        return JournaledToolset(toolset, run=self.run, capability=self)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Callable[[], Any]) -> AgentRunResult[Any]:
        if _IN_SCOPE.get():  # a sub-agent's run: its served steps count in the scope of the run that called it
            result: AgentRunResult[Any] = await handler()
            return result
        token = _IN_SCOPE.set(True)
        try:
            with replay_scope():
                result = await handler()
                return result
        finally:
            _IN_SCOPE.reset(token)


def _journaled(agent: Any, capabilities: Sequence[Any] | None) -> bool:
    """Whether a run of ``agent`` with these run capabilities already has a :class:`JournalCapability`."""
    if any(isinstance(c, JournalCapability) for c in capabilities or ()):
        return True
    found: list[bool] = []
    root = getattr(agent, "root_capability", None)
    if root is not None:
        root.apply(lambda c: found.append(True) if isinstance(c, JournalCapability) else None)
    return bool(found)


_HOOK_LOCK = threading.Lock()


def _journal_sub_agents() -> None:
    """Make every agent run started inside a journaled tool call journaled too (once per process).

    Pydantic AI has no hook that reaches an agent a tool runs (``await sub.run(..., usage=ctx.usage)``): its own
    durable engines record such a tool as one unit, so a crash inside the sub-agent pays its finished model calls
    again. ``Agent.iter``, which every way of running an agent goes through, is wrapped here: outside a journaled
    tool call it only reads a context variable; inside one, a run that has no :class:`JournalCapability` of its own
    gets the calling run's, and its steps are the children of the tool's step (served with it, or, when the tool
    runs again after a crash, served one by one).
    """
    with _HOOK_LOCK:
        original = Agent.iter
        if getattr(original, "_supervisor_journals_sub_agents", False):
            return

        @functools.wraps(original)
        def iter(self: Any, *args: Any, **kwargs: Any) -> Any:
            capability = _IN_TOOL.get()
            if capability is not None and not _journaled(self, kwargs.get("capabilities")):
                kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), capability]
            return original(self, *args, **kwargs)

        iter._supervisor_journals_sub_agents = True  # type: ignore[attr-defined]
        setattr(Agent, "iter", iter)  # noqa: B010 - a method of the framework's class, replaced on purpose


class DurableAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """A Pydantic AI agent whose runs are journaled in ``run``: ``DurableAgent(agent, run).run_sync(prompt)``.

    A ``WrapperAgent``: ``run``, ``run_sync``, ``run_stream``, ``run_stream_sync``, ``run_stream_events``, ``iter``
    and ``override`` take the wrapped agent's arguments and return what it returns; each run gets a
    :class:`JournalCapability`. A run resumed after a crash is served the recorded model responses and tool results
    in order, so it reaches the same output without paying for the model calls again; the calls after the crash
    run live.
    """

    def __init__(self, agent: AbstractAgent[AgentDepsT, OutputDataT], run: Run) -> None:
        super().__init__(agent)
        self.supervisor_run = run
        self._capability = JournalCapability(run)

    @asynccontextmanager
    async def iter(  # the wrapped agent's arguments, passed on as they are
        self, user_prompt: Any = None, **kwargs: Any
    ) -> AsyncGenerator[AgentRun[AgentDepsT, Any]]:
        """``agent.iter(prompt, **kw)`` of the wrapped agent, journaled (every other way to run it comes here)."""
        if not _journaled(self.wrapped, kwargs.get("capabilities")):
            kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), self._capability]
        runs = cast(AbstractAsyncContextManager[AgentRun[AgentDepsT, Any]], super().iter(user_prompt, **kwargs))
        if _IN_SCOPE.get():
            async with runs as agent_run:
                yield agent_run
            return
        # opened around the run, so that the agent run's own span is left out too when every call was served
        token = _IN_SCOPE.set(True)
        try:
            with replay_scope():
                async with runs as agent_run:
                    yield agent_run
        finally:
            _IN_SCOPE.reset(token)
