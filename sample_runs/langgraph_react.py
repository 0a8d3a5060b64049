"""LangGraph's prebuilt ReAct agent (``create_react_agent(model, tools, checkpointer=...)``) made durable in one line
by supervisor.integrations.langgraph (offline: a scripted model, see ``langgraph_fakes.py``)::

    agent = create_react_agent(*saver.journaled(model, tools), checkpointer=saver)

The model asks for two tool calls a turn for ``TURNS`` turns, then answers; LangGraph's prebuilt agent runs each tool
call as a branch of its own (a ``Send`` to ``tools``). A restarted attempt resumes the thread from its last
checkpoint, and the calls of the node that was cut short come from the journal.

Run it twice (``python sample_runs/langgraph_react.py``), or under ``agent-supervisor supervise -- python ...``.
Environment (for tests): ``LEDGER_FILE``, ``FAKE_CALL_DELAY`` (see ``langgraph_fakes.py``); ``RESULT_FILE=<path>``:
the final messages as JSON; ``RUN_DIR``: the run directory (default: the SDK's).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import langgraph_fakes as fakes
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from supervisor import Run
from supervisor.integrations.langgraph import JournalSaver

TURNS = 5
PROMPT = "Which of our services need a new certificate this month?"


def script(messages: list[BaseMessage]) -> AIMessage:
    """Turn ``t`` (the AI messages so far) asks for a search and a lookup; the last turn answers."""
    t = sum(isinstance(m, AIMessage) for m in messages)
    if t >= TURNS:
        return AIMessage(f"Done after {t} turns: {str(messages[-1].content)[:40]}")
    return AIMessage("", tool_calls=[
        {"name": "search", "args": {"query": f"certificates batch {t}"}, "id": f"call_{t}_a"},
        {"name": "lookup", "args": {"service": f"svc-{t}"}, "id": f"call_{t}_b"},
    ])


@tool
def search(query: str) -> str:
    """Search the inventory."""
    fakes.paid("tool:search", query)
    return f"2 services match {query!r}"


@tool
def lookup(service: str) -> str:
    """Look a service's certificate up."""
    fakes.paid("tool:lookup", service)
    return f"{service}: expires in {len(service) * 3} days"


def build_agent(saver: JournalSaver) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # LangGraph 1.x points to langchain.agents.create_agent; the prebuilt one works
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(*saver.journaled(fakes.ScriptedModel(script=script), [search, lookup]),
                                  checkpointer=saver)


def main(run_dir: str | None = None) -> list[dict[str, Any]]:
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        fakes.RUN = run
        agent = build_agent(saver)
        config: Any = {"configurable": {"thread_id": "main"}}
        state = agent.invoke(None if saver.get_tuple(config) else {"messages": [HumanMessage(PROMPT)]}, config)
        result = fakes.summary(state["messages"])
    fakes.write_result(result)
    return result


if __name__ == "__main__":
    print(json.dumps(main(os.environ.get("RUN_DIR"))[-1]))
