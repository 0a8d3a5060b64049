"""Credential shapes in every place of a real supervised run: no value reaches any file, every name stays.

The agent (tests/integration/test_secrets_shapes_agent.py) writes each credential name in each key-value,
header and JSON-key form, with a value of its own per place, into a step's inputs, its output, a failed step's
error, ``run.state``, a checkpoint, a note, stdout and stderr; its command line holds them too, and its
environment has a variable per name whose value it writes bare. Then every file of the run directory is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core import rundir

from ..conftest import clean_env
from .supervisor_util import PY, Supervised
from .test_secrets_shapes_agent import ENV_NAMES, MARK, NAMES, PLACES, cases, keyed, texts, value

AGENT = Path(__file__).resolve().parent / "test_secrets_shapes_agent.py"
R = "[REDACTED]"


def strings(doc: Any) -> list[str]:
    """Every string of a JSON document, its keys too."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, list):
        return [s for x in doc for s in strings(x)]
    if isinstance(doc, dict):
        return [s for k, x in doc.items() for s in (k, *strings(x))]
    return []


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def found(haystack: list[str], needle: str) -> bool:
    return any(needle in s for s in haystack)


def all_values() -> list[str]:
    out = [c[3] for p in PLACES for c in cases(p)] + [v for p in PLACES for v in keyed(p).values()]
    return out + [value("env", 5000 + i) for i in range(len(NAMES))]


@pytest.mark.timeout(60)
def test_every_shape_in_every_place_of_a_supervised_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**clean_env(), **{ENV_NAMES[n]: value("env", 5000 + i) for i, n in enumerate(NAMES)}}
    with Supervised(run_dir, [PY, str(AGENT), *texts("argv")], env=env) as sup:
        assert sup.wait(45) == 0, sup.stderr()
    files = {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}
    assert {"run.json", "supervisor.jsonl", "agent.log", "journal.jsonl"} <= set(files)
    assert any(f.startswith("checkpoints/") for f in files), files
    # no value anywhere, nor the end every value shares (no piece of one was left)
    leaks = [f"{f}: {v}" for f, data in files.items() for v in all_values() if v[:8].encode() in data]
    assert leaks == [] and [f for f, data in files.items() if MARK.encode() in data] == []
    # the child got its real arguments and environment (its own output to the terminal, teed raw, has them)
    assert "argv as given" in sup.stdout() and f"PASSWORD is {value('env', 5000)}" in sup.stdout()

    journal = json_lines(run_dir / "journal.jsonl")
    steps = {(r.get("kind"), r.get("step")): r for r in journal}
    checkpoint = json.loads(next(data for f, data in files.items() if f.startswith("checkpoints/")))
    log = files["agent.log"].decode()
    meta = rundir.read_run_json(run_dir)
    where: dict[str, list[str]] = {
        "inputs": strings(steps["step", "login"]["inputs"]),
        "output": strings(steps["step", "login"]["output"]),
        "error": strings(steps["step", "refresh"]["error"]),
        "state": strings([r.get("state_patch") for r in journal]),
        "checkpoint": strings(checkpoint["state"]["cp"]),
        "note": strings([r for r in journal if r["kind"] == "note"]),
        "stdout": [ln for ln in log.splitlines() if "[1:stdout]" in ln],
        "stderr": [ln for ln in log.splitlines() if "[1:stderr]" in ln],
        "argv": meta["command"],
    }
    for place, seen in where.items():
        assert seen, place
        for name, form, text, secret in cases(place):
            # the text as written with only its value redacted: the name says which field was secret
            want = f"{name} = {R}" if form == "chained" else text.replace(secret, R)
            assert found(seen, want), (place, name, form, want)
            assert form != "chained" or not found(seen, f"{name} = x-api-key: "), (place, name)
    # the names as keys of step data, the state (a patch's path), a checkpoint and a note's fields
    for place, doc in (("inputs", steps["step", "login"]["inputs"]["kwargs"]["creds"]),
                       ("output", steps["step", "login"]["output"]), ("checkpoint", checkpoint["state"]["cp"]),
                       ("note", next(r for r in journal if r["kind"] == "note"))):
        assert {n: doc[n] for n in keyed(place)} == dict.fromkeys(keyed(place), R), place
    assert checkpoint["state"]["creds"] == dict.fromkeys(NAMES, R)
    patches = [op for r in journal for op in r.get("state_patch", [])]
    assert {op["path"][1:]: op["value"] for op in patches if op["path"][1:] in NAMES} == dict.fromkeys(NAMES, R)
    # the environment's values, written bare: the literal values of secret-looking variables
    env_lines = [f"{ENV_NAMES[n]} is {R}" for n in NAMES]
    for place in ("output", "state", "stdout", "stderr"):
        assert all(found(where[place], ln) for ln in env_lines), place
    # the command line in supervisor.jsonl and agent.log's attempt line, redacted the same way as in run.json
    events = json_lines(run_dir / "supervisor.jsonl")
    assert next(e for e in events if e["event"] == "supervisor-start")["argv"] == meta["command"]
    # (agent.log's line joins the arguments: a "cookie: " header's value there runs to the end of the line)
    shown = " ".join(meta["command"]).split("cookie: ")[0]
    assert f"attempt 1 started, pid {steps['start', None]['pid']}: {shown}cookie: {R}" in log
    assert all(R in ln or not ln for ln in next(e for e in events if e["event"] == "exit")["stderr_tail"])
