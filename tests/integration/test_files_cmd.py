"""``agent-supervisor files``: the workspace's snapshots and recorded changes, ``--at``, ``--diff`` and ``--restore``,
run as a real process on a run the SDK made with a workspace."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import orjson

from ..conftest import run_cli
from ..tui.files_run import APP_V1, APP_V2, BUILD_LOG, NOTES, SCRATCH, FilesRun, make_files_run

DATA = Path(__file__).parents[1] / "tui" / "data"


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def files(*args: str) -> tuple[int, str, str]:
    r = run_cli("files", *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def test_the_list_shows_the_committed_snapshots_and_the_recorded_changes(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    code, out, err = files(str(fr.run_dir))
    assert code == 0, err
    assert f"workspace {fr.ws.resolve()}" in out
    assert "snapshots (3 committed)" in out
    lines = out.splitlines()
    start = next(ln for ln in lines if " start " in ln)
    assert start.split()[:3] == ["-", "start", "2"]  # app.py and scratch.txt before the first record
    planned = next(ln for ln in lines if " planned " in ln)
    assert planned.split()[:4] == [str(fr.seqs["planned"]), "checkpoint", "planned", "2"]
    assert "sdk" in planned
    assert "changes recorded (2)" in out
    edit = next(ln for ln in lines if "edit:app" in ln)
    assert edit.strip().startswith(f"#{fr.seqs['begin:edit:app']}")
    assert edit.endswith("~ app.py, + notes.md, - scratch.txt")
    assert any("between steps: + build.log" in ln for ln in lines)

    code, out, _ = files(str(fr.run_dir), "--json")
    doc = orjson.loads(out)
    assert [s["for"] for s in doc["snapshots"]] == ["start", "checkpoint", "checkpoint"]
    assert [s["name"] for s in doc["snapshots"]] == [None, "planned", "edited"]
    assert doc["workspace"]["root"] == str(fr.ws.resolve())
    assert [c["during"] for c in doc["changes"]] == ["step", "between"]
    assert doc["changes"][0]["steps"] == [{"step": "edit:app", "pos": 1}]


def test_at_shows_what_a_step_changed_and_what_a_checkpoint_holds(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    code, out, err = files(str(fr.run_dir), "--at", str(fr.seqs["edit:app"]))
    assert code == 0, err
    assert out.startswith(f"#{fr.seqs['edit:app']} step edit:app: 3 files changed by its step\n")
    assert "~ app.py  changed\n" in out and "-    return 41" in out and "+    return 42" in out
    assert "+ notes.md  created\n" in out and "- scratch.txt  deleted\n" in out
    # the begin of the same step says the same
    code, begin_out, _ = files(str(fr.run_dir), "--at", str(fr.seqs["begin:edit:app"]))
    assert code == 0 and "3 files changed by its step" in begin_out

    code, out, _ = files(str(fr.run_dir), "--at", "plan")  # a step name is no point: a checkpoint name or a seq
    assert code == 2 and out == ""
    code, out, _ = files(str(fr.run_dir), "--at", "planned")
    assert code == 0
    assert "the checkpoint's snapshot: 2 files" in out and "  app.py  " in out and "  scratch.txt  " in out
    code, out, _ = files(str(fr.run_dir), "--at", str(fr.seqs["test"]), "--json")
    doc = orjson.loads(out)
    assert doc["step"] == [] and doc["between"][0]["changes"][0]["path"] == "build.log"


def test_diff_between_two_points_and_against_now(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    code, out, err = files(str(fr.run_dir), "--diff", "planned..edited")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith(f"workspace #{fr.seqs['planned']} -> #{fr.seqs['edited']}: ")
    assert "~ app.py  changed" in out and "+ notes.md  created" in out and "- scratch.txt  deleted" in out
    assert "build.log" not in out  # it came after the edited checkpoint
    assert "-    return 41" in out and "+    return 42" in out

    (fr.ws / "app.py").write_text(APP_V2.replace("42", "43"))  # a change nothing recorded: now is read from the disk
    code, out, _ = files(str(fr.run_dir), "--diff", "edited..", "--json")
    doc = orjson.loads(out)
    assert doc["b"] is None
    by_path = {c["path"]: c for c in doc["changes"]}
    assert set(by_path) == {"app.py", "build.log"}
    assert "+    return 43" in by_path["app.py"]["diff"] and by_path["build.log"]["op"] == "created"

    code, out, _ = files(str(fr.run_dir), "--diff", "start..end")
    assert code == 0 and "+ build.log  created" in out  # the between change after the last step is in effect at the end

    for bad in ("planned", "1..2..3", "planned..nope", "..5"):
        code, out, err = files(str(fr.run_dir), "--diff", bad)
        assert code == 2 and out == "" and err.startswith("agent-supervisor: "), (bad, err)


def test_restore_into_a_directory_never_over_the_workspace_without_force(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    to = tmp_path / "at-planned"
    code, out, err = files(str(fr.run_dir), "--restore", "planned", "--to", str(to))
    assert code == 0, err
    assert tree(to) == {"app.py": hashlib.sha256(APP_V1.encode()).hexdigest(),
                        "scratch.txt": hashlib.sha256(SCRATCH.encode()).hexdigest()}
    code, _, err = files(str(fr.run_dir), "--restore", "planned", "--to", str(to))  # not empty now
    assert code == 2 and "not an empty directory" in err

    before = tree(fr.ws)
    for into in (fr.ws, fr.ws / "sub"):
        code, _, err = files(str(fr.run_dir), "--restore", "planned", "--to", str(into))
        assert code == 2 and "--force" in err, err
    assert tree(fr.ws) == before and not (fr.ws / "sub").exists()

    code, out, err = files(str(fr.run_dir), "--restore", "planned", "--to", str(fr.ws), "--force")
    assert code == 0, err
    assert tree(fr.ws) == tree(to)  # notes.md and build.log gone, scratch.txt back, app.py as it was
    assert "is now as of #" in out

    code, _, err = files(str(fr.run_dir), "--to", str(tmp_path / "x"))
    assert code == 2 and "--restore" in err
    code, _, err = files(str(fr.run_dir), "--restore", "planned")
    assert code == 2 and "--to DIR" in err


def test_the_abandoned_branch_stays_restorable_after_a_rollback(tmp_path: Path) -> None:
    fr: FilesRun = make_files_run(tmp_path)
    r = run_cli("rollback", str(fr.run_dir), "--to", "planned")
    assert r.returncode == 0, r.stderr
    recs = [orjson.loads(line) for line in (fr.run_dir / "journal.jsonl").read_bytes().splitlines()]
    rb = recs[-1]
    assert rb["kind"] == "rollback"
    code, out, err = files(str(fr.run_dir), "--at", str(rb["seq"]))
    assert code == 0, err
    assert "the abandoned branch's snapshot" in out and "  notes.md  " in out and "  build.log  " in out
    to = tmp_path / "abandoned"
    code, _, err = files(str(fr.run_dir), "--restore", str(rb["seq"]), "--to", str(to))
    assert code == 0, err
    assert (to / "notes.md").read_text() == NOTES and (to / "app.py").read_text() == APP_V2
    assert (to / "build.log").read_text() == BUILD_LOG and not (to / "scratch.txt").exists()


def test_a_run_without_a_workspace_says_so(tmp_path: Path) -> None:
    run = tmp_path / "rolled_back_run"
    shutil.copytree(DATA / "rolled_back_run", run)
    code, out, err = files(str(run))
    assert code == 1 and out == ""
    assert "has no workspace: start it with supervise --workspace PATH or Run.open(workspace=...)" in err
    code, _, err = files(str(tmp_path / "nope"))
    assert code == 2 and "no such run directory" in err
