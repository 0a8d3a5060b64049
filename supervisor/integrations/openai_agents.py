"""OpenAI Agents SDK adapter: every model call and function-tool call of an ``agents.Agent`` is a journaled step.

::

    from agents import Runner
    from supervisor import Run
    from supervisor.integrations.openai_agents import durable

    with Run.open() as run:
        result = Runner.run_sync(durable(agent, run), "question")

:func:`durable` returns a clone of the agent (the original is not changed) whose model is wrapped
(:class:`DurableModel`: each ``get_response``/``stream_response`` is the step ``model:<agent name>``) and
whose function tools are wrapped (each call is the step ``tool:<tool name>``, with the call id and the agent in
the record's ``call`` field); agents it hands off to are made durable the same way. On resume, the recorded
model responses and tool outputs are served and neither the model nor the tool is called again.

While a durable agent runs, every agent its run starts with ``Runner.run``/``run_streamed`` (a guardrail's
guard agent, an ``agent.as_tool(...)``, a tool that runs an agent) is made durable too, and a ``session=`` given
to the run is a :class:`DurableSession` (its reads and writes are steps, the real session is brought back to the
journal's point on resume). Both go through the SDK's default agent runner, wrapped once by :func:`durable`.

:class:`JournalTracingProcessor` only observes: it appends each finished span of the SDK's tracing
as a ``note`` record (``"message": "span"``), each finished trace as ``"message": "trace"``, and each model
call it saw outside a durable agent as a step with its tokens (``call.observed``).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar, cast

import orjson

try:
    from agents import Agent, FunctionTool, Handoff, ModelResponse, ModelSettings, ModelTracing
    from agents.items import TResponseInputItem, TResponseStreamEvent
    from agents.memory import OpenAIConversationsSession, Session, SessionABC
    from agents.memory.session import is_openai_responses_compaction_aware_session
    from agents.models import get_default_model
    from agents.models.interface import Model, ModelProvider
    from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
    from agents.tool_context import ToolContext
    from agents.tracing import (
        AgentSpanData,
        GenerationSpanData,
        ResponseSpanData,
        Span,
        Trace,
        TracingProcessor,
    )
    from pydantic import TypeAdapter, ValidationError
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        f"supervisor.integrations.openai_agents needs the OpenAI Agents SDK ({e}): "
        "pip install 'agent-supervisor-tui[openai-agents]'"
    ) from e

from ..errors import SessionMismatchError
from ..sdk import Run

__all__ = ["DurableModel", "DurableSession", "JournalTracingProcessor", "SessionMismatchError", "durable"]

T = TypeVar("T")

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

_IN_MODEL_STEP: ContextVar[bool] = ContextVar("supervisor_openai_agents_model_step", default=False)
"""True inside a :class:`DurableModel` step: the tracing processor leaves the call's spans to its record."""

_CLONER_ATTR = "_supervisor_durable"
"""The attribute a durable clone carries: the :class:`_Cloner` that made it (``Agent.clone`` does not copy it)."""


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


def _digest(value: Any) -> str:
    data = orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


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


# ---------------------------------------------------------------------------------- reading the journal back
# A null where the SDK's types want a value: the SDK builds some objects without validation (a streamed
# response without an id), so their dump does not validate back. Such a hole is validated with a stand-in of
# its type, then set back to null: the object served is the one the model gave.
_STAND_INS: dict[str, Any] = {"string_type": "", "int_type": 0, "float_type": 0.0, "bool_type": False}


def _revive(adapter: TypeAdapter[T], data: Any) -> T:
    """``data`` (a journaled dump) validated into the SDK's objects, nulls the types do not allow kept as nulls."""
    try:
        return adapter.validate_python(data)
    except ValidationError as e:
        error = e
    data = copy.deepcopy(data)  # a served output may be shared: the stand-ins go into a copy
    holes: list[tuple[Any, ...]] = []
    for _ in range(4):  # a stand-in may uncover a hole behind it (validation stops at the first of a branch)
        found = False
        for err in error.errors():
            stand_in = _STAND_INS.get(err["type"])
            if stand_in is None or err.get("input", 0) is not None:
                continue
            path = _fill(data, err["loc"], stand_in)
            if path is not None:
                holes.append(path)
                found = True
        if not found:
            raise error
        try:
            obj = adapter.validate_python(data)
        except ValidationError as e:
            error = e
            continue
        for path in holes:
            _unfill(obj, path)
        return obj
    raise error


