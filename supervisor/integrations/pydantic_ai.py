"""Pydantic AI adapter: every model request and every tool call of an agent run is a journaled step.

    from supervisor import Run
    from supervisor.integrations.pydantic_ai import DurableAgent

    with Run.open() as run:
        result = DurableAgent(agent, run).run_sync("question")

``DurableAgent(agent, run)`` runs the wrapped agent with one more capability (:class:`JournalCapability`,
Pydantic AI's public hook for this: ``get_wrapper_model`` / ``get_wrapper_toolset``, as its own durable
integrations use). It wraps the model that serves each request in :class:`JournaledModel` (a step
``model:<model name>`` whose output is the ``ModelResponse``, and ``run.usage`` with its tokens) and the run's
toolset in :class:`JournaledToolset` (a step ``tool:<tool name>`` per call, the validated arguments as its
inputs). On resume the recorded responses and tool results are served: the model is not asked again and the
tool functions are not called. See the README's "Framework adapters", "Pydantic AI".
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, cast

try:
    from pydantic import TypeAdapter
    from pydantic_ai import RunContext
    from pydantic_ai.agent import AbstractAgent, AgentRunResult
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.output import OutputDataT
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import AgentDepsT
    from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
    from pydantic_core import to_jsonable_python
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        f"supervisor.integrations.pydantic_ai needs Pydantic AI ({e}): pip install 'agent-supervisor-tui[pydantic-ai]'"
    ) from e

from ..errors import SupervisorError

if TYPE_CHECKING:
    from ..sdk import Run, StepOptions

__all__ = ["DurableAgent", "JournalCapability", "JournaledModel", "JournaledToolset", "ToolRaised"]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
# Fields of a request that change from one process to the next (times, the per-run ids): left out of the
# step inputs, so a resumed run's inputs equal the recorded ones (no "changed inputs" warning).
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})


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


class JournaledModel(WrapperModel):
    """A model whose every request is the step ``model:<model name>`` (``call``: kind, model, provider).

    The step output is the ``ModelResponse`` (as JSON by Pydantic AI's own schema: the SDK's dataclass codec
    cannot tell its part kinds apart); inside the step ``run.usage`` records the response's tokens. Streamed
    requests are not journaled: they raise.
    """

    def __init__(self, wrapped: Model, run: Run) -> None:
        super().__init__(wrapped)
        self._sdk_run = run
        name = self.wrapped.model_name
        self._step = f"model:{name}"
        self._opts: StepOptions = run.with_options(call={"kind": "model", "model": name, "provider": self.wrapped.system})

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        live: list[ModelResponse] = []
        run = self._sdk_run
        send = super().request

        async def model_request(request: Any) -> Any:  # ``request``: recorded as the step's inputs only
            response = await send(messages, model_settings, model_request_parameters)
            u = response.usage
            run.usage(
                model=response.model_name or self.wrapped.model_name,
                provider=response.provider_name or self.wrapped.system,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cached_tokens=u.cache_read_tokens,
            )
            live.append(response)
            return dump_response(response)

        out = await self._opts.astep(self._step, model_request, request=request_inputs(messages))
        return live[-1] if live else load_response(out)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        raise SupervisorError(
            "a streamed model request cannot be journaled: run the agent with DurableAgent.run or run_sync, "
            "without event_stream_handler (Pydantic AI streams the model's response then)"
        )
        yield  # pragma: no cover - an async generator, for asynccontextmanager


_DeferredKind = Literal["external", "question"]


@dataclass
class ToolRaised:
    """A tool's answer that Pydantic AI raises rather than returns (``ModelRetry``, ``ToolFailed``, ``CallDeferred``,
    ``ApprovalRequired``), journaled as the tool step's output so that it is no step failure (three of them in a
    row would make the SDK roll the run back) and is raised again, the same, when the step is served."""

    exception: str
    message: str | None = None
    metadata: dict[str, Any] | None = None
    kind: str | None = None

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


_RAISED = (ModelRetry, ToolFailed, CallDeferred, ApprovalRequired)


@dataclass
class JournaledToolset(WrapperToolset[AgentDepsT]):
    """A toolset whose every tool call is the step ``tool:<tool name>`` (``call``: kind, tool, call_id).

    The step inputs are the validated arguments (as JSON: ``{"kwargs": {...}}``); the output is the tool's return
    value, typed as the SDK's codec types step outputs (a pydantic model or dataclass comes back as itself).
    Concurrent tool calls (Pydantic AI runs a response's calls in parallel) are matched on resume by
    ``(name, k)``: the step name is the tool name, not the call id, so the journal reads as the run's calls.
    """

    run: Run | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        run = self.run
        if run is None:  # pragma: no cover - JournalCapability always gives one
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        call: dict[str, Any] = {"kind": "tool", "tool": name}
        if ctx.tool_call_id:
            call["call_id"] = ctx.tool_call_id
        wrapped = self.wrapped

        async def tool_call(**_args: Any) -> Any:  # the arguments: recorded as the step's inputs only
            try:
                return await wrapped.call_tool(name, tool_args, ctx, tool)
            except _RAISED as e:
                return ToolRaised.of(e)

        out = await run.with_options(call=call).astep(f"tool:{name}", tool_call, **_json_args(tool_args))
        if isinstance(out, ToolRaised):
            raise out.exception_again()
        return out


def _json_args(args: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments as JSON for the record (a pydantic model argument as its fields)."""
    out = to_jsonable_python(args, fallback=repr)
    return out if isinstance(out, dict) else {"args": out}


@dataclass
class JournalCapability(AbstractCapability[Any]):
    """The capability :class:`DurableAgent` adds to each run: it journals the run's model requests and tool calls.

    Give it to an agent yourself (``Agent(..., capabilities=[JournalCapability(run)])``) to journal every run of
    it; it wraps the model of each request and the run's toolset (output tools, which run no code of yours, are
    not journaled).
    """

    run: Run
    _models: dict[int, tuple[Model, JournaledModel]] = field(default_factory=dict, repr=False, compare=False)

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
        return None if isinstance(toolset, JournaledToolset) else JournaledToolset(toolset, run=self.run)


class DurableAgent(Generic[AgentDepsT, OutputDataT]):
    """A Pydantic AI agent whose runs are journaled in ``run``: ``DurableAgent(agent, run).run_sync(prompt)``.

    ``run``/``run_sync`` take the wrapped agent's arguments and return what it returns (an ``AgentRunResult``).
    A run resumed after a crash is served the recorded model responses and tool results in order, so it reaches
    the same output without paying for the model calls again; the calls after the crash run live.
    """

    def __init__(self, agent: AbstractAgent[AgentDepsT, OutputDataT], run: Run) -> None:
        self.wrapped = agent
        self.supervisor_run = run
        self._capability = JournalCapability(run)

    def _kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("event_stream_handler") is not None:
            raise SupervisorError(
                "DurableAgent: event_stream_handler streams the model's responses, which cannot be journaled; "
                "leave it out (the journal and the dashboard show each call)"
            )
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), self._capability]
        return kwargs

    async def run(self, user_prompt: Any = None, **kwargs: Any) -> AgentRunResult[Any]:
        """``await agent.run(prompt, **kw)`` of the wrapped agent, journaled."""
        result: AgentRunResult[Any] = await self.wrapped.run(user_prompt, **self._kwargs(kwargs))
        return result

    def run_sync(self, user_prompt: Any = None, **kwargs: Any) -> AgentRunResult[Any]:
        """``agent.run_sync(prompt, **kw)`` of the wrapped agent, journaled."""
        result: AgentRunResult[Any] = self.wrapped.run_sync(user_prompt, **self._kwargs(kwargs))
        return result
