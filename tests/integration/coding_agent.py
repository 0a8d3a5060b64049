"""A coding-style agent for the workspace tests (run as a real process, usually under ``supervise``).

    python coding_agent.py --run-dir RUN --workspace WS --probe DIR [--fail-test N] [--bulk N] [--resume]

It works in ``run.workspace`` only (a fork's agent is given the fork's): it writes a plan, scaffolds a source
file, an executable script, a symlink and a scratch file, edits the source twice (appending to a ledger each
time, deleting the scratch file), then runs its tests with ``bin/run.sh`` as a tool, writes a result, and
tidies up: 6 checkpoints (``planned``, ``scaffolded``, ``edit-1``, ``edit-2``, ``tested``, ``done``).

``--fail-test N``: the test step's default strategy fails N times in all (counted in ``DIR/fails.log``),
leaving a half-made edit, a junk file and a ledger line behind each time, as a real failed step would; after
the SDK's rollback (``run.rollbacks``) the agent takes another strategy, which ends as a clean run does.
``--bulk N``: N more small files (``bulk/``) and a checkpoint ``bulk`` after ``edit-2``; the agent writes
``DIR/bulk-marker-<attempt>`` just before that checkpoint (the kill tests wait for it).

What it saw goes to ``DIR`` (outside the workspace): ``start-<attempt>.json`` (the workspace right after
``Run.open``: a finished rollback's restore included), ``cp-<name>.json`` (right after a live checkpoint),
``fail-<n>.json`` (right before a failure), ``result.json``, ``pid-<attempt>``, ``executions.log``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root``, as the tests compare them: a file's executable bit and SHA-256, a link's text
    (never followed), an empty directory."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        names = list(filenames)
        for n in list(dirnames):
            if (d / n).is_symlink():
                names.append(n)
                dirnames.remove(n)
        rel_dir = d.relative_to(root).as_posix()
        if not names and not dirnames and d != root:
            out[rel_dir] = "d"
        for n in names:
            p = d / n
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = f"l:{os.readlink(p)}"
            else:
                x = "x" if os.stat(p).st_mode & 0o100 else "-"
                out[rel] = f"f:{x}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
    return dict(sorted(out.items()))


def dump(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, path)


def append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


APP = {
    1: "def add(a, b):\n    return a - b  # TODO\n",
    2: "def add(a, b):\n    return a + b\n",
    3: "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
}
RUN_SH = "#!/bin/sh\n# the project's test runner\necho \"tests passed: $(grep -c '^def ' \"$(dirname \"$0\")/../src/app.py\")\"\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--workspace", type=Path)
    ap.add_argument("--probe", type=Path, required=True)
    ap.add_argument("--fail-test", type=int, default=0)
    ap.add_argument("--bulk", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    from supervisor import Run

    probe: Path = args.probe
    probe.mkdir(parents=True, exist_ok=True)
    with Run.open(args.run_dir, workspace=args.workspace, max_failures=3) as run:
        ws = run.workspace
        assert ws is not None, "the coding agent needs a workspace"
        (probe / f"pid-{run.attempt}").write_text(str(os.getpid()))
        dump(probe / f"start-{run.attempt}.json", {"tree": tree(ws), "rollbacks": len(run.rollbacks), "ws": str(ws)})

        def step(name: str, fn: Any, *a: Any) -> Any:
            def body(*b: Any) -> Any:
                append(probe / "executions.log", name)
                return fn(*b)

            return run.step(name, body, *a)

        def checkpoint(name: str) -> None:
            had = len(run.history.checkpoints)
            run.checkpoint(name)
            if len(run.history.checkpoints) > had:  # taken now, not served from the journal
                dump(probe / f"cp-{name}.json", tree(ws))

        def plan() -> list[str]:
            (ws / "PLAN.md").write_text("# Plan\n\n1. scaffold\n2. fix add\n3. add mul\n4. test\n")
            return ["scaffold", "edit:1", "edit:2", "test"]

        def scaffold() -> str:
            (ws / "src").mkdir(exist_ok=True)
            (ws / "bin").mkdir(exist_ok=True)
            (ws / "tmp").mkdir(exist_ok=True)
            (ws / "src" / "app.py").write_text(APP[1])
            (ws / "bin" / "run.sh").write_text(RUN_SH)
            os.chmod(ws / "bin" / "run.sh", 0o755)
            if not (ws / "latest").is_symlink():
                os.symlink("src/app.py", ws / "latest")
            (ws / "tmp" / "scratch.txt").write_text("notes while scaffolding\n")
            return "scaffolded"

        def edit(i: int) -> str:
            (ws / "src" / "app.py").write_text(APP[i + 1])
            append(ws / "ledger.txt", f"edit {i}")
            if i == 2:
                (ws / "tmp" / "scratch.txt").unlink()
                (ws / "tmp").rmdir()
            return hashlib.sha256(APP[i + 1].encode()).hexdigest()

        def bulk(n: int) -> int:
            (ws / "bulk").mkdir(exist_ok=True)
            for i in range(n):
                (ws / "bulk" / f"f{i:05d}.txt").write_text(f"bulk file {i}\n" * 4)
            return n

        def test(strategy: str) -> str:
            fails = probe / "fails.log"
            done = len(fails.read_text().splitlines()) if fails.exists() else 0
            if strategy == "default" and done < args.fail_test:
                # a failed attempt leaves its mess behind, as a real one would
                (ws / "src" / "app.py").write_text(APP[3] + "\n\ndef div(a, b):\n    return a /\n")
                (ws / "broken.txt").write_text(f"half-made change {done + 1}\n")
                append(ws / "ledger.txt", f"test attempt {done + 1}")
                append(fails, "fail")
                dump(probe / f"fail-{done + 1}.json", tree(ws))
                raise RuntimeError(f"the flaky test runner crashed ({done + 1})")
            # the stable strategy and the default one end the same: the tool's output is the result
            out = subprocess.run([str(ws / "bin" / "run.sh")], capture_output=True, text=True, check=True).stdout
            (ws / "test-report.txt").write_text(out)
            append(ws / "ledger.txt", "tested")
            return out.strip()

        def finish(report: str) -> dict[str, Any]:
            result = {"report": report, "app": hashlib.sha256((ws / "src" / "app.py").read_bytes()).hexdigest()}
            (ws / "result.json").write_text(json.dumps(result, sort_keys=True) + "\n")
            (ws / "PLAN.md").write_text("# Plan\n\nall done\n")
            (ws / "empty").mkdir(exist_ok=True)
            return result

        outputs: dict[str, Any] = {"plan": step("plan", plan)}
        checkpoint("planned")
        outputs["scaffold"] = step("scaffold", scaffold)
        checkpoint("scaffolded")
        outputs["edit:1"] = step("edit:1", edit, 1)
        checkpoint("edit-1")
        outputs["edit:2"] = step("edit:2", edit, 2)
        checkpoint("edit-2")
        if args.bulk:
            outputs["bulk"] = step("bulk", bulk, args.bulk)
            (probe / f"bulk-marker-{run.attempt}").write_text("checkpoint next")
            checkpoint("bulk")
        strategy = "stable-runner" if run.rollbacks else "default"
        outputs["test"] = step("test", test, strategy)
        checkpoint("tested")
        outputs["finish"] = step("finish", finish, outputs["test"])
        checkpoint("done")
        dump(probe / "result.json", outputs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
