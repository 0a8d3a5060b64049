"""A LangGraph map-reduce: ``plan`` fans out to ``BRANCHES`` ``research`` branches with ``Send``, ``write`` joins
them, ``ROUNDS`` times; made durable by supervisor.integrations.langgraph (offline: a scripted model, see
``langgraph_fakes.py``).

Every branch asks the model the same question (about its own topic's notes, fetched by a tool first): the journal's
rows tell the branches apart by the node and the ``Send``'s index (``model:...@research[3]:...``, and ``call``
``{"node": "research", "branch": 3, "superstep": ...}``). The branches run at once, in LangGraph's threads; a
restarted attempt runs again only the branches whose writes were not checkpointed, and their finished calls come
from the journal.

Run it twice (``python sample_runs/langgraph_fanout.py``), or under ``agent-supervisor supervise -- python ...``.
Environment (for tests): ``LEDGER_FILE``, ``FAKE_CALL_DELAY`` (see ``langgraph_fakes.py``); ``RESULT_FILE=<path>``:
the final state as JSON; ``RUN_DIR``: the run directory (default: the SDK's).
"""

from __future__ import annotations

import json
import operator
import os
from typing import Annotated, Any, TypedDict

import langgraph_fakes as fakes
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from supervisor import Run
from supervisor.integrations.langgraph import JournalSaver

BRANCHES = 6
ROUNDS = 2
QUESTION = "Summarise what matters in the notes above in one line."


class Report(TypedDict):
    round: int
    notes: Annotated[list[str], operator.add]
    summaries: Annotated[list[str], operator.add]


class Branch(TypedDict):
    round: int
    topic: str


def script(messages: list[BaseMessage]) -> AIMessage:
    """A summary of the request's first message (the branch's notes, or all of them)."""
    return AIMessage(f"summary of {len(str(messages[0].content))} chars over {len(messages)} messages")


@tool
def fetch(topic: str) -> str:
    """Fetch a topic's notes."""
    fakes.paid("tool:fetch", topic)
    return f"notes on {topic}: three findings"


def build_graph(model: Any, fetch_notes: Any, checkpointer: Any) -> Any:
    def research(b: Branch) -> dict[str, Any]:
        notes = fetch_notes.invoke({"topic": b["topic"]})
        # the same question in every branch: only the node and the branch tell their rows apart
        reply = model.invoke([HumanMessage(f"{len(notes)} chars of notes"), HumanMessage(QUESTION)])
        return {"notes": [notes], "summaries": [f"{b['topic']}: {reply.content}"]}

    def write(state: Report) -> dict[str, Any]:
        reply = model.invoke([HumanMessage("\n".join(sorted(state["summaries"]))), HumanMessage("Write the report.")])
        return {"summaries": [f"report {state['round']}: {reply.content}"], "round": state["round"] + 1}

    def fan_out(state: Report) -> list[Send]:
        return [Send("research", {"round": state["round"], "topic": f"topic-{state['round']}-{i}"}) for i in range(BRANCHES)]

    g = StateGraph(Report)
    g.add_node("plan", lambda s: {})
    g.add_node("research", research)
    g.add_node("write", write)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["research"])
    g.add_edge("research", "write")
    g.add_conditional_edges("write", lambda s: "plan" if s["round"] < ROUNDS else END, ["plan", END])
    return g.compile(checkpointer=checkpointer)


def main(run_dir: str | None = None) -> dict[str, Any]:
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        fakes.RUN = run
        model, (fetch_notes,) = saver.journaled(fakes.ScriptedModel(script=script), [fetch])
        graph = build_graph(model, fetch_notes, saver)
        config: Any = {"configurable": {"thread_id": "main"}}
        state = graph.invoke(None if saver.get_tuple(config) else {"round": 0, "notes": [], "summaries": []}, config)
        result = dict(state)  # in branch order, whatever order they finished in: LangGraph applies writes by task path
    fakes.write_result(result)
    return result


if __name__ == "__main__":
    print(json.dumps(main(os.environ.get("RUN_DIR"))["summaries"][-1]))