def _fill(data: Any, loc: tuple[Any, ...], value: Any) -> tuple[Any, ...] | None:
    """Put ``value`` at the null ``loc`` points to (a pydantic error location; its union-member tags, which are
    no keys of the data, are skipped); the path taken, or ``None`` if ``loc`` leads to no null."""
    cur, path = data, []
    for seg in loc[:-1]:
        if (isinstance(cur, dict) and seg in cur) or (isinstance(cur, list) and isinstance(seg, int) and 0 <= seg < len(cur)):
            cur = cur[seg]
        else:
            continue  # a tag naming the union member tried
        path.append(seg)
    last = loc[-1] if loc else None
    if isinstance(cur, dict) and last in cur and cur[last] is None:
        cur[last] = value
        return (*path, last)
    return None


def _unfill(obj: Any, path: tuple[Any, ...]) -> None:
    """Set the field at ``path`` of the validated object back to ``None``."""
    cur = obj
    for seg in path[:-1]:
        cur = cur[seg] if isinstance(cur, (list, dict)) else getattr(cur, seg)
    if isinstance(cur, dict):
        cur[path[-1]] = None
    else:
        object.__setattr__(cur, path[-1], None)  # no validation on assignment: the null the model gave


# ---------------------------------------------------------------------------------- the model
class DurableModel(Model):
    """A :class:`agents.models.interface.Model` whose calls are journaled steps ``model:<agent name>``
    (``model:<model name>`` without an ``agent``).

    ``model`` is a ``Model``, or a model name (``None``: the SDK's default) resolved on first use by
    ``model_provider`` (default: the SDK's ``MultiProvider``, as ``Runner`` does). ``agent`` names the agent
    whose calls these are: the step's name, and ``agent`` in the record's ``call``.
    """

    def __init__(
        self, model: Model | str | None, run: Run, *, provider: str | None = None,
        model_provider: ModelProvider | None = None, agent: str | None = None,
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
        self.agent = agent
        call: dict[str, Any] = {"kind": "model", "model": self.model_name}
        if self.provider is not None:
            call["provider"] = self.provider
        if agent is not None:
            call["agent"] = agent
        self._call = call
        self._step = f"model:{agent if agent is not None else self.model_name}"

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
            token = _IN_MODEL_STEP.set(True)
            try:
                resp = await self.inner.get_response(
                    system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                    previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
                )
            finally:
                _IN_MODEL_STEP.reset(token)
            _usage(run, self.model_name, self.provider, resp.usage)
            return _RESPONSE.dump_python(resp, mode="json", by_alias=True, exclude_unset=True)

        call.__annotations__ = _NO_HINT
        out = await run.with_options(call=self._call).astep(
            self._step, call, **_request(system_instructions, input)
        )
        # Live and served alike, the runner gets the object the journal holds.
        return _revive(_RESPONSE, out)

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
            token = _IN_MODEL_STEP.set(True)
            try:
                events = [
                    ev async for ev in self.inner.stream_response(
                        system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                        previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
                    )
                ]
            finally:
                _IN_MODEL_STEP.reset(token)
            for ev in events:
                resp = getattr(ev, "response", None)
                if getattr(ev, "type", None) == "response.completed" and resp is not None and resp.usage is not None:
                    _usage(run, self.model_name, self.provider, resp.usage)
            return _EVENTS.dump_python(events, mode="json", by_alias=True, exclude_unset=True)

        call.__annotations__ = _NO_HINT
        out = await run.with_options(call=self._call).astep(
            self._step, call, **_request(system_instructions, input)
        )
        for ev in _revive(_EVENTS, out):
            yield ev

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            await self._inner._cleanup_on_run_end(owner)


# ---------------------------------------------------------------------------------- tools
class _DurableToolInvoker:
    """A function tool's ``on_invoke_tool`` that runs the original as the step ``tool:<name>``."""

    def __init__(self, original: Callable[[ToolContext[Any], str], Awaitable[Any]], name: str, run: Run,
                 agent: str | None = None) -> None:
        self.original = original
        self.name = name
        self.step = f"tool:{name}"
        self.run = run
        self.agent = agent

    def prepare_arguments(self, input: str, tool_name: str) -> Any:
        # the SDK's approval checks ask the invoker to parse arguments; the original knows how
        prepare = getattr(self.original, "prepare_arguments", None)
        return prepare(input, tool_name) if prepare is not None else None

    async def __call__(self, ctx: ToolContext[Any], arguments: str) -> Any:
        call: dict[str, Any] = {"kind": "tool", "tool": self.name}
        call_id = getattr(ctx, "tool_call_id", None)
        if call_id:
            call["call_id"] = call_id
        if self.agent is not None:
            call["agent"] = self.agent

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


def _durable_tool(tool: Any, run: Run, agent: str | None = None) -> Any:
    if not isinstance(tool, FunctionTool) or isinstance(tool.on_invoke_tool, _DurableToolInvoker):
        return tool  # hosted tools (web search, code interpreter...) run inside the model call's step
    invoker = _DurableToolInvoker(tool.on_invoke_tool, tool.name, run, agent)
    clone = dataclasses.replace(tool, on_invoke_tool=invoker)
    # the SDK's own invoker resolves its failure policy against the tool it is bound to: bind it to the clone
    bind = getattr(invoker.original, "__agents_bind_function_tool__", None)
    if callable(bind):
        invoker.original = bind(clone)
    return clone


# ---------------------------------------------------------------------------------- agents
def durable(
    openai_agent: Agent[Any], run: Run, *, provider: str | None = None,
    model_provider: ModelProvider | None = None,
) -> Agent[Any]:
    """A clone of ``openai_agent`` whose model calls and function tools are journaled steps of ``run``.

    Run it with ``Runner.run`` / ``Runner.run_sync`` / ``Runner.run_streamed`` as usual. ``provider`` names the
    model's provider in the records (guessed for the SDK's OpenAI models and ``"provider/model"`` names); a model
    given by name is resolved by ``model_provider`` (default: the SDK's ``MultiProvider``). Agents it hands off to
    are made durable too, and so is every agent its run starts (guardrails' agents, ``as_tool`` agents), and its
    ``session=`` (:class:`DurableSession`). A model set in ``RunConfig(model=...)`` replaces the agent's and is
    not journaled.

    It switches ``run`` to matching steps by name (:meth:`supervisor.Run.match_by_name`): the SDK runs input
    guardrails beside the first model call and session writes beside them, so on resume, where served calls
    return at once, the calls do not come in the order they were recorded in; their identities do not change.
    """
    _install_runner()
    run.match_by_name()
    return _Cloner(run, provider, model_provider).agent(openai_agent)


class _Cloner:
    """Makes an agent and the agents it hands off to durable, each once (handoffs may form cycles); the scope of
    a durable run: the agents that run starts are made durable by it too."""

    def __init__(self, run: Run, provider: str | None, model_provider: ModelProvider | None) -> None:
        self.run = run
        self.provider = provider
        self.model_provider = model_provider
        # by id of the original, which is kept alive with its clone: an id is never reused while it is here
        self.done: dict[int, tuple[Agent[Any], Agent[Any]]] = {}
        self._lock = threading.Lock()

    def agent(self, a: Agent[Any]) -> Agent[Any]:
        with self._lock:  # handoffs are made durable from the run's tasks; the first clone wins
            got = self.done.get(id(a))
            if got is not None:
                return got[1]
            if isinstance(a.model, DurableModel):
                return a
            model = DurableModel(a.model, self.run, provider=self.provider, model_provider=self.model_provider,
                                 agent=a.name)
            # model_settings given explicitly: clone() would otherwise reset a named model's implicit defaults
            clone = a.clone(model=model, model_settings=a.model_settings,
                            tools=[_durable_tool(t, self.run, a.name) for t in a.tools])
            setattr(clone, _CLONER_ATTR, self)
            self.done[id(a)] = (a, clone)
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


# ---------------------------------------------------------------------------------- the runner's scope
_SCOPE: ContextVar[_Cloner | None] = ContextVar("supervisor_openai_agents_scope", default=None)
"""The durable run this task is part of: an agent started inside it is made durable by its cloner."""


class _ScopedRunner:
    """The SDK's default agent runner (``Runner.run`` and the like go through it), wrapped.

    A run of a durable clone, or any run started inside one (a guardrail's guard agent, an ``as_tool`` agent, a
    tool that runs an agent: the tasks of a run inherit its context), runs its agent made durable by the clone's
    :class:`_Cloner` and its session as a :class:`DurableSession`. Every other run goes to the wrapped runner
    unchanged. This is the SDK's one place every agent run passes; it calls it experimental.
    """

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    def _enter(self, agent: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any], Token[_Cloner | None] | None]:
        cloner = getattr(agent, _CLONER_ATTR, None) or _SCOPE.get()
        if not isinstance(cloner, _Cloner):
            return agent, kwargs, None
        if isinstance(agent, Agent):
            agent = cloner.agent(agent)
        session = kwargs.get("session")
        if session is not None:
            kwargs = {**kwargs, "session": _session_for(cloner.run, session)}
        return agent, kwargs, _SCOPE.set(cloner)

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        agent, kwargs, token = self._enter(starting_agent, kwargs)
        try:
            return await self.inner.run(agent, input, **kwargs)
        finally:
            if token is not None:
                _SCOPE.reset(token)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        agent, kwargs, token = self._enter(starting_agent, kwargs)
        try:  # the run's event loop task copies this context: the scope is set inside it
            return self.inner.run_sync(agent, input, **kwargs)
        finally:
            if token is not None:
                _SCOPE.reset(token)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        agent, kwargs, token = self._enter(starting_agent, kwargs)
        try:  # the stream's task is made here and copies this context
            return self.inner.run_streamed(agent, input, **kwargs)
        finally:
            if token is not None:
                _SCOPE.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _install_runner() -> None:
    """Wrap the SDK's default agent runner in a :class:`_ScopedRunner`, once (a runner set later replaces it:
    then the agents a durable run starts are not durable)."""
    current = get_default_agent_runner()
    if not isinstance(current, _ScopedRunner):
        set_default_agent_runner(cast(AgentRunner, _ScopedRunner(current)))


