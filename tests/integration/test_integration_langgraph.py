"""The LangGraph adapter: JournalSaver (LangGraph's own conformance suite, the file it keeps), JournaledChatModel and
JournaledTool (served from the journal on resume), and a supervised agent that crashes inside a tool."""

from __future__ import annotations

import asyncio
import importlib
import operator
import os
import runpy
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import orjson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, MessagesState, StateGraph

from supervisor import Run
from supervisor.errors import JournalError, JournalLockedError
from supervisor.integrations.langgraph import (
    JournaledChatModel,
    JournalSaver,
    journaled,
    result_from_json,
    result_to_json,
)

from ..conftest import ROOT, clean_env

sys.path.insert(0, str(ROOT / "sample_runs"))
import langgraph_agent as sample

SAMPLE = ROOT / "sample_runs" / "langgraph_agent.py"
MODEL = "fake-messages-list-chat-model"
PROVIDER = "countingfakemodel"  # LangChain names a fake model's provider after its class


@pytest.fixture
def calls_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``MODEL_CALLS_FILE`` for the sample's fake model: one line per model call that really ran."""
    path = tmp_path / "model_calls"
    monkeypatch.setenv("MODEL_CALLS_FILE", str(path))
    monkeypatch.delenv("CRASH_ONCE_FILE", raising=False)
    return path


def n_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def records(run_dir: Path, kind: str = "step") -> list[dict[str, Any]]:
    return [r for r in map(orjson.loads, (run_dir / "journal.jsonl").read_bytes().splitlines()) if r.get("kind") == kind]


# ------------------------------------------------------------------------------------------------ JournalSaver


def test_conformance_suite(tmp_path: Path) -> None:
    """langgraph-checkpoint-conformance: every capability (base and extended) is detected and passes."""
    made: list[Path] = []

    @checkpointer_test(name="JournalSaver")
    async def journal_saver() -> AsyncIterator[JournalSaver]:
        d = tmp_path / f"run{len(made)}"
        made.append(d)
        with JournalSaver(d) as saver:
            yield saver

    report = asyncio.run(validate(journal_saver))
    failures = {cap: r.failures for cap, r in report.results.items() if r.passed is not True}
    assert not failures, failures
    assert report.passed_all_base() and len(report.results) == 8
    assert all((d / "langgraph" / "checkpoints.jsonl").stat().st_size > 0 for d in made)


def _tuples(saver: JournalSaver) -> list[Any]:
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes) for t in saver.list(None)]


def test_reopened_saver_reads_what_was_written(tmp_path: Path, calls_file: Path) -> None:
    """A graph's checkpoints, values and writes come back the same from the file; each line holds only the channels
    whose version changed, each version of a channel value once."""
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        graph = sample.build_graph(run, saver)
        graph.invoke({"messages": [HumanMessage(sample.PROMPT)]}, {"configurable": {"thread_id": "t"}})
        before = _tuples(saver)
    with JournalSaver(run_dir) as again:
        assert _tuples(again) == before and len(before) >= 7
    lines = [orjson.loads(x) for x in (run_dir / "langgraph" / "checkpoints.jsonl").read_bytes().splitlines()]
    puts = [x for x in lines if x["op"] == "put"]
    assert len(puts) == len(before)
    stored = [(ch, v[0]) for p in puts for ch, v in p["blobs"].items()]
    assert len(stored) == len(set(stored))  # no (channel, version) written twice
    # "messages" grows every step but is written only at the puts that changed it, never carried along unchanged
    later = [p for p in puts[1:] if p["blobs"]]
    assert any(set(p["blobs"]) < set(p["checkpoint"]["json"]["channel_versions"])
               for p in later)
    assert any(x["op"] == "writes" for x in lines)


class Research(TypedDict):
    topics: list[str]
    notes: Annotated[list[str], operator.add]
    summary: str


class Sub(TypedDict):
    notes: Annotated[list[str], operator.add]
    summary: str


