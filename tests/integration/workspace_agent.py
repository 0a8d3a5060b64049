"""Agents that work in a workspace, for the supervisor's workspace tests (run as real processes).

Every mode first writes ``seen-<attempt>.json`` into the run directory: the workspace's files and contents as
the agent finds them before any of its code (and the SDK) ran, and its environment's workspace variable.

    steps      SDK steps: write:a (a.txt, plus ignored node_modules/x and scratch.tmp), checkpoint cp1, a file
               written between steps (between.txt), delete:a, write:b (b.txt); exit 0
    concurrent two SDK steps in threads, both in flight while each writes its file (left.txt, right.txt)
    wait       write:a, checkpoint cp1, write:b, then ready.txt in the run directory and sleep (a later attempt
               exits 0 at once)
    plain      no SDK: journal lines written by hand; step s1 writes p.txt, a checkpoint record, then (once the
               supervisor's snapshot of it is indexed) p.txt changed by step s2; exit 0
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

RUN_DIR = Path(os.environ.get("AGENT_SUPERVISOR_RUN_DIR", "."))
ATTEMPT = int(os.environ.get("AGENT_SUPERVISOR_ATTEMPT", "1"))
WS = Path(os.environ.get("AGENT_SUPERVISOR_WORKSPACE", "."))
PAUSE = 0.06
"""Between a step's edges and its writes: far more than the mtime's tick, so the times tell the steps apart."""


def seen() -> None:
    """What the workspace holds before any agent code: the proof a restore came first."""
    files: dict[str, str] = {}
    for p in sorted(WS.rglob("*")):
        rel = p.relative_to(WS).as_posix()
        if p.is_file() and not rel.startswith(("node_modules/", "run/")):
            files[rel] = p.read_text(errors="replace")
    out = {"workspace": os.environ.get("AGENT_SUPERVISOR_WORKSPACE"), "files": files}
    (RUN_DIR / f"seen-{ATTEMPT}.json").write_text(json.dumps(out))


def write(rel: str, text: str) -> None:
    path = WS / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def edit(fn: object, *args: object) -> object:
    """A step's body: a pause, the edit, a pause (the edit lies well inside the step's begin and end)."""
    time.sleep(PAUSE)
    out = fn(*args)  # type: ignore[operator]
    time.sleep(PAUSE)
    return out


def steps() -> int:
    from supervisor import Run

    with Run.open() as run:
        def write_a() -> str:
            write("a.txt", "alpha\n")
            write("node_modules/x/index.js", "ignored by default\n")
            write("scratch.tmp", "ignored by --workspace-ignore\n")
            return "a"

        run.step("write:a", edit, write_a)
        run.checkpoint("cp1")
        time.sleep(PAUSE)
        write("between.txt", "between steps\n")
        time.sleep(PAUSE)
        run.step("delete:a", edit, lambda: (WS / "a.txt").unlink() or "deleted")
        run.step("write:b", edit, lambda: write("b.txt", "bravo\n") or "b")
    return 0


def concurrent() -> int:
    from supervisor import Run

    both = threading.Barrier(2, timeout=20)

    def work(name: str) -> str:
        both.wait()  # both steps are in flight (their begin records written) before either writes
        time.sleep(PAUSE)
        write(f"{name}.txt", f"{name}\n")
        time.sleep(PAUSE)
        both.wait()  # and neither ends before both have written
        return name

    with Run.open() as run:
        threads = [threading.Thread(target=run.step, args=(f"edit:{n}", work, n)) for n in ("left", "right")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return 0


def wait() -> int:
    if ATTEMPT > 1:
        return 0
    from supervisor import Run

    with Run.open() as run:
        run.step("write:a", edit, lambda: write("a.txt", "alpha\n") or "a")
        run.checkpoint("cp1")
        run.step("write:b", edit, lambda: write("b.txt", "bravo\n") or "b")
        run.step("edit:a", edit, lambda: write("a.txt", "alpha, edited after cp1\n") or "a2")
        (RUN_DIR / "ready.txt").write_text("ready")
        while True:
            time.sleep(1)


def _line(journal: Path, rec: dict[str, object]) -> None:
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def plain() -> int:
    """An agent without the SDK: its checkpoint's snapshot can only be the supervisor's."""
    journal = RUN_DIR / "journal.jsonl"
    if journal.exists() and journal.read_bytes().count(b"\n") >= 3:
        return 0  # done on an earlier attempt
    write("p.txt", "plain one\n")
    _line(journal, {"seq": 0, "step": "s1", "output": 1})
    _line(journal, {"seq": 1, "kind": "checkpoint", "name": "cp"})
    index = RUN_DIR / "workspace" / "snapshots.jsonl"
    deadline = time.monotonic() + 20
    while b'"seq":1' not in (index.read_bytes().replace(b" ", b"") if index.exists() else b""):
        if time.monotonic() > deadline:
            print("plain: no snapshot of the checkpoint came", file=sys.stderr)
            return 1
        time.sleep(0.02)
    write("p.txt", "plain two\n")
    _line(journal, {"seq": 2, "step": "s2", "output": 2})
    return 0


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    seen()
    mode = sys.argv[1]
    modes = {"steps": steps, "concurrent": concurrent, "wait": wait, "plain": plain}
    return modes[mode]()


if __name__ == "__main__":
    raise SystemExit(main())