# ---------------------------------------------------------------------------------- sessions
class _PerRun:
    """A run's durable sessions by ``(type, session_id)``, and the sessions it said it cannot journal."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], DurableSession] = {}
        self.told: set[tuple[str, str]] = set()


_RUNS: weakref.WeakKeyDictionary[Run, _PerRun] = weakref.WeakKeyDictionary()
_RUNS_LOCK = threading.Lock()


def _session_for(run: Run, session: Any) -> Any:
    """The run's :class:`DurableSession` for ``session`` (one per session id: a session object made anew for each
    turn keeps its journaled history); a session kept on OpenAI's servers is returned as it is, with a note."""
    if isinstance(session, DurableSession):
        return session
    key = (type(session).__qualname__, str(getattr(session, "session_id", id(session))))
    with _RUNS_LOCK:
        per = _RUNS.get(run)
        if per is None:
            per = _RUNS[run] = _PerRun()
        if isinstance(session, OpenAIConversationsSession) or is_openai_responses_compaction_aware_session(session):
            # their history lives on OpenAI's servers (or is rewritten by compaction), and the SDK treats them
            # by their type: not journaled, and said so once a process
            if key not in per.told:
                per.told.add(key)
                run.note("session not journaled", session=key[1], session_type=key[0],
                         why="its history is kept on OpenAI's servers or compacted: a resume cannot restore it")
            return session
        got = per.sessions.get(key)
        if got is None:
            got = per.sessions[key] = DurableSession(session, run)
        else:
            got.inner = session  # the latest object: an earlier one may be closed
        return got