def test_same_history_as_langgraphs_in_memory_saver(tmp_path: Path) -> None:
    """Fan-out with Send, a subgraph (its own namespace), a fork from an earlier checkpoint with update_state: the
    results and the whole state history equal InMemorySaver's, and again from the file once reopened."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Send

    def build(saver: Any) -> Any:
        sub = StateGraph(Sub)
        sub.add_node("count", lambda s: {"summary": f"{len(s['notes'])} notes"})
        sub.add_edge(START, "count")
        sub.add_edge("count", END)
        g = StateGraph(Research)
        g.add_node("plan", lambda s: {"topics": ["a", "b", "c"]})
        g.add_node("research", lambda s: {"notes": [f"note on {s['topic']}"]})
        g.add_node("write", sub.compile())
        g.add_edge(START, "plan")
        g.add_conditional_edges("plan", lambda s: [Send("research", {"topic": t}) for t in s["topics"]], ["research"])
        g.add_edge("research", "write")
        g.add_edge("write", END)
        return g.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "t"}}

    def history(app: Any) -> list[Any]:
        return [(h.values, h.next, h.metadata, len(h.tasks)) for h in app.get_state_history(config)]

    def scenario(saver: Any) -> tuple[Any, ...]:
        app = build(saver)
        first = app.invoke({"topics": [], "notes": [], "summary": ""}, config)
        after_plan = next(h for h in app.get_state_history(config) if (h.metadata or {}).get("step") == 1)
        forked = app.invoke(None, app.update_state(after_plan.config, {"notes": ["extra"]}))
        return first, forked, history(app)

    def strip_run_ids(h: list[Any]) -> list[Any]:
        return [(v, n, {k: x for k, x in md.items() if k != "run_id"}, t) for v, n, md, t in h]

    expected = scenario(InMemorySaver())
    with JournalSaver(tmp_path) as saver:
        got = scenario(saver)
    assert got[:2] == expected[:2] and strip_run_ids(got[2]) == strip_run_ids(expected[2]) and len(got[2]) == 8
    with JournalSaver(tmp_path) as saver:
        assert history(build(saver)) == got[2]


def test_only_changed_channels_are_written(tmp_path: Path) -> None:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    with JournalSaver(tmp_path) as saver:
        big = "x" * 100_000
        cfg = saver.put(generate_config("t"), generate_checkpoint(channel_values={"doc": big, "n": 1},
                                                                  channel_versions={"doc": "1", "n": "1"}),
                        generate_metadata(), {"doc": "1", "n": "1"})
        size = saver.path.stat().st_size
        for i in range(2, 12):  # ten steps that change "n" only
            cfg = saver.put(cfg, generate_checkpoint(channel_values={"doc": big, "n": i},
                                                     channel_versions={"doc": "1", "n": str(i)}),
                            generate_metadata(step=i), {"n": str(i)})
        assert saver.path.stat().st_size - size < 10_000  # the 100 kB value is not written again
        got = saver.get_tuple(cfg)
        assert got is not None and got.checkpoint["channel_values"] == {"doc": big, "n": 11}


def test_values_come_back_with_their_types(tmp_path: Path) -> None:
    """JSON values as JSON, the rest (bytes, times, NaN, messages, sets, integer keys) through LangGraph's serializer."""
    import datetime as dt
    import math

    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    values: dict[str, Any] = {
        "plain": {"a": [1, 2.5, "x", None, True]}, "tuple": (1, "a"), "bytes": b"\x00\xff",
        "when": dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC), "nan": float("nan"),
        "msgs": [sample.SCRIPT[1]], "set": {1, 2}, "int_keys": {1: "one"},
    }
    versions = {k: "1" for k in values}
    with JournalSaver(tmp_path) as saver:
        saver.put(generate_config("t"), generate_checkpoint(channel_values=values, channel_versions=versions),
                  generate_metadata(), versions)
    line = orjson.loads(saver.path.read_bytes().splitlines()[0])
    assert line["blobs"]["plain"] == ["1", {"json": values["plain"]}] and "b64" in line["blobs"]["bytes"][1]
    with JournalSaver(tmp_path) as saver:
        got = saver.get_tuple(generate_config("t"))
    assert got is not None
    back = got.checkpoint["channel_values"]
    assert math.isnan(back.pop("nan")) and back.pop("tuple") == [1, "a"]  # a list, as LangGraph's serializer gives it
    assert back == {k: v for k, v in values.items() if k not in ("nan", "tuple")} and type(back["msgs"][0]) is AIMessage


