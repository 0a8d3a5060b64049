"""``break``, ``continue`` and ``answer``: breakpoints and a person's answers (``core.pauses``).

They work on the run directory's files, with or without a supervisor: ``break`` edits ``breakpoints.json``;
``continue`` and ``answer`` write the answer to a pause and wait (``--timeout``) until the agent journals it
as a ``choice``; with no agent running the answer waits in the run directory for the next attempt.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from ..core import pauses
from ..core.journal_reader import JournalReader
from ..core.records import Record
from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError

WAIT_S = 30.0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``break``, ``continue`` and ``answer``."""
    p = sub.add_parser("break", help="set, list or clear breakpoints (steps that pause before they run)", description=(
        "A live step whose name matches PATTERN (an fnmatch glob, e.g. 'tool:bash*', 'llm:*') pauses before its "
        "function runs, until 'continue' answers it. 'interrupted' pauses a step whose previous attempt was cut off "
        "by a crash. Breakpoints live in the run directory: they hold across restarts, with or without a supervisor."))
    p.add_argument("run_dir", type=Path, metavar="RUN")
    p.add_argument("pattern", nargs="?", metavar="PATTERN")
    p.add_argument("--list", action="store_true", help="list the breakpoints and the paused steps")
    p.add_argument("--clear", action="store_true", help="remove PATTERN (without it: every breakpoint)")
    p.set_defaults(func=cmd_break)

    c = sub.add_parser("continue", help="answer a paused step: run it, step, skip it, edit its inputs or abort",
                       description="Answer the paused step (the only one, or --seq/--step): each choice is journaled.")
    c.add_argument("run_dir", type=Path, metavar="RUN")
    how = c.add_mutually_exclusive_group()
    how.add_argument("--step", dest="step_mode", action="store_true", help="run it, then pause before the next live step")
    how.add_argument("--all", action="store_true", help="clear every breakpoint and run on")
    how.add_argument("--inputs", metavar="JSON", help='run it with these inputs: {"args": [...], "kwargs": {...}}')
    how.add_argument("--output", metavar="JSON", help="skip it: record it as done with this output (its function never runs)")
    how.add_argument("--abort", action="store_true", help="stop the run here (nothing is lost: it resumes when started again)")
    _which(c)
    c.set_defaults(func=cmd_continue)

    a = sub.add_parser("answer", help="answer a question the agent asked (run.ask)",
                       description="Answer the open run.ask question (the only one, or --seq/--step).")
    a.add_argument("run_dir", type=Path, metavar="RUN")
    a.add_argument("value", metavar="VALUE", help="the answer: a string, or JSON with --json")
    a.add_argument("--json", action="store_true", help="VALUE is JSON (a number, a list, an object...)")
    _which(a)
    a.set_defaults(func=cmd_answer)


