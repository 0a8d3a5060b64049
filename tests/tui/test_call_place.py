"""A call's row names the agent, node and fan-out branch that made it (issue 27: six Send rows looked identical)."""

from __future__ import annotations

from supervisor.tui.timeline import _call_place


def test_rows_of_one_node_are_told_apart() -> None:
    rows = {_call_place({"kind": "model", "node": "research", "branch": i}) for i in range(6)}
    assert len(rows) == 6 and " @research[3]" in rows
    assert _call_place({"kind": "model", "agent": "triage"}) == " (triage)"
    assert _call_place({"kind": "tool", "tool": "search"}) == ""  # a call that says none of them: as before
    assert _call_place({"kind": "model", "node": "", "branch": True}) == ""