def _accepts_wrapper(method: Any) -> bool:
    try:
        p = inspect.signature(method).parameters.get("wrapper")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


async def _session_call(method: Any, wrapper: Any, *args: Any) -> Any:
    """Call a session method, with the SDK's ``wrapper`` if it takes one."""
    out = method(*args, wrapper=wrapper) if wrapper is not None and _accepts_wrapper(method) else method(*args)
    return await out if inspect.isawaitable(out) else out


class DurableSession(SessionABC):
    """A session (``SQLiteSession`` and the like) whose reads and writes are steps of ``run``.

    ``session:get_items``, ``session:add_items``, ``session:pop_item``, ``session:clear_session``: on resume they
    are served and the real session is not touched, so a replayed turn sees the history it saw live and does not
    write its items twice. Before the first live operation after a resume, the real session is brought back to the
    journal's point (a write whose step did not commit is taken out, a ``session restored`` note says what was
    done). The history is kept in memory as the steps lead to it; a ``get_items`` step records the whole history
    the first time in a process, and when the real session holds another one (written by someone else), otherwise
    its length and digest: the journal grows with the items written, not with the history each turn reads.
    :func:`durable` runs wrap a ``session=`` in one of these themselves.
    """

    def __init__(self, session: Session, run: Run) -> None:
        self.inner = session
        self.run = run
        self.session_id = session.session_id
        self.session_settings = getattr(session, "session_settings", None)
        self._ignore_ids_for_matching = bool(getattr(session, "_ignore_ids_for_matching", False))
        self._history: list[Any] | None = None
        """The history as the journal's session steps leave it (``None``: not read yet in this process)."""
        self._checked = False
        """Whether the real session was read or brought back to :attr:`_history` by a live step."""

    async def _bring_back(self, wrapper: Any) -> None:
        """Before the first live operation, make the real session hold the history the journal leads to."""
        if self._checked:
            return
        want = self._history
        if want is not None:
            real = _plain(await _session_call(self.inner.get_items, wrapper))
            if real != want:
                n = len(want)
                if len(real) > n and real[:n] == want:  # a write whose step did not commit (or rolled back)
                    for _ in range(len(real) - n):
                        await _session_call(self.inner.pop_item, wrapper)
                    how = "removed the items after it"
                else:
                    await _session_call(self.inner.clear_session, wrapper)
                    if want:
                        await _session_call(self.inner.add_items, wrapper, copy.deepcopy(want))
                    how = "rewrote it"
                self.run.note("session restored", session=self.session_id, items=n, found=len(real), how=how)
        self._checked = True

    async def _ensure(self, wrapper: Any) -> list[Any]:
        if self._history is None:
            await self.get_items(wrapper=wrapper)
        assert self._history is not None
        return self._history

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[TResponseInputItem]:
        async def read(**_: Any) -> Any:
            await self._bring_back(wrapper)
            real = _plain(await _session_call(self.inner.get_items, wrapper))
            self._checked = True
            known = self._history
            if known is not None and real == known:
                return {"total": len(real), "digest": _digest(real)}
            return {"items": real}

        read.__annotations__ = _NO_HINT
        kw: dict[str, Any] = {"session": self.session_id}
        if limit is not None:
            kw["limit"] = limit
        out = await self.run.astep("session:get_items", read, **kw)
        if isinstance(out, dict) and isinstance(out.get("items"), list):
            self._history = list(out["items"])
        elif self._history is None or out != {"total": len(self._history), "digest": _digest(self._history)}:
            raise SessionMismatchError(
                f"session {self.session_id!r}: the history the journal recorded at this read ({out!r}) is not the "
                f"one its session steps lead to ({len(self._history or [])} items): the agent's session calls "
                "changed since the run was recorded; fork the run before the change or start a new run"
            )
        items = self._history
        if limit is not None:
            items = items[max(len(items) - limit, 0):] if limit > 0 else []
        return cast(list[TResponseInputItem], _plain(items))  # a copy: the SDK may change what it gets

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        history = await self._ensure(wrapper)
        plain = _plain(list(items))

        async def write(**_: Any) -> Any:
            await self._bring_back(wrapper)
            await _session_call(self.inner.add_items, wrapper, items)
            return len(history) + len(plain)

        write.__annotations__ = _NO_HINT
        await self.run.astep("session:add_items", write, session=self.session_id, items=plain)
        history.extend(plain)

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        history = await self._ensure(wrapper)

        async def pop(**_: Any) -> Any:
            await self._bring_back(wrapper)
            return {"item": _plain(await _session_call(self.inner.pop_item, wrapper))}

        pop.__annotations__ = _NO_HINT
        out = await self.run.astep("session:pop_item", pop, session=self.session_id)
        if history:
            history.pop()
        return cast("TResponseInputItem | None", out.get("item") if isinstance(out, dict) else None)

    async def clear_session(self, *, wrapper: Any = None) -> None:
        async def clear(**_: Any) -> Any:
            self._checked = True  # whatever it held, it is empty now
            await _session_call(self.inner.clear_session, wrapper)
            return 0

        clear.__annotations__ = _NO_HINT
        await self.run.astep("session:clear_session", clear, session=self.session_id)
        self._history = []


