"""``replay --verify`` and ``replay --live``: real agents re-executed against real journals."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor.core import rundir
from supervisor.errors import ReplayError
from supervisor.replay.session import ENV_REPLAY_REPORT, ReplayMode, inputs_hash

from ..conftest import ROOT, SAMPLE_AGENT, clean_env, run_agent, run_cli

TEST_AGENT = Path(__file__).with_name("replay_agent.py")
PY = sys.executable


def snapshot(run_dir: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``run_dir``: sha256, mtime and mode, to prove a replay changed nothing."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(run_dir))] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def ledger(path: Path) -> list[str]:
    """The steps whose functions really ran, in order."""
    if not path.exists():
        return []
    return [orjson.loads(line)["step"] for line in path.read_bytes().splitlines()]


def record_test_run(tmp_path: Path, *args: str) -> Path:
    run_dir = tmp_path / "run"
    r = subprocess.run(
        [PY, str(TEST_AGENT), "--run-dir", str(run_dir), "--ledger", str(tmp_path / "recorded.jsonl"), *args],
        capture_output=True, text=True, env=clean_env(), timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return run_dir


def replay(run_dir: Path, *opts: str, cmd: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("replay", str(run_dir), *opts, *(["--", *cmd] if cmd is not None else []))


def test_verify_clean_run_replays_every_step_and_changes_nothing(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    led = tmp_path / "replay.jsonl"
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), "--ledger", str(led)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay verified: 6 of 6 steps replayed" in r.stdout
    assert "inputs checked for 6" in r.stdout
    assert ledger(led) == []  # no step function ran
    assert snapshot(run_dir) == before  # byte for byte, mtimes too: no lock, no run.json, no journal line


def test_verify_catches_changed_step_order(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l.jsonl"), "--swap"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIVERGED at position 0 (seq 2): expected step 'fetch:1', actual 'fetch:2'" in r.stdout
    assert "replay FAILED (1 divergence)" in r.stdout
    assert "Traceback" not in r.stderr
    assert snapshot(run_dir) == before


def test_verify_catches_changed_input_and_shows_it(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l.jsonl"), "--salt", "x"])
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = next(line for line in lines if line.startswith("DIVERGED"))
    assert "position 2" in head and "'analyze'" in head and "other inputs" in head
    recorded = next(
        orjson.loads(x)
        for x in (run_dir / "journal.jsonl").read_bytes().splitlines()
        if b'"step":"analyze"' in x and b'"kind":"step"' in x
    )
    assert f"expected hash {recorded['inputs_hash']}" in head
    assert '~ /kwargs/salt: "" -> "x"' in r.stdout
    assert ledger(tmp_path / "l.jsonl") == []


def test_verify_of_sample_agent_with_another_task_diverges(tmp_path: Path) -> None:
    run_dir = tmp_path / "research"
    assert run_agent(run_dir, "--ledger", str(tmp_path / "rec.jsonl")).returncode == 0
    r = replay(run_dir, "--verify", cmd=[PY, str(SAMPLE_AGENT), "--ledger", str(tmp_path / "l.jsonl"), "--task", "other"])
    assert r.returncode == 1
    assert "DIVERGED at position 0 (seq 2), step 'plan': other inputs" in r.stdout
    assert "durable agents" in r.stdout and "other" in r.stdout


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--extra", "DIVERGED at position 6: expected the end of the journal, actual step 'extra' (not in the journal)"),
        ("--stop-early", "DIVERGED at position 5: expected 1 more recorded step(s), next 'summarize', actual: the agent finished"),
    ],
)
def test_verify_catches_missing_and_unreplayed_steps(tmp_path: Path, flag: str, expected: str) -> None:
    run_dir = record_test_run(tmp_path)
    led = tmp_path / "l.jsonl"
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), "--ledger", str(led), flag])
    assert r.returncode == 1, r.stdout + r.stderr
    assert expected in r.stdout
    assert ledger(led) == []  # the step missing from the journal did not run either


def test_verify_crashed_resumed_and_rolled_back_runs(tmp_path: Path) -> None:
    """Runs with a crash and a resume, and with a rollback, replay through their effective history."""
    crashed = tmp_path / "crashed"
    assert run_agent(crashed, "--crash-in", "search:q2", "--ledger", str(tmp_path / "a.jsonl")).returncode == 1
    assert run_agent(crashed, "--crash-in", "search:q2", "--ledger", str(tmp_path / "a.jsonl")).returncode == 0
    rolled = tmp_path / "rolled"
    # as a supervisor would: restart after each failure until the SDK rolls back (exit 75), then once more
    codes = [run_agent(rolled, "--fail", "summarize:3", "--ledger", str(tmp_path / "b.jsonl")).returncode for _ in range(4)]
    assert codes == [1, 1, rundir.EXIT_ROLLBACK, 0]
    for run_dir in (crashed, rolled):
        before = snapshot(run_dir)
        led = tmp_path / f"replay-{run_dir.name}.jsonl"
        r = replay(run_dir, "--verify", cmd=[PY, str(SAMPLE_AGENT), "--ledger", str(led)])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "replay verified: 5 of 5 steps replayed" in r.stdout
        assert ledger(led) == []
        assert snapshot(run_dir) == before


SAMPLES = ROOT / "sample_runs" / "runs"


@pytest.mark.parametrize("name", ["clean", "crashed-resumed", "rolled-back"])
def test_verify_each_sample_run(tmp_path: Path, name: str) -> None:
    """The recorded sample runs (sample_runs/make_samples.py) verify against today's agent code."""
    run_dir = SAMPLES / name
    assert (run_dir / "journal.jsonl").exists(), f"{run_dir} is missing: regenerate with sample_runs/make_samples.py"
    before = snapshot(run_dir)
    led = tmp_path / "l.jsonl"
    r = replay(run_dir, "--verify", cmd=[PY, str(SAMPLE_AGENT), "--ledger", str(led)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay verified" in r.stdout
    assert ledger(led) == []
    assert snapshot(run_dir) == before


def test_live_runs_only_matching_steps_and_diffs_outputs(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    led = tmp_path / "live.jsonl"
    r = replay(run_dir, "--live", "summarize", cmd=[PY, str(TEST_AGENT), "--ledger", str(led), "--style", "shout"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert ledger(led) == ["summarize"]  # only the chosen step was called
    out = r.stdout
    assert "live step 'summarize' at position 5 (seq 13): output changed" in out
    assert "-total 61" in out and "+TOTAL 61" in out
    assert "partial replay: 5 steps served from the journal, 1 run live (matching 'summarize'), 1 outputs changed" in out
    assert snapshot(run_dir) == before


def test_live_glob_and_repeated_patterns(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    led = tmp_path / "live.jsonl"
    r = replay(run_dir, "--live", "fetch:*", "--live", "work:[1]", cmd=[PY, str(TEST_AGENT), "--ledger", str(led)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert ledger(led) == ["fetch:1", "fetch:2", "work:1"]
    assert r.stdout.count("output unchanged") == 3
    assert "0 outputs changed" in r.stdout


def test_live_sample_agent_counts_model_calls(tmp_path: Path) -> None:
    """Re-run only ``summarize`` of the research agent: one model call, none for plan or the searches."""
    run_dir = tmp_path / "research"
    assert run_agent(run_dir, "--ledger", str(tmp_path / "rec.jsonl")).returncode == 0
    led = tmp_path / "live.jsonl"
    r = replay(run_dir, "--live", "summarize", cmd=[PY, str(SAMPLE_AGENT), "--ledger", str(led)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert ledger(led) == ["summarize"]
    assert "output unchanged" in r.stdout


def test_live_new_step_and_served_step_with_changed_inputs(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    led = tmp_path / "live.jsonl"
    r = replay(run_dir, "--live", "extra", cmd=[PY, str(TEST_AGENT), "--ledger", str(led), "--extra", "--salt", "s"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert ledger(led) == ["extra"]
    assert "live step 'extra' at position 6: new (not in the journal)" in r.stdout
    assert "warning: step 'analyze' at position 2 was served from the journal although its inputs differ" in r.stdout


def test_live_step_that_raises_fails_the_replay(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    r = replay(run_dir, "--live", "analyze", cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l.jsonl"), "--fail-in", "analyze"])
    assert r.returncode == 3, r.stdout + r.stderr
    assert "replay failed: live step 'analyze' at position 2 raised RuntimeError: analyze failed on purpose" in r.stdout


def test_verify_uses_recorded_command_without_cmd(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    r = replay(run_dir, "--verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replaying with the recorded command" in r.stderr
    # the recorded command names the recorded ledger: a strict replay adds nothing to it
    assert len(ledger(tmp_path / "recorded.jsonl")) == 6
    # a recorded command with a secret was written redacted: it cannot run as is, so replay asks for it
    from supervisor.core import rundir

    meta = rundir.read_run_json(run_dir)
    rundir.write_run_json(run_dir, {**meta, "command": [*meta["command"], "--api-key", "[REDACTED]"]})
    r = replay(run_dir, "--verify")
    assert r.returncode == 2 and "[REDACTED]" in r.stderr and "give it after '--'" in r.stderr, r.stderr


# A plain agent that does not use the SDK: it appends one step line to journal.jsonl in the directory it is
# given (--run-dir, else $AGENT_SUPERVISOR_RUN_DIR), as a hand-written durable loop would on every start.
PLAIN_AGENT = """
import os, sys
args = sys.argv[1:]
run_dir = args[args.index("--run-dir") + 1] if "--run-dir" in args else os.environ["AGENT_SUPERVISOR_RUN_DIR"]
with open(os.path.join(run_dir, "journal.jsonl"), "a") as f:
    f.write('{"step": "real-work", "output": "paid again"}\\n')
print("plain agent: did its real work")
"""

NO_SDK = "the agent did not report a replay: it does not use the SDK or the replay protocol"


def plain_agent(tmp_path: Path) -> Path:
    script = tmp_path / "plain_agent.py"
    script.write_text(PLAIN_AGENT)
    return script


@pytest.mark.parametrize("given", ["env", "--run-dir", "--run-dir relative"])
def test_agent_without_sdk_runs_on_a_scratch_copy_and_the_original_stays_byte_identical(tmp_path: Path, given: str) -> None:
    """The issue's case: a non-SDK agent's real work lands in the scratch copy; the verdict says why it failed."""
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    journal = (run_dir / "journal.jsonl").read_bytes()
    cmd = [PY, str(plain_agent(tmp_path))]
    cwd = ROOT
    if given == "--run-dir":
        cmd += ["--run-dir", str(run_dir)]
    elif given == "--run-dir relative":
        cmd += ["--run-dir", "run"]
        cwd = tmp_path
    r = run_cli("replay", str(run_dir), "--verify", "--", *cmd, cwd=cwd)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "plain agent: did its real work" in r.stderr  # it did run (its output goes to stderr)
    out = r.stdout.splitlines()
    assert out[-1].startswith("replay FAILED: " + NO_SDK), r.stdout
    assert ("warning: the agent changed journal.jsonl in its run directory during the replay "
            "(its own side effect; it went to the scratch copy, the original is unchanged)") in out
    if given != "env":
        assert any(line.startswith("note: the command names the run directory in ") for line in out), r.stdout
    assert (run_dir / "journal.jsonl").read_bytes() == journal
    assert snapshot(run_dir) == before
    assert list(tmp_path.glob("agent-supervisor-replay-*")) == []


def test_agent_that_writes_to_the_original_by_a_hidden_path_fails_the_replay_loudly(tmp_path: Path) -> None:
    """A path replay cannot see (here in the agent's code) reaches the original: the hashes catch it, exit 3."""
    run_dir = record_test_run(tmp_path)
    code = f"open({str(run_dir / 'journal.jsonl')!r}, 'a').write('{{}}\\n')"
    r = run_cli("replay", str(run_dir), "--verify", "--", PY, "-c", code)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"replay FAILED: the run directory {run_dir} changed during the replay (journal.jsonl)" in r.stdout
    assert NO_SDK in r.stdout


def test_sdk_agent_given_the_original_run_dir_replays_the_copy(tmp_path: Path) -> None:
    """``--run-dir ORIGINAL`` on the command line is pointed at the scratch copy, and replay says so."""
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    led = tmp_path / "replay.jsonl"
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), f"--run-dir={run_dir}", "--ledger", str(led)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replay verified: 6 of 6 steps replayed" in r.stdout
    assert f"note: the command names the run directory in '--run-dir={run_dir}'" in r.stdout
    assert ledger(led) == []
    assert snapshot(run_dir) == before


def test_a_new_file_named_in_the_run_directory_goes_to_the_copy(tmp_path: Path) -> None:
    """``--ledger=RUN_DIR/side.jsonl`` (a file that does not exist yet) is pointed at the copy too."""
    run_dir = tmp_path / "research"
    assert run_agent(run_dir, "--ledger", str(tmp_path / "rec.jsonl")).returncode == 0
    before = snapshot(run_dir)
    r = replay(run_dir, "--live", "summarize", cmd=[PY, str(SAMPLE_AGENT), f"--ledger={run_dir}/side.jsonl"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"note: the command names the run directory in '--ledger={run_dir}/side.jsonl'" in r.stdout
    assert "warning: the agent changed side.jsonl in its run directory" in r.stdout
    assert snapshot(run_dir) == before


def test_sdk_agent_that_finds_the_original_by_itself_replays_it_read_only(tmp_path: Path) -> None:
    """A run directory hidden in an ``sh -c`` string is not rewritten: the SDK replays the original, writing nothing."""
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    inner = shlex.join([PY, str(TEST_AGENT), "--run-dir", str(run_dir), "--ledger", str(tmp_path / "l.jsonl")])
    r = replay(run_dir, "--verify", cmd=["sh", "-c", inner])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"note: the agent opened {run_dir} itself, not the scratch copy; it wrote nothing there" in r.stdout
    assert "replay verified: 6 of 6 steps replayed" in r.stdout
    assert snapshot(run_dir) == before


# The replay protocol implemented without the SDK, in sh: what the README promises an agent in another language.
SH_PROTOCOL_AGENT = r"""
n=$(grep -c '"kind":"step"' "$AGENT_SUPERVISOR_RUN_DIR/journal.jsonl")
[ "$AGENT_SUPERVISOR_REPLAY" = strict ] || exit 9
[ "$AGENT_SUPERVISOR_RESUME" = 1 ] || exit 9
case "$1" in
  ok) div='[]' ;;
  diverge) div='[{"position": 0, "kind": "step", "expected": "fetch:1", "actual": "fetch:9"}]' ;;
  bad) div='"none"' ;;
esac
printf '{"format": 1, "run_dir": "%s", "journal_steps": %s, "replayed": %s, "divergences": %s, "error": null}' \
  "$AGENT_SUPERVISOR_RUN_DIR" "$n" "$n" "$div" > "$AGENT_SUPERVISOR_REPLAY_REPORT.tmp"
mv "$AGENT_SUPERVISOR_REPLAY_REPORT.tmp" "$AGENT_SUPERVISOR_REPLAY_REPORT"
"""


@pytest.mark.parametrize(
    ("case", "code", "verdict"),
    [
        ("ok", 0, "replay verified: 6 of 6 steps replayed"),
        ("diverge", 1, "DIVERGED at position 0 (seq None): expected step 'fetch:1', actual 'fetch:9'"),
        ("bad", 3, "replay FAILED: the agent's replay report is not valid: \"divergences\" must be a list of objects"),
    ],
)
def test_replay_protocol_implemented_in_sh(tmp_path: Path, case: str, code: int, verdict: str) -> None:
    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    script = tmp_path / "agent.sh"
    script.write_text(SH_PROTOCOL_AGENT)
    r = replay(run_dir, "--verify", cmd=["sh", str(script), case])
    assert r.returncode == code, r.stdout + r.stderr
    assert verdict in r.stdout
    assert snapshot(run_dir) == before


def test_symlink_in_the_run_directory_is_refused(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    (tmp_path / "elsewhere.txt").write_text("x")
    (run_dir / "notes.txt").symlink_to(tmp_path / "elsewhere.txt")
    r = replay(run_dir, "--verify", cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l.jsonl")])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "notes.txt is a symbolic link" in r.stderr
    assert not (tmp_path / "l.jsonl").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "{missing}", "--verify", "--", PY, "x.py"], "no such run directory"),
        (["replay", "{run}", "--verify", PY, "x.py"], "put the agent's command after '--'"),
        (["replay", "{run}", "--verify", "--live", "x", "--", PY, "x.py"], "exclude each other"),
        (["replay", "{run}", "--verify", "--", "/nonexistent/agent"], "no such program"),
        (["replay", "{run}", "--", PY, "x.py"], "needs --verify or --live"),
        (["replay", "{run}", "--verify", "--", PY, str(TEST_AGENT), "--ledger", "{tmp}/l", "--run-dir", "{other}"], "not {run}"),
    ],
)
def test_bad_usage_is_one_line_exit_2(tmp_path: Path, argv: list[str], message: str) -> None:
    run_dir = record_test_run(tmp_path)
    other = tmp_path / "other"
    subprocess.run(
        [PY, str(TEST_AGENT), "--run-dir", str(other), "--ledger", str(tmp_path / "o.jsonl")], env=clean_env(), check=True, timeout=30
    )
    fill = {"{missing}": str(tmp_path / "nope"), "{run}": str(run_dir), "{other}": str(other), "{tmp}": str(tmp_path)}

    def sub(a: str) -> str:
        for k, v in fill.items():
            a = a.replace(k, v)
        return a

    before = snapshot(run_dir)
    r = run_cli(*[sub(a) for a in argv])
    assert r.returncode == 2, r.stdout + r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("agent-supervisor:")]
    assert len(err) == 1 and sub(message) in err[0], r.stderr
    assert "Traceback" not in r.stderr
    assert snapshot(run_dir) == before


# --------------------------------------------------------------------------- the SDK side, in process


def test_replay_mode_never_creates_a_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor import Run

    monkeypatch.setenv(rundir.ENV_REPLAY, "strict")
    with pytest.raises(ReplayError, match="no such run directory to replay"):
        Run.open(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def test_replay_mode_opens_read_only_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: a strict replay writes only its report; state follows the journal; step functions never run."""
    from supervisor import Run

    run_dir = record_test_run(tmp_path)
    before = snapshot(run_dir)
    report = tmp_path / "report.json"
    monkeypatch.setenv(rundir.ENV_REPLAY, "strict")
    monkeypatch.setenv(ENV_REPLAY_REPORT, str(report))
    calls: list[str] = []
    with Run.open(run_dir) as run:
        for n in ("1", "2"):
            page = run.step(f"fetch:{n}", lambda s, u: calls.append(s), f"fetch:{n}", f"https://example.invalid/{n}")
            assert page == {"url": f"https://example.invalid/{n}", "body": f"page https://example.invalid/{n}"}
        assert run.state == {}  # the agent's own assignment comes after; patches say so
        run.state["pages"] = 2
        run.step("analyze", lambda *a, **k: calls.append("analyze"), [page, page], salt="")
    assert calls == []
    doc = orjson.loads(report.read_bytes())
    # 3 of 6 replayed, and the inputs of analyze differ (the pages passed are not the recorded ones)
    assert doc["replayed"] == 3
    assert [d["kind"] for d in doc["divergences"]] == ["inputs", "unfinished"]
    assert snapshot(run_dir) == before  # no lock file, no run.json update, no journal line


def test_inputs_hash_is_stable() -> None:
    class Opaque:
        pass

    assert inputs_hash({"args": [1, "a"], "kwargs": {"x": 1, "y": 2}}) == inputs_hash({"kwargs": {"y": 2, "x": 1}, "args": [1, "a"]})
    assert inputs_hash({"args": [1]}) != inputs_hash({"args": [2]})
    assert len(inputs_hash({})) == 16
    # an object without a JSON form hashes by its repr minus the memory address
    assert inputs_hash({"args": [Opaque()]}) == inputs_hash({"args": [Opaque()]})


def test_replay_mode_parse() -> None:
    assert ReplayMode.parse("strict").kind == "strict"
    m = ReplayMode.parse("live:summarize\nsearch:*")
    assert m.patterns == ("summarize", "search:*")
    assert m.is_live("search:q1") and m.is_live("summarize") and not m.is_live("Summarize")
    assert ReplayMode.parse(m.env_value()) == m
    with pytest.raises(ReplayError, match="not a replay mode"):
        ReplayMode.parse("live:")


def test_replay_without_flags_opens_the_tui_in_replay_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wiring only: the TUI itself is tested with the Pilot in the TUI's tests."""
    import supervisor.tui.app as tui_app
    from supervisor.cli.main import main

    run_dir = record_test_run(tmp_path)
    calls: list[tuple[Path, bool]] = []
    monkeypatch.setattr(tui_app, "run_tui", lambda path, *, replay=False: calls.append((path, replay)) or 0)
    assert main(["replay", str(run_dir)]) == 0
    assert calls == [(run_dir, True)]


def test_replay_and_fork_import_no_textual() -> None:
    code = (
        "import sys, supervisor.replay.runner, supervisor.replay.session, supervisor.core.fork, supervisor.sdk; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'textual'], 'textual imported'"
    )
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr


def test_ctrl_c_stops_the_replayed_agent(tmp_path: Path) -> None:
    """SIGINT to ``replay`` while a live step hangs: the agent is stopped, exit 130, nothing left running."""
    import signal
    import time

    import psutil

    from ..conftest import wait_for

    run_dir = tmp_path / "research"
    assert run_agent(run_dir, "--ledger", str(tmp_path / "rec.jsonl")).returncode == 0
    led = tmp_path / "live.jsonl"
    cli = subprocess.Popen(
        [PY, "-m", "supervisor", "replay", str(run_dir), "--live", "search:q1", "--",
         PY, str(SAMPLE_AGENT), "--ledger", str(led), "--hang-in", "search:q1"],
        env=clean_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(lambda: ledger(led) == ["search:q1"], timeout=30, what="the live step to hang")
        children = psutil.Process(cli.pid).children(recursive=True)
        assert children
        t0 = time.monotonic()
        cli.send_signal(signal.SIGINT)
        _out, err = cli.communicate(timeout=20)
        assert cli.returncode == 130, err
        assert time.monotonic() - t0 < 4  # SIGTERM after 1 s, not the 5 s grace before SIGKILL
        for c in children:
            assert not c.is_running() or c.status() == psutil.STATUS_ZOMBIE
    finally:
        if cli.poll() is None:
            for c in psutil.Process(cli.pid).children(recursive=True):
                c.kill()
            cli.kill()
            cli.communicate()
    assert snapshot(run_dir)  # the run directory is still there and readable


def test_replay_warns_when_the_agent_itself_writes_into_the_run_directory(tmp_path: Path) -> None:
    """The SDK writes nothing; an agent's own side-effect files go to the scratch copy, and replay says so."""
    run_dir = tmp_path / "research"
    assert run_agent(run_dir).returncode == 0  # ledger.jsonl inside the run directory (the agent's default)
    before = snapshot(run_dir)
    r = replay(run_dir, "--live", "summarize", cmd=[PY, str(SAMPLE_AGENT)])
    assert r.returncode == 0, r.stdout + r.stderr
    warning = (
        "warning: the agent changed ledger.jsonl in its run directory during the replay "
        "(its own side effect; it went to the scratch copy, the original is unchanged)"
    )
    assert [line for line in r.stdout.splitlines() if "changed" in line and "warning" in line] == [warning]
    assert snapshot(run_dir) == before
    assert [rec["step"] for rec in map(orjson.loads, (run_dir / "ledger.jsonl").read_bytes().splitlines())] == [
        "plan", "search:q1", "search:q2", "summarize"
    ]  # the live summarize's model call went to the copy's ledger


# --------------------------------------------------------------------------- the scratch copy, in process


def test_copy_run_dir_copies_the_agent_files_and_hashes_everything(tmp_path: Path) -> None:
    import socket

    from supervisor.replay.runner import changed, copy_run_dir, snapshot

    src = tmp_path / "run"
    (src / "checkpoints").mkdir(parents=True)
    files = {
        "journal.000001.jsonl": b'{"step": "a", "output": 1}\n', "journal.jsonl": b'{"step": "b", "output": 2}\n',
        "journal.jsonl.torn": b"{\"st\n", "run.json": b"{}", "checkpoints/0001-x.json": b"{}", "ledger.jsonl": b"x\n",
        "agent.log": b"log\n", "agent.000001.log": b"old log\n", "supervisor.jsonl": b"{}\n", "supervisor.lock": b"",
    }
    for name, data in files.items():
        (src / name).write_bytes(data)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "control.sock"))
    try:
        snap, copied = copy_run_dir(src, tmp_path / "copy")
    finally:
        sock.close()
    assert set(snap) == set(files) | {"checkpoints", "control.sock"}
    assert sorted(copied) == ["checkpoints", "checkpoints/0001-x.json", "journal.000001.jsonl", "journal.jsonl",
                              "journal.jsonl.torn", "ledger.jsonl", "run.json"]
    assert snapshot(tmp_path / "copy") == copied
    assert (tmp_path / "copy" / "journal.jsonl").stat().st_ino != (src / "journal.jsonl").stat().st_ino
    with open(tmp_path / "copy" / "journal.jsonl", "ab") as f:  # an append to the copy does not reach the original
        f.write(b"more\n")
    assert changed(snap, snapshot(src)) == []
    assert changed(copied, snapshot(tmp_path / "copy")) == ["journal.jsonl"]


def test_retarget_command_points_run_dir_arguments_at_the_copy(tmp_path: Path) -> None:
    from supervisor.core.command import retarget_command

    run, scratch = tmp_path / "runs" / "r", tmp_path / "scratch" / "r"
    run.mkdir(parents=True)
    (run / "summarize").mkdir()  # a word is not a path in the run directory unless the agent runs there
    cmd = ["python", "agent.py", "--run-dir", "runs/r", f"--ledger={run}/new.jsonl", "summarize", "--task", "r", "-x"]
    new, notes = retarget_command(cmd, run.resolve(), scratch, tmp_path)
    assert new == ["python", "agent.py", "--run-dir", str(scratch), f"--ledger={scratch}/new.jsonl", "summarize", "--task", "r", "-x"]
    assert len(notes) == 2
    # started inside the run directory: a relative word that names nothing there stays
    new, _ = retarget_command(["python", "agent.py", "plan", ".", "summarize"], run.resolve(), scratch, run)
    assert new == ["python", "agent.py", "plan", str(scratch), str(scratch / "summarize")]


def test_portable_program() -> None:
    from supervisor.core.command import portable_program

    assert portable_program("python") == PY
    assert portable_program("python3.11") == PY
    assert portable_program("/nonexistent/venv/bin/python3") == PY
    assert portable_program("/bin/sh") == "/bin/sh"
    assert portable_program("node") == "node"
    assert portable_program(PY) == PY


def test_verify_json_and_junit_for_ci(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    run_dir = record_test_run(tmp_path)
    junit = tmp_path / "ok.xml"
    r = replay(run_dir, "--verify", "--json", "--junit", str(junit), cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l1.jsonl")])
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)  # stdout is the JSON object alone
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["divergences"] == [] and doc["report"]["replayed"] == 6
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0"
    # a divergence: the replay fails, and JUnit names the diverging step as its own failed case
    junit = tmp_path / "bad.xml"
    r = replay(run_dir, "--verify", "--json", "--junit", str(junit),
               cmd=[PY, str(TEST_AGENT), "--ledger", str(tmp_path / "l2.jsonl"), "--swap"])
    assert r.returncode == 1
    doc = orjson.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 1 and len(doc["divergences"]) == 1
    assert doc["summary"].startswith("replay FAILED (1 divergence)")
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "2"
    names = [c.get("name") for c in suite.iter("testcase")]
    assert "fetch:1 at position 0" in names
    # --json without a re-execution, and a --junit path in no directory: one line, exit 2
    r = replay(run_dir, "--json")
    assert r.returncode == 2 and "add --verify" in r.stderr and "Traceback" not in r.stderr
    r = replay(run_dir, "--verify", "--junit", str(tmp_path / "no" / "x.xml"), cmd=[PY, str(TEST_AGENT)])
    assert r.returncode == 2 and "existing directory" in r.stderr


def test_fork_json(tmp_path: Path) -> None:
    run_dir = record_test_run(tmp_path)
    r = run_cli("fork", str(run_dir), "--at", "3", "--json", "--to", str(tmp_path / "f"))
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout) == {"fork": str(tmp_path / "f"), "origin": str(run_dir), "seq": 3}