def test_values_are_copies(tmp_path: Path) -> None:
    """What was put does not change when the caller changes its objects afterwards, nor when it changes what it read
    (LangGraph appends to a resume list it read: an interrupt resumed twice found its first answer changed)."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    with JournalSaver(tmp_path) as saver:
        value = {"answers": ["yes"]}
        cfg = saver.put(generate_config("t"), generate_checkpoint(channel_values={"v": value},
                                                                  channel_versions={"v": "1"}),
                        generate_metadata(), {"v": "1"})
        saver.put_writes(cfg, [("w", value)], "task")
        value["answers"].append("put")
        for _ in range(2):
            got = saver.get_tuple(cfg)
            assert got is not None and got.checkpoint["channel_values"]["v"] == {"answers": ["yes"]}
            assert got.pending_writes == [("task", "w", {"answers": ["yes"]})]
            got.checkpoint["channel_values"]["v"]["answers"].append("read")
            got.pending_writes[0][2]["answers"].append("read")


def test_torn_last_line_is_moved_aside(tmp_path: Path) -> None:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    with JournalSaver(tmp_path) as saver:
        cfg = saver.put(generate_config("t"), generate_checkpoint(channel_values={"a": [1, "two"]},
                                                                  channel_versions={"a": "1"}),
                        generate_metadata(), {"a": "1"})
        path = saver.path
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"op": "put", "thread": "t", "ns": "", "id": "99", "par')  # a crash in the middle of a write
    with JournalSaver(tmp_path) as saver:
        got = saver.get_tuple(generate_config("t"))
        assert got is not None and got.config == cfg and got.checkpoint["channel_values"] == {"a": [1, "two"]}
        assert path.read_bytes() == whole
        assert path.with_name("checkpoints.jsonl.torn").read_bytes().startswith(b'{"op": "put", "thread": "t"')
    with open(path, "ab") as f:
        f.write(b"not json\n" + whole)  # a damaged line before a good one: refused, with its place
    with pytest.raises(JournalError, match=r"checkpoints\.jsonl:2: damaged checkpoint line"):
        JournalSaver(tmp_path)


def test_a_replayed_run_writes_nothing(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

    with JournalSaver(tmp_path) as saver:
        cfg = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    before = saver.path.read_bytes()
    replayed = SimpleNamespace(run_dir=tmp_path, replay_mode="verify")  # what JournalSaver reads of a replayed Run
    with JournalSaver(replayed) as ro, JournalSaver(tmp_path):  # no lock taken: the writer opens beside it
        assert ro.read_only and ro.get_tuple(generate_config("t")) is not None
        cfg2 = ro.put(cfg, generate_checkpoint(), generate_metadata(step=1), {})
        got = ro.get_tuple(generate_config("t"))
        assert got is not None and got.config == cfg2
    assert saver.path.read_bytes() == before


def test_one_saver_per_run_directory(tmp_path: Path) -> None:
    with JournalSaver(tmp_path), pytest.raises(JournalLockedError, match="in use by another JournalSaver"):
        JournalSaver(tmp_path)
    JournalSaver(tmp_path).close()  # released on close


# ------------------------------------------------------------------------------------------------ journaled calls


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_second_run_serves_every_call(tmp_path: Path, calls_file: Path, use_async: bool) -> None:
    """The same graph run twice in one run directory: the second run's model and tool calls come from the journal
    (the model is not called), as LangChain's own objects, and the result is the same (async: ToolNode awaits the
    tools' ``ainvoke``)."""
    run_dir = tmp_path / "run"
    results = []
    for _ in range(2):
        with Run.open(run_dir) as run:
            graph = sample.build_graph(run, None)
            inp = {"messages": [HumanMessage(sample.PROMPT)]}
            state = asyncio.run(graph.ainvoke(inp)) if use_async else graph.invoke(inp)
            results.append((state["messages"], len(run.replayed), len(run.executed)))
    (first, _, ran), (second, served, ran2) = results
    assert n_lines(calls_file) == 3
    assert (ran, served, ran2) == (6, 6, 0)
    assert [type(m) for m in second] == [type(m) for m in first] and sample.summary(second) == sample.summary(first)
    assert second[-1].usage_metadata == first[-1].usage_metadata and second[3].tool_calls == first[3].tool_calls

    steps = records(run_dir)
    models = [s for s in steps if s["step"].startswith("model:")]
    tools = [s for s in steps if s["step"].startswith("tool:")]
    assert len(models) == 3 and len(tools) == 3
    assert [s["call"] for s in models] == [
        {"kind": "model", "model": MODEL, "provider": PROVIDER, "node": "agent", "superstep": n} for n in (1, 3, 5)
    ]
    assert [s["usage"] for s in models] == [
        [{"model": MODEL, "provider": PROVIDER, "input_tokens": i, "output_tokens": o}] for i, o in [(12, 5), (40, 9), (75, 14)]
    ]
    first_in, last_in = models[0]["inputs"]["args"][0], models[2]["inputs"]["args"][0]
    assert first_in["messages"] == 1 and first_in["last"]["data"]["content"] == sample.PROMPT  # LangChain's dict
    assert last_in["messages"] == 6 and last_in["last"]["type"] == "tool" and len(last_in["digest"]) == 16
    assert sorted((s["call"]["tool"], s["call"]["call_id"], s["inputs"]["args"][0]) for s in tools) == [
        ("lookup", "call_3", {"key": "fdatasync"}),
        ("search", "call_1", {"query": "durable agents"}),
        ("search", "call_2", {"query": "journal replay"}),
    ]
    assert all(s["step"].startswith(f"tool:{s['call']['tool']}@tools:") and s["step"].endswith(f"#{s['call']['call_id']}")
               for s in tools)


def test_chat_result_round_trips() -> None:
    from langchain_core.outputs import ChatGeneration, ChatResult

    msg = sample.SCRIPT[1]
    result = ChatResult(generations=[ChatGeneration(message=msg, generation_info={"finish": "tool_calls"})],
                        llm_output={"id": "r1"})
    back = result_from_json(orjson.loads(orjson.dumps(result_to_json(result))))
    assert back == result and type(back.generations[0].message) is AIMessage


def _resumable_graph(run: Run, saver: JournalSaver, fail: list[bool], use_async: bool) -> Any:
    """``plan`` asks the model; ``answer`` asks it, then fails (the first time): on resume LangGraph runs ``answer``
    again and not ``plan``, so the resumed attempt's first call is the journal's second."""

    def after(reply: AIMessage) -> dict[str, Any]:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("crash after the model call")
        return {"messages": [reply]}

    def model(turn: int = 2) -> JournaledChatModel:
        return JournaledChatModel(sample.CountingFakeModel(responses=[sample.SCRIPT[turn]]), run)

    def plan(state: MessagesState) -> dict[str, Any]:
        reply = model(0).invoke(state["messages"])
        return {"messages": [AIMessage(f"plan: {reply.tool_calls[0]['args']['query']}")]}

    def node(state: MessagesState) -> dict[str, Any]:
        return after(model().invoke(state["messages"]))

    async def anode(state: MessagesState) -> dict[str, Any]:
        return after(await model().ainvoke(state["messages"]))

    g = StateGraph(MessagesState)
    g.add_node("plan", plan)
    g.add_node("answer", anode if use_async else node)
    g.add_edge(START, "plan")
    g.add_edge("plan", "answer")
    g.add_edge("answer", END)
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_node_run_again_after_a_crash_does_not_call_the_model_again(
    tmp_path: Path, calls_file: Path, use_async: bool
) -> None:
    run_dir = tmp_path / "run"
    config: Any = {"configurable": {"thread_id": "t"}}
    fail = [True]

    def invoke(graph: Any, inp: Any) -> Any:
        return asyncio.run(graph.ainvoke(inp, config)) if use_async else graph.invoke(inp, config)

    with pytest.raises(RuntimeError, match="crash after the model call"), Run.open(run_dir) as run, JournalSaver(run) as saver:
        invoke(_resumable_graph(run, saver, fail, use_async), {"messages": [HumanMessage("q")]})
    assert n_lines(calls_file) == 2
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        assert saver.get_tuple(config) is not None
        state = invoke(_resumable_graph(run, saver, fail, use_async), None)  # resume the thread
        assert len(run.replayed) == 1 and len(run.executed) == 0  # plan is not run again; answer's call is served
    assert n_lines(calls_file) == 2  # the model was not paid twice
    assert sample.summary(state["messages"]) == [
        {"type": "human", "content": "q", "tool_calls": 0},
        {"type": "ai", "content": "plan: durable agents", "tool_calls": 0},
        {"type": "ai", "content": sample.SCRIPT[2].content, "tool_calls": 0},
    ]


def test_interrupt_in_a_tool_is_not_a_failed_step(tmp_path: Path) -> None:
    """interrupt() inside a journaled tool pauses the graph without a failed try in the journal (three failed tries
    of one step would make the SDK roll back); the tool runs again when the graph resumes, and is journaled once."""
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command, interrupt

    from supervisor.integrations.langgraph import journaled_tools

    @tool
    def send(to: str) -> str:
        """Send a message, once a human approves."""
        answers = [interrupt(f"send to {to}?") for _ in range(3)]  # three questions: three pauses
        return f"sent to {to}: {answers}"

    call = AIMessage("", tool_calls=[{"name": "send", "args": {"to": "ops"}, "id": "call_9"}])
    config: Any = {"configurable": {"thread_id": "t"}}
    with Run.open(tmp_path / "run") as run, JournalSaver(run) as saver:
        g = StateGraph(MessagesState)
        g.add_node("tools", ToolNode(journaled_tools([send], run)))
        g.add_edge(START, "tools")
        g.add_edge("tools", END)
        graph = g.compile(checkpointer=saver)
        out = graph.invoke({"messages": [call]}, config)
        for answer in ("yes", "sure", "go"):
            assert out["__interrupt__"][0].value == "send to ops?"
            out = graph.invoke(Command(resume=answer), config)
    assert out["messages"][-1].content == "sent to ops: ['yes', 'sure', 'go']"
    steps = records(tmp_path / "run")
    assert [(s["call"]["tool"], "error" in s) for s in steps] == [("send", False)]


def _approval_graph(run: Run, saver: JournalSaver) -> Any:
    """``work`` asks the model, then ``tools`` runs two tool calls, one of which asks a human (``interrupt()`` in the
    tool), then ``work`` asks the model, then a human (``interrupt()`` in the node), then the model again. LangGraph
    runs an interrupted node (or ``ToolNode``) again from its start when it is resumed."""
    import langgraph_fakes as fakes
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode
    from langgraph.types import interrupt

    @tool
    def search(query: str) -> str:
        """Search the notes."""
        fakes.paid("tool:search", query)
        return f"notes on {query}"

    @tool
    def deploy(target: str) -> str:
        """Deploy, once a human approves."""
        fakes.paid("tool:deploy", target)  # paid before it asks: asked again after the answer, it pays again
        return f"deployed to {target}: {interrupt(f'deploy to {target}?')}"

    def script(messages: list[Any]) -> AIMessage:
        if len(messages) == 1:
            return AIMessage("", tool_calls=[{"name": "search", "args": {"query": "q"}, "id": "c1"},
                                             {"name": "deploy", "args": {"target": "prod"}, "id": "c2"}])
        return AIMessage(f"[{len(messages)}] {messages[-1].content}")

    model, tools = saver.journaled(fakes.ScriptedModel(script=script), [search, deploy])

    def work(state: MessagesState) -> dict[str, Any]:
        if len(state["messages"]) == 1:
            return {"messages": [model.invoke(state["messages"])]}
        draft = model.invoke(state["messages"])
        answer = interrupt(f"publish {draft.content!r}?")
        return {"messages": [draft, model.invoke([*state["messages"], draft, HumanMessage(answer)])]}

    g = StateGraph(MessagesState)
    g.add_node("work", work)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "tools" if len(s["messages"]) == 2 else END, ["tools", END])
    g.add_edge("tools", "work")
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_node_run_again_after_interrupt_gets_its_finished_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """``interrupt()`` then ``Command(resume=...)``: the resumed node's model and tool calls that had finished are
    not made again, whether it resumes in the same process or in a new one after a crash while it waited: a clean run
    and a resumed one pay for the same calls (``deploy`` pays once more each time it is run again: it asks the human
    before it returns, so it has not finished)."""
    from langgraph.types import Command

    config: Any = {"configurable": {"thread_id": "t"}}

    def invoke(graph: Any, inp: Any) -> Any:
        return asyncio.run(graph.ainvoke(inp, config)) if use_async else graph.invoke(inp, config)

    def answers(run_dir: Path, crash: bool) -> tuple[Any, Counter[str]]:
        ledger = tmp_path / f"{run_dir.name}.ledger"
        monkeypatch.setenv("LEDGER_FILE", str(ledger))
        with Run.open(run_dir) as run, JournalSaver(run) as saver:
            state = invoke(_approval_graph(run, saver), {"messages": [HumanMessage("go")]})
            for _ in range(2):
                question = state["__interrupt__"][0].value
                if crash:  # the process dies while the human thinks; a new one finds the question pending
                    run.close()
                    saver.close()
                    run = Run.open(run_dir)
                    saver = JournalSaver(run)
                    assert [i.value for i in _approval_graph(run, saver).get_state(config).interrupts] == [question]
                state = invoke(_approval_graph(run, saver), Command(resume=f"yes to {question}"))
            run.close()
            saver.close()
        return sample.summary(state["messages"]), Counter(x["what"] for x in map(orjson.loads, ledger.read_bytes().splitlines()))

    same_process = answers(tmp_path / "same", crash=False)
    after_crash = answers(tmp_path / "crash", crash=True)
    assert same_process == after_crash
    assert same_process[1] == {"model": 3, "tool:search": 1, "tool:deploy": 2}
    assert same_process[0][-1]["content"] == "[6] yes to publish '[4] deployed to prod: yes to deploy to prod?'?"
    steps = records(tmp_path / "same")
    assert len(steps) == 5 and len({s["step"] for s in steps}) == 5  # each call once in the journal