def _which(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seq", type=int, metavar="N", help="the pause to answer, by its seq (when several are open)")
    p.add_argument("--name", dest="name", metavar="STEP", help="the pause to answer, by its step's name")
    p.add_argument("--timeout", type=float, default=WAIT_S, help=f"seconds to wait for the agent to take it (default {WAIT_S:g})")
    p.add_argument("--no-wait", action="store_true", help="write the answer and return")


# ---------------------------------------------------------------------------------- break
def cmd_break(args: argparse.Namespace) -> int:
    run_dir = check_readable_run_dir(args.run_dir)
    if args.list or (args.pattern is None and not args.clear):
        doc = pauses.read_breakpoints(run_dir)
        for p in doc["patterns"]:
            print(p)
        if doc["next"]:
            print("(pause before the next live step)")
        for r in open_pauses(run_dir):
            print(pauses.pause_text(r))
        return 0
    if args.clear:
        doc = pauses.change_breakpoints(run_dir, remove=None if args.pattern is None else [args.pattern],
                                        next_step=False if args.pattern is None else None)
        print(f"breakpoints: {', '.join(doc['patterns']) or 'none'}")
        return 0
    doc = pauses.change_breakpoints(run_dir, add=[args.pattern])
    print(f"breakpoints: {', '.join(doc['patterns'])}")
    return 0


# ---------------------------------------------------------------------------------- continue and answer
def open_pauses(run_dir: Path) -> list[Record]:
    """The run's pauses no choice answered yet (read from its journal)."""
    from ..core.llm_calls import read_calls

    journal = [e for e in JournalReader(run_dir).iter_entries(lazy=True)
               if type(e) is dict and pauses.is_pause_kind(e.get("kind"))]
    held = [c for c in read_calls(run_dir) if pauses.is_pause_kind(c.get("kind"))]  # model calls the proxy holds
    return pauses.open_pauses(journal) + pauses.open_pauses(held)


def _pick(run_dir: Path, args: argparse.Namespace, *, ask: bool) -> Record:
    """The open pause the command answers: named by --seq or --name, else the only one of its kind."""
    found = [p for p in open_pauses(run_dir) if (p.get("reason") == "ask") is ask]
    what = "question" if ask else "paused step"
    if args.seq is not None:
        found = [p for p in found if p.get("seq") == args.seq]
    if args.name is not None:
        found = [p for p in found if p.get("step") == args.name]
    if not found:
        raise SupervisorError(f"{run_dir}: no open {what}" + (" matches" if args.seq is not None or args.name else "")
                              + ("; see agent-supervisor break " + str(run_dir) + " --list"))
    if len(found) > 1:
        listing = "; ".join(f"seq {p.get('seq')}: {p.get('step')!r}" for p in found)
        raise SupervisorError(f"{run_dir}: {len(found)} open {what}s ({listing}): say which with --seq N")
    return found[0]


def cmd_continue(args: argparse.Namespace) -> int:
    run_dir = check_readable_run_dir(args.run_dir)
    answer: dict[str, Any] = {"choice": "continue", "by": "cli"}
    if args.step_mode:
        answer["choice"] = "step"
    elif args.all:
        answer["choice"] = "all"
    elif args.abort:
        answer["choice"] = "abort"
    elif args.inputs is not None:
        answer.update(choice="inputs", inputs=_json(args.inputs, "--inputs"))
    elif args.output is not None:
        answer.update(choice="output", output=_json(args.output, "--output"))
    pause = _pick(run_dir, args, ask=False)
    if "inputs" in answer:
        pauses.check_inputs(answer["inputs"], pause)
    return _give(run_dir, pause, answer, args)


def cmd_answer(args: argparse.Namespace) -> int:
    run_dir = check_readable_run_dir(args.run_dir)
    value: Any = _json(args.value, "VALUE") if args.json else args.value
    pause = _pick(run_dir, args, ask=True)
    choices = pause.get("choices")
    if isinstance(choices, list) and value not in choices:
        shown = ", ".join(orjson.dumps(c).decode() for c in choices)
        raise SupervisorError(f"{value!r} is not one of the choices ({shown})"
                              + ("; give a number or list as JSON with --json" if not args.json else ""))
    return _give(run_dir, pause, {"choice": "answer", "answer": value, "by": "cli"}, args)


def _json(text: str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise SupervisorError(f"{what} is not JSON ({e}): e.g. --output '{{\"ok\": true}}' or --output '\"text\"'") from None


def _give(run_dir: Path, pause: Record, answer: dict[str, Any], args: argparse.Namespace) -> int:
    seq, source = int(pause["seq"]), pause.get("source")
    pauses.write_answer(run_dir, seq, answer, source)
    what = f"{answer['choice']}" + (f" {orjson.dumps(answer['answer']).decode()}" if "answer" in answer else "")
    if args.no_wait:
        print(f"answered pause seq {seq} (step {pause.get('step')!r}): {what}")
        return 0
    end = time.monotonic() + args.timeout
    while time.monotonic() < end:
        if not pauses.answer_path(run_dir, seq, source).exists():  # the agent took it (and journaled the choice)
            print(f"answered pause seq {seq} (step {pause.get('step')!r}): {what}; the agent took it")
            return 0
        time.sleep(0.05)
    print(f"answered pause seq {seq} (step {pause.get('step')!r}): {what}; no agent took it within {args.timeout:g} s: "
          "the answer waits in the run directory for the next attempt", file=sys.stderr)
    return 0
