"""A LangGraph agent (offline: langchain-core's fake chat model) made durable by supervisor.integrations.langgraph.

A two-node ReAct loop over ``MessagesState``: ``agent`` asks the model, ``tools`` (LangGraph's ``ToolNode``) runs the
tool calls it asked for; three model calls, three tool calls of two tools (``search`` twice, ``lookup`` once, the
second turn asks for ``search`` and ``lookup`` at once). The graph's checkpointer is :class:`JournalSaver`, so a
restarted attempt resumes the thread from its last checkpoint, and the model and tools are journaled, so a node
that runs again after a crash gets its finished calls from the journal.

Run it twice (``python sample_runs/langgraph_agent.py``), or under ``agent-supervisor supervise -- python ...``.
Environment (for tests): ``CRASH_ONCE_FILE=<path>``: ``lookup`` crashes the process (``os._exit(1)``) the first time,
after creating the file; ``MODEL_CALLS_FILE=<path>``: one line appended per model call that really runs;
``RESULT_FILE=<path>``: the final messages as JSON; ``RUN_DIR``: the run directory (default: the SDK's).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from supervisor import Run
from supervisor.integrations.langgraph import JournaledChatModel, JournalSaver, journaled_tools

PROMPT = "What makes a long agent durable?"


def _ai(content: str, calls: list[tuple[str, dict[str, Any], str]], tokens: tuple[int, int]) -> AIMessage:
    return AIMessage(
        content=content,
        tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls],
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
    )


# The model's answer for each turn (the number of AI messages so far): the fake model is scripted by the state,
# so a resumed thread gets the answer of its turn, as a real model given the same messages would.
SCRIPT = [
    _ai("", [("search", {"query": "durable agents"}, "call_1")], (12, 5)),
    _ai("", [("search", {"query": "journal replay"}, "call_2"), ("lookup", {"key": "fdatasync"}, "call_3")], (40, 9)),
    _ai("A journal of every step, synced before it counts, replayed on restart.", [], (75, 14)),
]


class CountingFakeModel(FakeMessagesListChatModel):
    """langchain-core's fake chat model, counting the calls that really run (``MODEL_CALLS_FILE``)."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        path = os.environ.get("MODEL_CALLS_FILE")
        if path:
            with open(path, "a") as f:
                f.write(f"{len(messages)}\n")
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


@tool
def search(query: str) -> str:
    """Search the notes for a query."""
    return f"3 notes about {query}"


@tool
def lookup(key: str) -> str:
    """Look a term up in the glossary."""
    marker = os.environ.get("CRASH_ONCE_FILE")
    if marker and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("crashed\n")
        os._exit(1)  # a hard crash in the middle of the tools node: nothing is cleaned up
    return f"{key}: flush a file's data to disk"


def build_graph(run: Run | None, checkpointer: Any) -> Any:
    """The graph; ``run=None``: the bare framework (nothing journaled), as the benchmark compares."""

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        model: Any = CountingFakeModel(responses=[SCRIPT[turn]])
        if run is not None:
            model = JournaledChatModel(model, run)
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(journaled_tools([search, lookup], run) if run is not None else [search, lookup]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def summary(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """The final messages as JSON (what a clean and a resumed run must agree on)."""
    return [{"type": m.type, "content": m.content, "tool_calls": len(getattr(m, "tool_calls", None) or [])}
            for m in messages]


def main(run_dir: str | None = None) -> list[dict[str, Any]]:
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        graph = build_graph(run, saver)
        config: Any = {"configurable": {"thread_id": "main"}}
        if saver.get_tuple(config) is None:
            state = graph.invoke({"messages": [HumanMessage(PROMPT)]}, config)
        else:  # a restart: resume the thread where the last attempt stopped (a finished thread returns its state)
            state = graph.invoke(None, config)
        result = summary(state["messages"])
    if os.environ.get("RESULT_FILE"):
        with open(os.environ["RESULT_FILE"], "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    out = main(os.environ.get("RUN_DIR"))
    print(json.dumps(out[-1]))
    sys.exit(0)