def test_a_retried_node_asks_again_and_a_resume_replays_its_tries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node LangGraph retries (``RetryPolicy``) runs again from its start, and its model call is a new call (a retry
    is a new try: a model that answered badly may answer better); run again after a crash, the node's tries get
    the answers their tries had, in order (the first try's, then the retry's), so it fails and succeeds as it did."""
    import langgraph_fakes as fakes
    from langgraph.types import RetryPolicy

    ledger = tmp_path / "ledger"
    monkeypatch.setenv("LEDGER_FILE", str(ledger))
    got = []
    for _ in range(2):  # the second run: a new process resuming the run after a crash
        fails = [1]
        with Run.open(tmp_path / "run") as run:
            (model, _) = journaled(fakes.ScriptedModel(script=lambda m: AIMessage(f"{n_lines(ledger)}")), [], run)

            def node(state: MessagesState, model: Any = model, fails: list[int] = fails) -> dict[str, Any]:
                reply = model.invoke(state["messages"])
                if fails[0]:
                    fails[0] -= 1
                    raise ConnectionError("after the model call")
                return {"messages": [reply]}

            g = StateGraph(MessagesState)
            g.add_node("n", node, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False))
            g.add_edge(START, "n")
            g.add_edge("n", END)
            got.append(g.compile().invoke({"messages": [HumanMessage("q")]})["messages"][-1].content)
            got.append((len(run.executed), len(run.replayed)))
    assert got == ["2", (2, 0), "2", (0, 2)] and n_lines(ledger) == 2


def test_one_line_journals_a_graphs_model_and_tools(tmp_path: Path) -> None:
    """``saver.journaled(model, tools)`` / ``journaled(model, tools, run)``: a chat model (bound with ``bind_tools`` or
    not) and tools journaled; what is journaled already is kept; mistakes say what to give."""
    import langgraph_fakes as fakes
    from langchain_core.runnables import RunnableBinding

    from supervisor.integrations.langgraph import JournaledTool

    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    model = fakes.ScriptedModel(script=lambda m: AIMessage("ok"))
    with Run.open(tmp_path / "run") as run, JournalSaver(run) as saver:
        wrapped, tools = saver.journaled(model, [double])
        assert isinstance(wrapped, JournaledChatModel) and [type(t) for t in tools] == [JournaledTool]
        assert saver.journaled(wrapped, tools) == (wrapped, tools)  # journaled already: kept
        bound = journaled(model.bind_tools([double]), [], run)[0]
        assert isinstance(bound, RunnableBinding) and isinstance(bound.bound, JournaledChatModel)
        assert bound.kwargs["tools"][0]["function"]["name"] == "double"
        assert bound.invoke("hi").content == "ok" and run.executed[-1].startswith("model:scripted-model")
        assert journaled(None, [double], run)[0] is None
        with pytest.raises(TypeError, match=r"wraps a chat model .* not a str: give the model object"):
            journaled("openai:gpt-4o", [], run)
    with JournalSaver(tmp_path / "other") as by_path, pytest.raises(TypeError, match=r"given a path .* JournalSaver\(run\)"):
        by_path.journaled(model, [])


def test_rows_name_the_node_and_the_branch(tmp_path: Path) -> None:
    """A call's record says where it was made: ``call`` ``node`` (the node's path in a subgraph), ``superstep``, and
    ``branch`` (the ``Send``'s index) for a branch of a fan-out, in its step name as ``@<node>[<branch>]``."""
    import langgraph_fakes as fakes
    from langgraph.types import Send

    with Run.open(tmp_path / "run") as run:
        (model, _) = journaled(fakes.ScriptedModel(script=lambda m: AIMessage("same")), [], run)
        sub = StateGraph(Sub)
        sub.add_node("count", lambda s: {"summary": model.invoke("count").content})
        sub.add_edge(START, "count")
        g = StateGraph(Research)
        g.add_node("research", lambda s: {"notes": [model.invoke("the same question").content]})
        g.add_node("write", sub.compile())
        g.add_conditional_edges(START, lambda s: [Send("research", {"topic": t}) for t in "abc"], ["research"])
        g.add_edge("research", "write")
        g.compile().invoke({"topics": [], "notes": [], "summary": ""})
    calls = [(s["step"].split("@")[1].rsplit(":", 1)[0], s["call"]) for s in records(tmp_path / "run")]
    branches = sorted((where, c["node"], c["superstep"], c.get("branch")) for where, c in calls)
    assert branches == [
        ("count:1", "write|count", 1, None),
        ("research[0]:1", "research", 1, 0), ("research[1]:1", "research", 1, 1), ("research[2]:1", "research", 1, 2),
    ]


def test_wrapping_mistakes_and_plain_functions(tmp_path: Path) -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from supervisor.integrations.langgraph import journaled_tools

    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    with Run.open(tmp_path / "run") as run:
        model = sample.CountingFakeModel(responses=[sample.SCRIPT[2]])
        with pytest.raises(TypeError, match=r"wraps a chat model \(a BaseChatModel\), not a \w*Binding"):
            JournaledChatModel(model.bind(stop=["x"]), run)  # type: ignore[arg-type]
        (wrapped,) = journaled_tools([double], run)
        out = wrapped.invoke({"name": "double", "args": {"n": 21}, "id": "c", "type": "tool_call"})  # as ToolNode calls it
        assert out.content == "42" and out.tool_call_id == "c" and run.executed[-1] == "tool:double#c"
        assert wrapped.invoke({"n": 4}) == 8 and run.executed[-1] == "tool:double"  # called by hand: no call id

        seen: list[Any] = []

        class ToolingModel(sample.CountingFakeModel):
            def bind_tools(self, tools: Any, **kw: Any) -> Any:  # as provider models do: the model bound to kwargs
                return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kw)

            def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
                seen.append(kw)
                return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

        bound = JournaledChatModel(ToolingModel(responses=[sample.SCRIPT[2]]), run).bind_tools([double])
        assert bound.invoke("hi").content == sample.SCRIPT[2].content and run.executed[-1].startswith("model:")
        assert seen[0]["tools"][0]["function"]["name"] == "double"  # the wrapped model got its tools