# ---------------------------------------------------------------------------------- observing
class JournalTracingProcessor(TracingProcessor):
    """Observe only: each finished span becomes a ``note`` record of ``run`` (``"message": "span"``), and each model
    call it saw a step with its tokens, so ``status`` and the dashboard count it.

    Span notes: ``span_id``, ``trace_id``, ``parent_id``, ``started_at``, ``ended_at``, ``span`` (the span's data as
    the SDK exports it: ``type`` — ``agent``, ``generation``, ``response``, ``function``, ``handoff``, ``guardrail``,
    ``custom`` ... — and its own fields), ``span_error`` (when it failed). A finished trace is a note ``"message":
    "trace"`` with ``trace_id``, ``name``, ``group_id``, ``metadata``.

    A model call (a ``generation`` or ``response`` span) made outside a :func:`durable` agent's step is also the step
    ``model:<agent name>`` (`` (attempt N)`` after it from the second attempt on) with ``call`` ``{"kind": "model",
    "model", "provider", "agent", "observed": true}``, ``usage`` from the span, the span's id as input and what the
    model answered (when the span holds it) as output. It is never served: the observed agent is not durable, a
    restart calls its model again, and the new attempt's calls are steps of their own. The first such step switches
    the run to matching steps by name (:meth:`supervisor.Run.match_by_name`), so the calls of an earlier attempt are
    no divergence. Register it with ``agents.add_trace_processor`` (next to the SDK's exporter) or
    ``agents.set_trace_processors([...])`` (instead of it: nothing leaves the machine).
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._open: dict[str, tuple[str | None, str | None]] = {}
        """Open spans: their parent and, for an agent's span, the agent's name (a model call's agent is found up)."""
        self._lock = threading.Lock()
        self._by_name = False

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        data = trace.export() or {}
        self.run.note("trace", **_plain({
            "trace_id": trace.trace_id, "name": trace.name,
            "group_id": data.get("group_id"), "metadata": data.get("metadata"),
        }))

    def on_span_start(self, span: Span[Any]) -> None:
        data = span.span_data
        with self._lock:
            self._open[span.span_id] = (span.parent_id, data.name if isinstance(data, AgentSpanData) else None)

    def on_span_end(self, span: Span[Any]) -> None:
        with self._lock:
            self._open.pop(span.span_id, None)
        fields: dict[str, Any] = {
            "span_id": span.span_id, "trace_id": span.trace_id, "parent_id": span.parent_id,
            "started_at": span.started_at, "ended_at": span.ended_at, "span": span.span_data.export(),
        }
        if span.error is not None:
            fields["span_error"] = span.error
        self.run.note("span", **_plain(fields))
        if isinstance(span.span_data, (GenerationSpanData, ResponseSpanData)) and not _IN_MODEL_STEP.get():
            self._observed(span)

    def _agent_of(self, span_id: str | None) -> str | None:
        with self._lock:
            for _ in range(64):  # spans nest a few deep: a bound against a cycle of ids
                if span_id is None:
                    return None
                got = self._open.get(span_id)
                if got is None:
                    return None
                if got[1] is not None:
                    return got[1]
                span_id = got[0]
        return None

    def _observed(self, span: Span[Any]) -> None:
        """The model call ``span`` saw, as a step of its own (see the class docstring)."""
        data = span.span_data
        provider: str | None = None
        output: Any = None
        if isinstance(data, ResponseSpanData):
            resp = data.response
            model = getattr(resp, "model", None)
            provider = "openai"  # the Responses API is OpenAI's
            if resp is not None:
                output = {"response_id": resp.id, "output": _plain(resp.output)}
        else:
            model = cast(GenerationSpanData, data).model
            if isinstance(model, str) and "/" in model:
                provider = model.split("/", 1)[0]
            gen_out = cast(GenerationSpanData, data).output
            output = _plain(list(gen_out)) if gen_out is not None else None
        agent = self._agent_of(span.parent_id)
        model_name = model if isinstance(model, str) and model else "unknown"
        name = f"model:{agent or model_name}"
        if self.run.attempt > 1:
            name += f" (attempt {self.run.attempt})"
        call: dict[str, Any] = {"kind": "model", "model": model_name}
        if provider is not None:
            call["provider"] = provider
        if agent is not None:
            call["agent"] = agent
        call["observed"] = True
        usage = data.usage if isinstance(data.usage, dict) else None
        run = self.run
        if not self._by_name:
            run.match_by_name()  # an earlier attempt's calls are at positions this one does not call again
            self._by_name = True

        def observed(**_: Any) -> Any:
            if usage is not None:
                details = usage.get("input_tokens_details")
                run.usage(model=model_name, provider=provider, input_tokens=usage.get("input_tokens"),
                          output_tokens=usage.get("output_tokens"),
                          cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None)
            return output

        observed.__annotations__ = _NO_HINT
        run.with_options(call=call).step(name, observed, span_id=span.span_id)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass
