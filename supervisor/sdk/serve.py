"""Serving recorded steps: one :meth:`Server.serve` answers every call with its recorded output, or says it runs.

Its phase is explicit (:class:`Phase`), its transitions guarded (:data:`_TRANSITIONS`), as a replayer that is the
same worker as live execution: serving in order (a resume whose calls come as the journal has them), serving by
identity (``(name, k)``: steps overlapped, or ``match_by_name``), live (nothing left to serve), replay (``replay
--verify``/``--live``: nothing is written) and closed.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import mmap
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, cast

import orjson

from ..core import rundir, wire
from ..core.history import Fold
from ..core.journal_reader import JournalReader
from ..core.records import LazyRecord, Record, normalize, step_name
from ..errors import BadStepRecordError, DivergenceError, JournalError
from ..replay.session import ReplaySession, canonical_inputs, inputs_hash
from .names import StepNames
from .options import _Opts, codec
from .shadow import Shadow

_RELEASE_EVERY = 4095
"""Resume gives the journal pages it has served back every 4,096 steps (a mask on the position)."""
_loads = orjson.loads


class Phase(enum.Enum):
    """What :meth:`Server.serve` does with a call."""

    IN_ORDER = "serving in order"
    """The recorded step at the next position answers the call (another name there is a divergence unless steps
    overlap in this process); a miss builds the table and serves by identity."""
    BY_IDENTITY = "serving by identity"
    """The table of every committed, not yet served step by ``(name, k)`` answers the call."""
    LIVE = "live"
    """Nothing is left to serve: every call runs."""
    REPLAY = "replay"
    """A replay session checks each served step and runs the live ones; nothing is written."""
    CLOSED = "closed"
    """The run is closed: a call runs and its record is refused by the closed journal."""


_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IN_ORDER: frozenset({Phase.BY_IDENTITY, Phase.LIVE, Phase.CLOSED}),
    Phase.BY_IDENTITY: frozenset({Phase.LIVE, Phase.CLOSED}),
    Phase.LIVE: frozenset({Phase.CLOSED}),
    Phase.REPLAY: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}

_LIVE, _CLOSED = Phase.LIVE, Phase.CLOSED  # serve's first test, without two lookups of the class
LIVE: Any = object()
"""What :meth:`Server.serve` returns for a call that runs live (and is recorded)."""


AGAIN: Any = object()
"""What :meth:`Server.serve` returns when the call is to be numbered again, at :attr:`Server.skip_to` (the children
of the parent served before it were not visited)."""


class ReplayLive:
    """What :meth:`Server.serve` returns in a replay for a step that runs live: its recorded step (``{}``: none)."""

    __slots__ = ("rec",)

    def __init__(self, rec: Record) -> None:
        self.rec = rec


def _dontneed(m: mmap.mmap, length: int) -> None:
    """Drop the first ``length`` bytes (-1: all) of a read-only file map from this process's memory (not from the file)."""
    try:
        m.madvise(mmap.MADV_DONTNEED, 0, len(m) if length < 0 else length)
    except (OSError, ValueError):
        pass  # closed, or not supported here: the pages stay mapped, nothing else changes


class Server:
    """The recorded steps of a resume (``steps``, in commit order) and which of them are served yet."""

    def __init__(
        self, run_dir: Path, fold: Fold, shadow: Shadow, session: ReplaySession | None, on_changed: str,
        note: Callable[..., None],
    ) -> None:
        self.run_dir = run_dir
        self.fold = fold
        self.shadow = shadow
        self.session = session
        self.on_changed = on_changed
        self.note = note
        self.steps: list[Any] = fold.history.steps  # Record or LazyRecord: lazy ones are parsed when served
        self.next = 0  # the next recorded step to serve in order
        self.overlap = False  # two steps of this process have overlapped (or a thread called one): see _in_order
        self.table: dict[tuple[Any, ...], tuple[int, Record]] | None = None
        """Steps by identity: ``(name, k)``, then the parent's identity for a nested step."""
        self._table_at: dict[int, Record] = {}
        self._parent_at: dict[int, Any] = {}  # the parent identity of the committed step at a position (None: top level)
        self._table_calls: set[tuple[Any, ...]] = set()
        self._kids: dict[tuple[Any, ...], tuple[int, list[tuple[Any, ...]]]] = {}
        self.skip_to = 0
        """After a served parent: the position after its last child's (the next call's, as when it ran)."""
        self._hints: dict[Any, Any] = {}
        self._released: tuple[mmap.mmap | None, int] = (None, 0)  # the map and bytes of it given back
        self.replayed = StepNames()
        self.phase = Phase.REPLAY if session is not None else Phase.IN_ORDER
        self.rerun: list[str] | None = None
        """A fork's ``rerun`` globs (``fork --live``): its steps copied from the origin whose names match run live."""

    def _reruns(self, rec: Record) -> bool:
        """Whether ``rec`` is a step the fork copied from its origin (``origin_seq``) that ``rerun`` runs again."""
        return self.rerun is not None and "origin_seq" in rec and any(
            fnmatch.fnmatchcase(step_name(rec), p) for p in self.rerun)

    def to(self, phase: Phase) -> None:
        """Move to ``phase``: only along :data:`_TRANSITIONS` (a wrong move is a bug of the SDK)."""
        if phase not in _TRANSITIONS[self.phase]:
            raise AssertionError(f"the SDK cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    def to_closed(self) -> bool:
        """Close: every later call runs and its record is refused. ``False`` if the run was closed already."""
        if self.phase is Phase.CLOSED:
            return False
        self.to(Phase.CLOSED)
        return True

    @property
    def left(self) -> bool:
        """Whether recorded steps remain to be served."""
        t = self.table
        return bool(t) if t is not None else self.next < len(self.steps)

    # ------------------------------------------------------------------ the one serve path
    def serve(
        self, pos: int, k: int, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        opts: _Opts, parent: tuple[Any, ...] | None = None,
    ) -> Any:
        """The recorded output that answers the call ``(name, k)`` at ``pos`` (in the step of identity ``parent``:
        a nested step); :data:`LIVE` if it runs, or a :class:`ReplayLive` in a replay's live step. Called with the
        run's lock held.

        Serving in order: while the journal and the calls agree position by position (a sequential agent), the
        next recorded step (in commit order) answers the call. Recorded at another position, or under another
        name while steps overlap (a live step in flight, or a call from another thread than the one that opened
        the run), the table of steps by identity decides; another name at a recorded position is otherwise a
        divergence. Nested steps are served by identity (children commit before their parent: not in call
        order). A million served steps go through here: the in-order lookup is inline (a frame less a step).
        """
        phase = self.phase
        if phase is _LIVE or phase is _CLOSED:
            return LIVE
        s = self.session
        rec: Record | None = None
        taken: Any = None  # the entry served in order: only the state cursor may move past it
        i = self.next
        if self.table is None and i < len(self.steps) and parent is None:
            e = self.steps[i]
            if type(e) is LazyRecord:
                try:
                    rec = _loads(e.src[e.start : e.end])
                except orjson.JSONDecodeError:  # a step line loaded unparsed (lazily) that does not parse: damaged
                    self._stop_at(e)
                rpos = rec.get("pos")
                if type(rpos) is not int:
                    rpos = e.pos
                if rec.get("seq") != e.seq or "ts" not in rec:
                    normalize(rec, e.seq)  # (a minimal journal's output may be under another name)
                rec["pos"] = e.pos
            else:
                rec = cast(Record, e)
                damaged = self.fold.damaged
                if damaged and rec["seq"] >= damaged[0]["seq"]:
                    self.shadow.replay_to(rec["seq"])  # stops at a damaged line, before any step after it is served
                rpos = int(rec.get("pos", i))  # a parsed line: the fold's position
            if "parent" in rec:
                if rpos == pos:  # the children of the step served before (positions in call order): skipped
                    return self._skip_children(i)
                rec = None
            elif rpos != pos:
                rec = None
            elif rec.get("step") != name and step_name(rec) != name:
                if not self.overlap:
                    raise self._divergence(s, pos, rec, name)  # the sequential rule: another name at a recorded position
                rec = None
            elif self.rerun is not None and self._reruns(rec):
                rec = None  # a fork's step to run again (the table leaves it out)
            else:  # taken
                taken = e
                self.next = i + 1
                if not i & _RELEASE_EVERY:
                    self._release_served(i)
            if rec is None:  # not the call of the next recorded step: the table decides
                self._build_table()
                rec = self._by_identity(pos, k, name, s, parent)
        elif self.table is None and i < len(self.steps):  # a nested call
            self._build_table()
            rec = self._by_identity(pos, k, name, s, parent)
        elif self.table:
            rec = self._by_identity(pos, k, name, s, parent)
        if s is not None:
            return self._replay(s, pos, name, rec, fn, args, kwargs, opts, taken)
        if rec is not None and (
            (args and not kwargs and rec.get("inputs") == {"args": [*args]})  # the common call, as recorded
            or self._same_inputs(pos, rec, name, args, kwargs)
        ):
            return self._served(rec, name, fn, opts, taken)
        if not self.shadow.live:
            self.go_live()
        if not self.left:
            self.to(Phase.LIVE)  # the next calls skip the lookups
        return LIVE

    def _skip_children(self, i: int) -> Any:
        """The recorded steps from ``i`` on are the children of the step served in order before (never visited):
        serving in order goes on after them; :data:`AGAIN`: the call takes the position after theirs."""
        steps, last = self.steps, -1
        while i < len(steps):
            e = steps[i]
            if type(e) is LazyRecord:
                if not e.nested():
                    break
                last = max(last, e.pos)
            elif "parent" in e:
                last = max(last, int(e.get("pos", last)))
            else:
                break
            i += 1
        self.next = i
        self.skip_to = max(self.skip_to, last + 1)
        return AGAIN

    def _stop_at(self, e: LazyRecord) -> NoReturn:
        """The lazily loaded step line ``e`` does not parse: the first damaged line (the lines before it were
        served); the state stops there, before any step after it is served."""
        bad = e.damaged().record()
        bad["pos"] = e.pos
        self.fold.damaged.insert(0, bad)
        self.shadow.replay_to(bad["seq"])
        raise AssertionError("unreachable: replay_to stops at a damaged line")

    def _by_identity(self, pos: int, k: int, name: str, s: ReplaySession | None, parent: tuple[Any, ...] | None) -> Record | None:
        """The committed step of the call ``(name, k)`` (in ``parent``) from the table, taken; ``None``: it runs.
        A served parent's children are dropped (never visited), the next position after its last child's.

        Not committed, it is a divergence when the sequential rule applies: one thread, nothing in flight but
        its parents, the journal has another step committed at this position and never saw this call at all.
        """
        assert self.table is not None
        ident = (name, k) if parent is None else (name, k, parent)
        hit = self.table.pop(ident, None)
        if hit is not None:
            self._table_at.pop(hit[0], None)
            kids = self._kids.pop(ident, None)
            if kids is not None:
                self.skip_to = max(self.skip_to, kids[0] + 1)
                for kid in kids[1]:
                    gone = self.table.pop(kid, None)
                    if gone is not None and self._table_at.get(gone[0]) is gone[1]:
                        del self._table_at[gone[0]]
            return hit[1]
        other = self._table_at.get(pos)
        # only a step of the same parent at the position is another call in its place: positions of concurrent
        # parents' children interleave, so another parent's child there says nothing of this call
        if other is not None and not self.overlap and ident not in self._table_calls and \
                self._parent_at.get(pos) == parent:
            raise self._divergence(s, pos, other, name if parent is None else _path(ident))
        return None

    def _divergence(self, s: ReplaySession | None, pos: int, rec: Record, name: str) -> DivergenceError:
        if not isinstance(rec.get("step"), str):
            return self._bad_name(pos, rec)  # the record is wrong, not the agent's code
        return s.step_mismatch(pos, rec, name) if s is not None else DivergenceError(pos, step_name(rec), name)

    def _bad_name(self, pos: int, rec: Record) -> BadStepRecordError:
        """A recorded step whose name is not a string (a hand-written line): what is wrong, with its file and line."""
        seq = rec.get("seq")
        place = JournalReader(self.run_dir).place(seq) if type(seq) is int else None
        where = f"{place[0]}:{place[1]}" if place else str(self.run_dir / rundir.JOURNAL)
        recorded = rec.get("step")
        if recorded is None:
            what = 'has no step name ("step")'
        else:
            what = f"has the step name {orjson.dumps(recorded, default=repr).decode()[:60]} ({_json_type(recorded)}), not a string"
        return BadStepRecordError(
            f"cannot resume: the step record at {where} (seq {seq}, step position {pos}) {what}: a step name must "
            f'be a string; fix that line (e.g. "step": "{step_name(rec) or "name"}", the name the agent gives the step) '
            "and run again",
            position=pos, recorded=recorded,
        )

    def _same_inputs(self, pos: int, rec: Record, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether to serve ``rec``: its inputs are the call's, or they changed and ``on_changed_inputs`` says serve."""
        recorded = rec.get("inputs")
        cur = canonical_inputs(args, kwargs)
        if recorded == cur:  # without hashing
            return True
        expected = rec.get("inputs_hash")
        if not isinstance(expected, str):
            if recorded is None:
                return True  # a minimal journal: nothing to compare with
            expected = inputs_hash(recorded)
        actual = inputs_hash(cur)
        if actual == expected:
            return True  # equal as JSON (a tuple and a list, a redacted secret)
        mode = self.on_changed
        detail = f"the inputs of step {name!r} at position {pos} changed since it was recorded (inputs hash {expected} -> {actual})"
        if mode == "error":
            raise DivergenceError(pos, name, name, detail)
        self.note("changed inputs", step=name, pos=pos, served_seq=rec.get("seq"), recorded_hash=expected, inputs_hash=actual,
                  action="served" if mode == "warn" else "rerun")
        what = "served its recorded output" if mode == "warn" else "running it again"
        print(f"agent-supervisor: {detail}: {what} (Run.open(on_changed_inputs=...): warn, error, rerun)", file=sys.stderr)
        return mode == "warn"

    def _served(self, rec: Record, name: str, fn: Callable[..., Any], opts: _Opts, taken: Any) -> Any:
        """A served step's output (decoded by its type, or the function's return annotation) and the state after it
        (``taken``: its entry, if it was served in order)."""
        names = self.replayed
        names._count += 1  # StepNames.append without its frame: a million served steps come here
        names._last.append(name)
        sh = self.shadow
        seq = rec["seq"]
        cursor = sh.cursor
        # A step without a patch, the next record of the cursor: only the cursor moves (most served steps)
        if taken is None or sh.live or seq <= cursor.seq or self.fold.damaged or "state_patch" in rec or not (
            cursor.step_over(taken, seq)
        ):
            sh.follow(rec)
        else:
            sh.json = None
        out = rec.get("output")
        otype = rec.get("output_type")
        hint = opts.returns
        if hint is None:
            ann = getattr(fn, "__annotations__", None)
            if (ann and "return" in ann) or isinstance(fn, functools.partial):  # cheaply: most functions have none
                hint = self._hint(fn)
        if otype is not None or hint is not None:
            out = codec().decode(out, otype, hint)
        return out

    def _replay(
        self, s: ReplaySession, pos: int, name: str, rec: Record | None, fn: Callable[..., Any],
        args: tuple[Any, ...], kwargs: dict[str, Any], opts: _Opts, taken: Any,
    ) -> Any:
        """``replay --verify`` / ``--live``: serve the step (checking its inputs), or run it live to compare."""
        if s.mode.is_live(name):
            return ReplayLive(rec if rec is not None else {})
        if rec is None:
            raise s.missing(pos, name)
        s.check_inputs(pos, rec, canonical_inputs(args, kwargs))
        s.replayed += 1
        return self._served(rec, name, fn, opts, taken)

    def _hint(self, fn: Callable[..., Any]) -> Any:
        """``fn``'s return annotation (through the codec), cached."""
        hints = self._hints
        try:
            return hints[fn]
        except (KeyError, TypeError):
            pass  # not cached yet, or not hashable
        h = codec().output_hint(fn)
        try:
            if len(hints) < 1024:
                hints[fn] = h
        except TypeError:
            pass  # not hashable: asked again next time
        return h

    # ------------------------------------------------------------------ leaving the resume
    def go_live(self) -> None:
        """The replay->live boundary: bring the state to the journal's end, then let go of the resume view.

        From here on the fold only counts (checkpoints and rollbacks stay, for the failure policy) and the
        cursor keeps no records. Recorded steps not served yet (steps that overlapped) stay served by
        ``(name, k)`` from the table.
        """
        self.shadow.to_end()
        self.shadow.go_live()
        if self.session is not None:
            return  # a replay's session reads the recorded steps to its end
        if self.table is None and self.next < len(self.steps):
            self._build_table()
        self.fold.stop_keeping()
        self.steps = []
        self.next = 0
        self._released = (None, 0)  # nor the journal's map: unmapped once nothing holds it

    def unserved(self) -> tuple[int, str]:
        """How many recorded steps are not served (nor run) yet, and the name of the first in call order."""
        t = self.table
        if t is not None:
            first = min(t.values(), key=lambda v: v[0], default=None)
            return len(t), step_name(first[1]) if first else ""
        n = len(self.steps) - self.next
        if n <= 0:
            return 0, ""
        e = self.steps[self.next]
        try:
            return n, step_name(e.record() if isinstance(e, LazyRecord) else e)
        except JournalError:  # a damaged line: its name is not known
            return n, ""

    def _release_served(self, i: int) -> None:
        """Give the pages of the journal map served so far back to the kernel.

        Resume reads step lines through a read-only map of the journal; each page a
        replayed step touched would stay in the process's RSS to the end of the
        replay (a 3 GB journal: 3 GB, enough to trip ``--max-rss``). The pages are
        the file's, so dropping them loses nothing: a later read faults them in again.
        """
        rec: object = self.steps[i]  # a LazyRecord in place of a dict (see JournalReader.iter_entries)
        if type(rec) is not LazyRecord or not isinstance(rec.src, mmap.mmap):
            return
        old, upto = self._released
        if old is not None and old is not rec.src:
            _dontneed(old, -1)  # the replay has moved on to the next segment: all of it
            upto = 0
        end = rec.start - rec.start % mmap.PAGESIZE
        if end > upto:
            _dontneed(rec.src, end)
        self._released = (rec.src, max(end, upto))

    # ------------------------------------------------------------------ the table of steps by identity
    def _build_table(self) -> None:
        """Index every committed, not yet served step of the effective history by ``(name, k)``.

        ``k`` counts the earlier calls of that name in position order; a position's call is the last
        ``begin`` or ``step`` recorded at it (a failed call that gave its position back is not one).
        Read from the files: the resume view keeps neither ``begin`` lines nor the recorded positions.
        """
        served = {int(self.steps[j].get("seq", -1)) for j in range(self.next)}
        entries = JournalReader(self.run_dir).load()
        f = Fold()
        f.extend(entries)
        final, committed, by_id = _calls(f, *_positions(entries))
        counts: dict[str, int] = {}
        table: dict[tuple[Any, ...], tuple[int, Record]] = {}
        at: dict[int, Record] = {}
        calls: set[tuple[Any, ...]] = set()
        for p in sorted(final):  # journals of older SDKs: k from the positions
            n = final[p]
            k = counts.get(n, 0)
            counts[n] = k + 1
            calls.add((n, k))
            c = committed.get(p)
            if c is not None and step_name(c) == n and c["seq"] not in served and not self._reruns(c):
                table[(n, k)] = (p, c)
                at[p] = c
        parent_at: dict[int, Any] = {}
        kids: dict[tuple[Any, ...], tuple[int, list[tuple[Any, ...]]]] = {}
        for ident, (p, r) in by_id.items():
            calls.add(ident)
            if r is not None and r["seq"] not in served and not self._reruns(r):
                table[ident] = (p, r)
                at[p] = r
                parent_at[p] = ident[2] if len(ident) == 3 else None
            up = ident
            while len(up) == 3:  # a nested call: its position and identity under each of its ancestors
                up = up[2]
                last, under = kids.get(up, (-1, []))
                under.append(ident)
                kids[up] = (max(last, p), under)
        self.table, self._table_at, self._table_calls, self._kids = table, at, calls, kids
        self._parent_at = parent_at
        if self.phase is Phase.IN_ORDER:
            self.to(Phase.BY_IDENTITY)


def _path(ident: tuple[Any, ...]) -> str:
    """A nested call's path for a message: the names of its enclosing steps, then its own (``outer > inner``)."""
    names = [ident[0]]
    while len(ident) == 3:
        ident = ident[2]
        names.append(ident[0])
    return " > ".join(reversed(names))


def _json_type(v: Any) -> str:
    """What kind of JSON value ``v`` is, for a message."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    return "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) else type(v).__name__


def _positions(entries: list[Any]) -> tuple[dict[int, Any], set[Any]]:
    """The recorded position of every ``begin`` and ``step`` line by seq, and the attempts whose records carry
    their ``k`` (their ``start`` record says so)."""
    rpos: dict[int, Any] = {}
    numbered: set[Any] = set()
    for e in entries:
        if type(e) is dict:
            kind = e.get("kind", wire.STEP)
            if kind == wire.BEGIN or kind == wire.STEP:
                rpos[e["seq"]] = e.get("pos")
            elif kind == wire.START and e.get("numbering") == "name-k":
                numbered.add(e.get("attempt"))
    return rpos, numbered


def _calls(
    f: Fold, rpos: dict[int, Any], numbered: set[Any]
) -> tuple[dict[int, str], dict[int, Record], dict[tuple[Any, ...], tuple[int, Record | None]]]:
    """Along the effective history: the last call's name at each position and its committed step (attempts
    without ``k``), and each numbered call's committed step by ``(step, k)``, then its parent's identity for
    a nested call (``None``: not committed). A nested call whose parent's ``begin`` is not on the effective
    history (abandoned by a rollback, or another attempt's) is no call of it."""
    final: dict[int, str] = {}
    committed: dict[int, Record] = {}
    by_id: dict[tuple[Any, ...], tuple[int, Record | None]] = {}
    begins: dict[Any, tuple[Any, ...]] = {}  # a numbered begin's id -> its call's identity
    for r in f.history.effective:
        kind = r.get("kind", wire.STEP)
        if (kind != wire.BEGIN and kind != wire.STEP) or r.get("was"):
            continue
        p = rpos.get(r["seq"])
        p = p if type(p) is int else r["pos"]
        if r.get("attempt") in numbered:
            # the call's identity is in the record: positions of another attempt (threads number their
            # calls in another order each time) never shadow it
            ident: tuple[Any, ...] = (step_name(r), int(r.get("k") or 0))
            if "parent" in r:
                up = begins.get(r["parent"])
                if up is None:
                    continue
                ident = (*ident, up)
            if kind == wire.BEGIN and "id" in r:
                begins[r["id"]] = ident
            old = by_id.get(ident)
            ok = kind == wire.STEP and r.get("error") is None
            by_id[ident] = (p, r if ok else (old[1] if old and kind == wire.BEGIN else None))
            continue
        final[p] = step_name(r)
        if kind == wire.STEP:
            if r.get("error") is None:
                committed[p] = r
            else:
                committed.pop(p, None)
    return final, committed, by_id
