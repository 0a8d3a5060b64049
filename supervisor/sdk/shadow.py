"""The state shadow: ``run.state`` as the journal records it (the patches so far), which the next patch is made
against, and the cursor that replays the recorded patches on resume."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..core import state as state_mod
from ..core.cursor import Shape, StateCursor
from ..core.history import Fold, damaged_message
from ..core.records import Record
from ..errors import NotJSONValueError, ReplayError


class JournalCursor(StateCursor):
    """The SDK's state cursor once the run is live: it holds no records (the state moves by the live
    patches the SDK applies itself). A move it is asked for (after a record that was not written)
    reads the patches back from the journal's files along the run's rollbacks, without snapshots:
    the shadow is exactly the patches."""

    def __init__(self, run_dir: Path, fold: Fold, seq: int, doc: Any) -> None:
        super().__init__(run_dir)
        self._fold = fold
        self.seq = seq
        self.doc = doc

    def advance(self, seq: int, current: Record | None = None) -> bool:
        before = self.patches
        self._move(seq, Shape((), tuple(self._fold.cuts)), current)
        return self.patches != before


class Shadow:
    """``run.state`` (``state``) beside what the journal has of it (``cursor.doc``, the shadow).

    Before the first live step the cursor replays the resume view's records; once ``live`` it holds none and
    moves by the patches this process writes. ``stop(msg, damaged)`` is called at a damaged line the state
    cannot pass (it ends the agent).
    """

    def __init__(self, run_dir: Path, fold: Fold, replay: bool, stop: Callable[[str, Record], None]) -> None:
        self.run_dir = run_dir
        self.fold = fold
        self.replay = replay
        self.stop = stop
        self.state: dict[str, Any] = {}
        self.cursor: StateCursor = StateCursor(run_dir, records=fold.history.effective)
        self.json: tuple[Any, bytes] | None = None  # the shadow and its JSON (see with_patch)
        self.live = False

    @property
    def doc(self) -> Any:
        """The state as the journal records it: the next patch is made against it."""
        return self.cursor.doc

    def forget(self) -> None:
        """A record whose patch is in the shadow was not written: the next record carries the whole state
        (an unknown shadow gives one root ``replace``), so no patch is made against a state the journal never had."""
        self.cursor.doc = None
        self.json = None

    def replay_to(self, upto_seq: int, current: Record | None = None) -> None:
        """Bring the state to what it was right after the recorded record ``upto_seq``.

        The recorded patches are the truth: what the step function did to the
        state, and what the agent did between steps, are both in them.
        ``current`` is the already parsed record at ``upto_seq``, if the caller has it.

        It never goes past a damaged line (other than a damaged ``begin`` or ``start``,
        which held nothing a resume needs): the agent stops there (see ``stop``).
        """
        damaged = self.fold.damaged
        if damaged and upto_seq >= damaged[0]["seq"]:
            msg = damaged_message(damaged[0], self.run_dir, self.fold.checkpoints)
            if self.replay:
                raise ReplayError(msg)
            self.stop(msg, damaged[0])
        self.json = None  # the cursor may change the shadow in place
        if self.cursor.advance(upto_seq, current):
            self._adopt()

    def follow(self, rec: Record) -> None:
        """The state after a served step: forward to its record (a step served out of commit order does not go back)."""
        seq = rec["seq"]
        damaged = self.fold.damaged
        if damaged and seq >= damaged[0]["seq"]:
            self.replay_to(seq)  # raises: a damaged line is never served nor passed
        cursor = self.cursor
        if self.live or seq <= cursor.seq:
            return
        self.json = None
        if cursor.advance(seq, rec):
            self._adopt()

    def _adopt(self) -> None:
        """The cursor moved the shadow: the agent's state becomes it, unless equal as JSON (1 -> True is a change)."""
        if not state_mod.same(self.state, self.cursor.doc):
            self.state.clear()
            self.state.update(state_mod.json_copy(self.cursor.doc))

    def to_end(self) -> None:
        """The state as the journal has it at the end of the resume view (state saved after the last step included)."""
        eff = self.fold.history.effective
        if eff and self.cursor.seq < eff[-1]["seq"]:
            self.replay_to(eff[-1]["seq"])

    def go_live(self) -> None:
        """Let go of the resume view's records: from here the cursor moves by the live patches."""
        self.live = True
        if not self.replay:
            self.cursor = JournalCursor(self.run_dir, self.fold, self.cursor.seq, self.cursor.doc)
            self.json = None

    def applied(self, seq: int) -> None:
        """A record this process wrote, its patch already in the shadow."""
        if seq > self.cursor.seq:  # records without a patch may commit out of order (threads)
            self.cursor.applied(seq)

    def reload(self) -> None:
        """Bring the shadow back to the last record this process folded, after one that was not written.

        Before the first live step the cursor replays its records in memory; after it,
        it reads the patches back from the files (a live run keeps no records).
        """
        seq = self.cursor.seq
        self.json = None
        self.cursor.reset()
        if seq >= 0:
            self.cursor.advance(seq)

    def changed(self) -> bool:
        """Whether ``run.state`` differs from the shadow as JSON (changes the journal does not have yet)."""
        return not state_mod.same(self.state, self.cursor.doc)

    def with_patch(self, rec: Record) -> None:
        """Give ``rec`` the patch from the shadow to ``run.state`` (none if equal), and move the shadow to it.

        fix_keys: the state's non-string keys become JSON's strings in place, so the state in memory after a
        step is the state a resume gives (docs/run-directory.md, "State"). Most steps leave the state as it was: one dump of
        the state, compared with the shadow's bytes (kept from the step before while the shadow is the same
        object), tells so at C speed. Only string keys are dumped so (others go to make_patch, which converts them).
        """
        st = self.state
        shadow = self.cursor.doc
        if not st and type(shadow) is dict and not shadow:
            return  # both empty (an agent that keeps no state): nothing to compare
        try:
            now: bytes | None = orjson.dumps(st)
        except TypeError:
            now = None
        changed = False  # known to differ as JSON: make_patch need not compare them again
        if now is not None:
            known = self.json
            if known is None or known[0] is not shadow:
                try:
                    known = (shadow, orjson.dumps(shadow))
                except TypeError:
                    known = (shadow, b"")
            if known[1] == now:
                self.json = known
                return
            changed = known[1] != b""  # both dumped, the bytes differ
        patch = state_mod.make_patch(shadow, st, fix_keys=True, changed=changed)
        if patch:
            refused = _refused(st, patch, rec)
            if refused is not None:  # the shadow stays as it was
                if rec.get("kind") != "step":
                    raise refused  # a checkpoint (before its file is written), the state at exit
                rec[REFUSED] = refused  # a step's: raised by the recorder, where a record not written is handled
                return
            rec["state_patch"] = patch
            shadow = self.cursor.doc = state_mod.apply_patch(shadow, patch)
        # the shadow is now the state as JSON: its bytes are the state's
        self.json = (shadow, now) if now is not None else None


_has_null = re.compile(b"null").search
REFUSED = "\x00refused"
"""The key of a record whose state patch was refused: the recorder raises its error instead of writing the record,
where its caller's failure handling already is (a step's position is given back as for any record not written)."""


def _refused(state: Any, patch: list[dict[str, Any]], rec: Record) -> NotJSONValueError | None:
    """The error for a patch the journal would change (a NaN or an Infinity, written as null; a lone surrogate),
    naming where in ``run.state``; None for a patch it holds exactly. The patch's bytes (not the state's: a patch
    is usually a few hundred bytes) say at C speed that it holds neither: no null, or one that reads back equal;
    else its values are walked."""
    try:
        data: bytes | None = orjson.dumps(patch)
    except TypeError:
        data = None  # a lone surrogate (found below), or a value apply_patch refuses
    if data is not None and (_has_null(data) is None or orjson.loads(data) == patch):
        return None
    kind = rec.get("kind")
    if kind == "note":
        who = f"the note {rec.get('message')!r}"
    else:
        who = f"{kind} {rec.get('step', rec.get('name'))!r}"
    try:
        state_mod.check_patch(state, patch, who)
    except NotJSONValueError as e:
        return e
    return None
