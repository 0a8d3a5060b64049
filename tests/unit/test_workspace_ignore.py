"""The workspace's ``.gitignore`` rules against git itself: the same tree, the same files left out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from supervisor.core import workspace as ws
from supervisor.core.workspace_ignore import compile_line, decide

FILES = (
    "a.log", "keep.log", "sub/b.log", "sub/keep.log", "build/out.o", "src/build/x.o", "lib/build", "doc/tmp/t",
    "tmp/t2", "x/y/tmp/z", "q.txt", "a/b/c/d.txt", "a/x/d.txt", "logs/2024/jan.txt", "logs/keep/me.txt",
    "data/file1.csv", "data/file22.csv", "data/fileA.csv", "star/**/lit", "sp ace.txt", "#hash.txt",
    "!bang.txt", "deep/one/.gitignore", "deep/one/gen.py", "deep/one/two/gen.py", "deep/one/keep.py",
    "deep/one/two/only_here.txt", "deep/gen.py", "deep/one/two/only_here.md", "anch/root.txt", "sub/anch/root.txt",
    "cls/a1", "cls/b1", "cls/c1", "cls/-1", "trail/dir/f", "trail/file",
)
ROOT_IGNORE = """\
# comment
*.log
!keep.log
/build
**/tmp/
a/**/d.txt
logs/**
!logs/keep/
data/file?.csv
star/\\*\\*/lit
sp\\ ace.txt
\\#hash.txt
\\!bang.txt
/anch/root.txt
cls/[a-b]1
cls/[!c-]1
trail/dir/
trail/file/
"""
NESTED = {"deep/one/.gitignore": "gen.py\n!two/gen.py\n/two/only_here.*\n!*.md\n"}


def git_untracked(root: Path, tmp: Path) -> set[str]:
    env = {**os.environ, "HOME": str(tmp), "XDG_CONFIG_HOME": str(tmp / "cfg"), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
                         check=True, env=env, capture_output=True).stdout
    shutil.rmtree(root / ".git")
    return {p for p in out.decode().split("\0") if p}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_same_files_as_git_leaves_out(tmp_path: Path) -> None:
    root = tmp_path / "work"
    for rel in FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)
    (root / ".gitignore").write_text(ROOT_IGNORE)
    for rel, text in NESTED.items():
        (root / rel).write_text(text)
    expected = git_untracked(root, tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ref = ws.take(run_dir, ws.Settings(root.resolve()), for_="start", seq=None, by="sdk")
    got = {p for p, e in ws.Store(run_dir).manifest(ref.snapshot).files.items() if e.t == "f"}
    assert got == expected
    assert "logs/keep/me.txt" not in got  # a negation cannot re-include a file in an ignored directory's content
    assert {"keep.log", "sub/keep.log", "deep/one/two/gen.py", "deep/one/two/only_here.md"} <= got


@pytest.mark.parametrize(("pattern", "path", "is_dir", "hit"), [
    ("*.py", "a/b/c.py", False, True),
    ("/x.py", "a/x.py", False, False),
    ("dir/", "a/dir", True, True),
    ("dir/", "a/dir", False, False),
    ("**/foo", "foo", False, True),
    ("**/foo", "a/b/foo", False, True),
    ("a/**", "a/b/c", False, True),
    ("a/**", "a", True, False),
    ("a/**/b", "a/b", False, True),
    ("a/**/b", "a/x/y/b", False, True),
    ("a*b", "a/b", False, False),
    ("?.txt", "x.txt", False, True),
    ("[!a].txt", "/.txt", False, False),
    ("foo   ", "foo", False, True),
    ("foo\\ ", "foo ", False, True),
])
def test_patterns(pattern: str, path: str, is_dir: bool, hit: bool) -> None:
    rule = compile_line(pattern)
    assert rule is not None
    assert decide((rule,), path, is_dir) is hit


def test_blank_lines_comments_and_bases() -> None:
    assert compile_line("") is None and compile_line("# c") is None and compile_line("   ") is None
    rule = compile_line("x.txt", "sub/")
    assert rule is not None
    assert decide((rule,), "sub/a/x.txt", False) and not decide((rule,), "x.txt", False)
    anchored = compile_line("/x.txt", "sub/")
    assert anchored is not None
    assert decide((anchored,), "sub/x.txt", False) and not decide((anchored,), "sub/a/x.txt", False)


def test_workspace_ignore_globs_rank_below_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "d").mkdir(parents=True)
    for rel in ("a.tmp", "d/b.tmp", "keep.tmp", "big.bin", "d/big.bin"):
        (root / rel).write_text("x")
    (root / ".gitignore").write_text("!keep.tmp\n")
    pred = ws.ignored(ws.Settings(root, ("*.tmp", "/big.bin")))
    assert pred("a.tmp", False) and pred("d/b.tmp", False) and not pred("keep.tmp", False)
    assert pred("big.bin", False) and not pred("d/big.bin", False)
    assert pred(".git/config", False) and pred("x/node_modules", True) and pred("__pycache__/m.pyc", False)


def test_a_gitignore_that_is_a_link_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    outside = tmp_path / "outside-ignore"
    outside.write_text("*.txt\n")
    os.symlink(outside, root / "a/.gitignore")  # its patterns would hide a/x.txt
    os.mkfifo(root / "b/.gitignore")  # reading it would block the snapshot
    for rel in ("a/x.txt", "b/y.txt"):
        (root / rel).write_text("x")
    m = ws.scan(ws.Settings(root))
    assert set(m.files) == {"a/.gitignore", "a/x.txt", "b/y.txt"}  # the link kept as a link, the FIFO left out
    assert m.files["a/.gitignore"].t == "l"
