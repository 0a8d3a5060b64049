"""The control socket's commands: status, stop, restart, rollback, pause, resume.

Kept apart from the loop in ``supervise.py``: this module maps requests onto the
supervisor's operations and says why an impossible request cannot be done.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..core import history as history_mod
from ..errors import SupervisorError
from .control import Reply
from .rollback import resolve_checkpoint
from .states import ProcessState

if TYPE_CHECKING:
    from .supervisor import Supervisor

S = ProcessState


class ControlCommands:
    """Answers control requests for one ``Supervisor``."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def status(self) -> dict[str, Any]:
        """The status response: state, pid, attempt, figures."""
        sup = self.sup
        sup.poll_journal()
        child = sup.child
        st: dict[str, Any] = {
            "ok": True,
            "state": sup.sm.state.value,
            "state_since": sup.state_since,
            "pid": child.pid if child else None,
            "attempt": sup.attempt_no,
            "uptime_s": round(child.uptime, 3) if child else None,
            "restarts": sup.restarts,
            "cpu_percent": sup.sample.cpu_percent if child else 0.0,
            "rss_bytes": sup.sample.rss_bytes if child else 0,
            "threads": sup.sample.threads if child else 0,
            "open_files": sup.sample.open_files if child else 0,
            "processes": sup.sample.processes if child else 0,
            "records": sup.records,
            "step": sup.cur.in_flight if sup.cur and child else None,
            "paused": sup.paused,
            "attempts_without_progress": sup.no_progress,
            "run_dir": str(sup.run_dir),
            "supervisor_pid": os.getpid(),
            "supervisor_uptime_s": round(time.monotonic() - sup.started, 3),
            "live": True,
        }
        if sup.sm.state is S.BACKOFF and sup.backoff_until is not None:
            st["backoff_s"] = sup.backoff_s
            st["backoff_left_s"] = round(max(0.0, sup.backoff_until - time.monotonic()), 3)
        return st

    def handle(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        cmd = req.get("cmd")
        state = sup.sm.state
        stopping_for_good = sup.pending is not None and sup.pending[0] == "stop"
        if cmd == "status":
            reply(self.status())
        elif cmd == "stop":
            if not stopping_for_good:
                sup.request_stop()
            reply({"ok": True, "state": sup.sm.state.value})
        elif stopping_for_good or state.terminal:
            reply({"ok": False, "error": f"the supervisor is stopping; {cmd!r} is no longer possible"})
        elif cmd == "restart":
            if state is S.STOPPING:
                reply({"ok": False, "error": "the agent is already being stopped; wait for it to restart"})
            elif sup.child is not None:
                sup.begin_stop("restart")
                reply({"ok": True, "state": sup.sm.state.value})
            else:
                sup.backoff_until = None
                sup.paused = False
                sup.spawn(reason="request")
                reply({"ok": True, "state": sup.sm.state.value})
        elif cmd == "rollback":
            self._rollback(req, reply)
        elif cmd == "pause":
            if not sup.paused:
                sup.paused = True
                sup.emit("pause")
                sup.say("restarts paused")
                if state is S.BACKOFF:
                    sup.backoff_until = None
                    sup.sm.change(S.PAUSED, after="backoff")
            reply({"ok": True, "state": sup.sm.state.value, "paused": True})
        elif cmd == "resume":
            if sup.paused:
                sup.paused = False
                sup.emit("resume")
                sup.say("restarts resumed")
                if sup.sm.state is S.PAUSED:
                    sup.spawn(reason="resume")
            reply({"ok": True, "state": sup.sm.state.value, "paused": False})
        else:
            reply({"ok": False, "error": f"unknown command {cmd!r}; use status, stop, restart, rollback, pause or resume"})

    def _rollback(self, req: dict[str, Any], reply: Reply) -> None:
        sup = self.sup
        ref = req.get("checkpoint")
        if ref is None or ref == "":
            reply({"ok": False, "error": 'rollback needs "checkpoint": a checkpoint name or seq (or "start")'})
            return
        ref = str(ref)
        reason = str(req.get("reason") or "manual rollback")
        by = str(req.get("by") or "user")
        try:
            resolve_checkpoint(history_mod.load(sup.run_dir), ref)
        except SupervisorError as e:
            reply({"ok": False, "error": str(e)})
            return
        if sup.sm.state is S.STOPPING:
            reply({"ok": False, "error": "the agent is being stopped; retry the rollback in a moment"})
            return
        if sup.child is not None:
            sup.begin_stop("rollback", checkpoint=ref, reason=reason, by=by, reply=reply)
            return
        sup.backoff_until = None
        sup.do_rollback(ref, reason, by, reply)
        if sup.sm.state is S.BACKOFF:
            sup.spawn(reason="rollback")
