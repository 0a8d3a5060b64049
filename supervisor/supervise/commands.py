"""The control socket's commands: status, stop, restart, rollback, pause, resume.

A dispatch table from the request's ``cmd`` onto ``Supervisor`` operations;
each entry checks what the current state allows and says why an impossible
request cannot be done. The loop itself is in ``supervisor.py``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core import pauses
from ..errors import SupervisorError
from .control import Reply
from .policy import Pending
from .rollback import resolve_checkpoint
from .states import ProcessState

if TYPE_CHECKING:
    from .supervisor import Supervisor

S = ProcessState
Command = Callable[[dict[str, Any], Reply], None]


class ControlCommands:
    """Answers control requests for one ``Supervisor``."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.table: dict[str, Command] = {
            "status": lambda req, reply: reply(self.status()),
            "stop": self.stop,
            "restart": self.restart,
            "rollback": self.rollback,
            "pause": self.pause,
            "resume": self.resume,
        }
        self.always = frozenset({"status", "stop"})
        """Commands answered even while the supervisor stops for good."""

    def handle(self, req: dict[str, Any], reply: Reply) -> None:
        """Dispatch one request (the ``ControlServer`` handler)."""
        cmd = req.get("cmd")
        fn = self.table.get(str(cmd))
        if fn is None:
            reply({"ok": False, "error": f"unknown command {cmd!r}; use status, stop, restart, rollback, pause or resume"})
            return
        sup = self.sup
        pending = sup.sm.pending
        stopping_for_good = pending is not None and pending.action == Pending.STOP
        if cmd not in self.always and (stopping_for_good or sup.sm.state.terminal):
            reply({"ok": False, "error": f"the supervisor is stopping; {cmd!r} is no longer possible"})
            return
        fn(req, reply)

    def status(self) -> dict[str, Any]:
        """The status response: state, pid, attempt, figures."""
        sup = self.sup
        sup.poll_journal()
        child = sup.child
        sm = sup.sm
        st: dict[str, Any] = {
            "ok": True,
            "state": sm.state.value,
            "state_since": sup.state_since,
            "pid": child.pid if child else None,
            "attempt": sup.attempt_no,
            "uptime_s": round(child.uptime, 3) if child else None,
            "restarts": sup.restarts,
            "cpu_percent": sup.tree.sample.cpu_percent if child else 0.0,
            "rss_bytes": sup.tree.sample.rss_bytes if child else 0,
            "threads": sup.tree.sample.threads if child else 0,
            "open_files": sup.tree.sample.open_files if child else 0,
            "processes": sup.tree.sample.processes if child else 0,
            "records": sup.journal.records,
            "step": sup.cur.in_flight if sup.cur and child else None,
            "paused": pauses.paused_field(_open_pauses(sup)),
            "restarts_paused": sm.paused,
            "attempts_without_progress": sup.no_progress,
            "run_dir": str(sup.run_dir),
            "supervisor_pid": os.getpid(),
            "supervisor_uptime_s": round(time.monotonic() - sup.started, 3),
            "live": True,
        }
        if sup.report.resource_totals:
            st["resource_errors"] = dict(sup.report.resource_totals)  # what ran out since the start, and how often
        if sm.state is S.BACKOFF and sm.backoff_until is not None:
            st["backoff_s"] = sm.backoff_s
            st["backoff_left_s"] = round(max(0.0, sm.backoff_until - time.monotonic()), 3)
        return st

    def stop(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        pending = sup.sm.pending
        if not (pending is not None and pending.action == Pending.STOP):
            sup.request_stop()
        reply({"ok": True, "state": sup.sm.state.value})

    def restart(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        if sup.sm.state is S.STOPPING:
            reply({"ok": False, "error": "the agent is already being stopped; wait for it to restart"})
            return
        if sup.child is not None:
            sup.begin_stop(Pending.RESTART)
        else:
            sup.sm.set_paused(False)
            sup.spawn(reason="request")
        reply({"ok": True, "state": sup.sm.state.value})

    def pause(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        if sup.sm.set_paused(True):
            sup.say("restarts paused")
        reply({"ok": True, "state": sup.sm.state.value, "paused": True})

    def resume(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        if sup.sm.set_paused(False):
            sup.say("restarts resumed")
            if sup.sm.state is S.PAUSED:
                sup.spawn(reason="resume")
        reply({"ok": True, "state": sup.sm.state.value, "paused": False})

    def rollback(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        ref = req.get("checkpoint")
        if ref is None or ref == "":
            reply({"ok": False, "error": 'rollback needs "checkpoint": a checkpoint name or seq (or "start")'})
            return
        ref = str(ref)
        reason = str(req.get("reason") or "manual rollback")
        by = str(req.get("by") or "user")
        sup.poll_journal()
        try:
            resolve_checkpoint(sup.journal.fold, ref)
        except SupervisorError as e:
            reply({"ok": False, "error": str(e)})
            return
        if sup.sm.state is S.STOPPING:
            reply({"ok": False, "error": "the agent is being stopped; retry the rollback in a moment"})
            return
        info: dict[str, Any] = {"checkpoint": ref, "reason": reason, "by": by, "reply": reply}
        if sup.child is not None:
            sup.begin_stop(Pending.ROLLBACK, info=info)
            return
        backoff = sup.sm.state is S.BACKOFF
        sup.do_rollback(**info)
        if backoff:
            sup.spawn(reason="rollback")


def _open_pauses(sup: Supervisor) -> dict[Any, Any]:
    """The journal's open pauses, then the model calls the proxy holds (their seqs are ``llm.jsonl``'s)."""
    found: dict[Any, Any] = {("journal", k): p for k, p in sup.journal.pauses.items()}
    if sup.llm_proxy is not None:
        found.update({("llm", k): p for k, p in list(sup.llm_proxy.pauses.items())})
    return found
