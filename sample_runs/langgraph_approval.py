"""A LangGraph agent that asks a human before it goes on (``interrupt()``), made durable by
supervisor.integrations.langgraph (offline: a scripted model, see ``langgraph_fakes.py``).

Each of ``ROUNDS`` runs of the ``review`` node drafts a change with the model, checks it with a tool (``lint``),
asks for approval (``interrupt``), revises the draft with the model, asks again and writes the final text with the
model. LangGraph runs an interrupted node again from its start once it is resumed (``Command(resume=...)``): the
node's model and tool calls that had finished are not made again, whether the resume comes in the same process or
after a crash while the agent waited (``JournalSaver.journaled`` wraps the model and the tool: one line).

Run it twice (``python sample_runs/langgraph_approval.py``), or under ``agent-supervisor supervise -- python ...``.
Environment (for tests): ``ANSWERS_DIR``, ``LEDGER_FILE``, ``FAKE_CALL_DELAY`` (see ``langgraph_fakes.py``);
``RESULT_FILE=<path>``: the final messages as JSON; ``RUN_DIR``: the run directory (default: the SDK's).
"""

from __future__ import annotations

import json
import os
from typing import Any

import langgraph_fakes as fakes
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from supervisor import Run
from supervisor.integrations.langgraph import JournalSaver

ROUNDS = 4
PROMPT = "Tidy the release notes."


class Review(MessagesState):
    round: int


def script(messages: list[BaseMessage]) -> AIMessage:
    """The model's answer to the last message, numbered by the conversation's length."""
    return AIMessage(f"[{len(messages)}] on '{str(messages[-1].content)[:40]}'")


@tool
def lint(text: str) -> str:
    """Check a draft's style."""
    fakes.paid("tool:lint", text)
    return f"{len(text.split())} words, fine"


def build_graph(model: Any, check: Any, checkpointer: Any) -> Any:
    """``review`` ``ROUNDS`` times; each run of it: model, tool, ask, model, ask, model."""

    def review(state: Review) -> dict[str, Any]:
        r = state["round"]
        asked = [*state["messages"], HumanMessage(f"round {r}: propose a change")]
        draft = model.invoke(asked)
        verdict = check.invoke({"text": str(draft.content)})
        first = interrupt(f"round {r}: apply {draft.content!r}? lint: {verdict}")
        revised = model.invoke([*asked, draft, HumanMessage(f"reviewer: {first}")])
        second = interrupt(f"round {r}: ship {revised.content!r}?")
        final = model.invoke([*asked, draft, revised, HumanMessage(f"reviewer: {second}")])
        return {"messages": [asked[-1], final], "round": r + 1}

    g = StateGraph(Review)
    g.add_node("review", review)
    g.add_edge(START, "review")
    g.add_conditional_edges("review", lambda s: "review" if s["round"] < ROUNDS else END, ["review", END])
    return g.compile(checkpointer=checkpointer)


def main(run_dir: str | None = None) -> list[dict[str, Any]]:
    with Run.open(run_dir) as run, JournalSaver(run) as saver:
        fakes.RUN = run
        model, (check,) = saver.journaled(fakes.ScriptedModel(script=script), [lint])
        graph = build_graph(model, check, saver)
        config: Any = {"configurable": {"thread_id": "main"}}
        if saver.get_tuple(config) is None:
            state = graph.invoke({"messages": [HumanMessage(PROMPT)], "round": 0}, config)
        elif waiting := graph.get_state(config).interrupts:
            # a restart while the thread waited for an answer: ask again. Not invoke(None): LangGraph would give the
            # node's next interrupt the last Command's answer (its pending resume value), InMemorySaver as well
            state = {"__interrupt__": waiting}
        else:  # a restart in the middle of a node (or after the end): carry on the thread
            state = graph.invoke(None, config)
        while state.get("__interrupt__"):
            state = graph.invoke(Command(resume=fakes.ask(state["__interrupt__"][0].value)), config)
        result = fakes.summary(state["messages"])
    fakes.write_result(result)
    return result


if __name__ == "__main__":
    print(json.dumps(main(os.environ.get("RUN_DIR"))[-1]))