def test_missing_framework_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "supervisor.integrations.langgraph")
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.base", None)  # as if LangGraph were not installed
    with pytest.raises(ImportError, match=r"pip install 'agent-supervisor-tui\[langgraph\]'"):
        importlib.import_module("supervisor.integrations.langgraph")


# ------------------------------------------------------------------------------------------------ real processes


def test_readme_example_runs_twice_as_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LangGraph example of docs/adapters.md, run twice as ``agent.py`` (in this process: test_readme runs it as a script)."""
    readme = (ROOT / "docs" / "adapters.md").read_text()
    start = readme.index("```python", readme.index("## LangGraph")) + len("```python\n")
    (tmp_path / "agent.py").write_text(readme[start : readme.index("```", start)])
    monkeypatch.chdir(tmp_path)
    for k in [k for k in os.environ if k.startswith("AGENT_SUPERVISOR_")]:
        monkeypatch.delenv(k)
    for _ in range(2):
        runpy.run_path("agent.py", run_name="__main__")
    assert capsys.readouterr().out == "Journal every step. ran 3 calls\nJournal every step. ran 0 calls\n"
    assert (tmp_path / "runs" / "agent" / "langgraph" / "checkpoints.jsonl").stat().st_size > 0


def test_supervised_agent_crashing_in_a_tool_resumes(tmp_path: Path, calls_file: Path) -> None:
    """``supervise`` restarts the sample agent after os._exit inside a tool (after two model calls): the thread
    resumes from its checkpoint, the crashed node runs again (its other tool call, in a parallel thread, is served if
    it had committed, else runs: one record either way), and the model calls in total and the final messages are a
    clean run's."""
    clean = sample.main(str(tmp_path / "clean"))
    clean_calls = n_lines(calls_file)
    assert clean_calls == 3

    run_dir, crash, calls, result = tmp_path / "run", tmp_path / "crashed", tmp_path / "calls", tmp_path / "result.json"
    env = clean_env() | {"CRASH_ONCE_FILE": str(crash), "MODEL_CALLS_FILE": str(calls), "RESULT_FILE": str(result)}
    env.pop("RUN_DIR", None)
    p = subprocess.run(
        [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "-q", "--backoff-initial", "0.05",
         "--", sys.executable, str(SAMPLE)],
        capture_output=True, text=True, timeout=50, env=env, cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert crash.exists() and n_lines(calls) == clean_calls
    assert orjson.loads(result.read_bytes()) == clean
    starts = records(run_dir, "start")
    assert len(starts) == 2 and starts[1].get("resume")
    tools = [s["step"] for s in records(run_dir) if s["step"].startswith("tool:")]
    assert sum("#call_2" in t for t in tools) == 1 and sum("#call_3" in t for t in tools) == 1
