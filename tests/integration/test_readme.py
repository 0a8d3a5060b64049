"""Every code block of README.md works: Python blocks run, ``agent-supervisor`` command lines parse.

- Each fenced ```python block runs as a script in its own temporary directory
  (a real ``python`` process, no network, a timeout), and must exit 0.
- Each ``agent-supervisor ...`` command line in a code block (fenced ```sh,
  ```bash, ```console, ```shell or plain ```; or indented four spaces) must name
  a real subcommand, and every ``--option`` it shows must appear in that
  subcommand's ``--help``. Lines of ```sh/```bash/```console blocks that name
  ``sample_runs/`` and only read (``replay --verify``/``--live``, ``log``,
  ``state``, ``diff``, ``status``) are run for real on a copy of ``sample_runs/``
  and must exit 0. The install commands at the top are CI's job (``.ci/run``):
  their ``pip`` is not run here, only the ``agent-supervisor`` command they end with is checked.
- A block that must not run is marked by a line ``<!-- no-test -->`` right before
  its opening fence (used by no block today).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import ROOT, clean_env, run_cli

README = ROOT / "README.md"
NO_TEST = "<!-- no-test -->"
SHELL_LANGS = {"sh", "bash", "console", "shell", ""}
READ_ONLY = {"log", "state", "diff", "status"}
_FENCE = re.compile(r"^( {0,3})(```+|~~~+)\s*([\w+-]*)")
_COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?(?:agent-supervisor|python3? -m supervisor)(?:\s|$)")


@dataclass(frozen=True)
class Block:
    line: int
    """1-based line of the opening fence (or of the first line of an indented block)."""
    lang: str
    text: str
    skip: bool = False


def blocks(markdown: str) -> list[Block]:
    """The fenced code blocks (indentation of the fence removed from their lines) and the indented lines outside them."""
    out: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
            skip = i > 0 and lines[i - 1].strip() == NO_TEST
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            out.append(Block(i + 1, lang, "\n".join(body) + "\n", skip))
            i = j + 1
            continue
        if lines[i].startswith("    ") and lines[i].strip():
            out.append(Block(i + 1, "indented", lines[i].strip() + "\n", i > 0 and lines[i - 1].strip() == NO_TEST))
        i += 1
    return out


def commands(block: Block) -> list[list[str]]:
    """The ``agent-supervisor`` commands of a shell-like block, as argv lists (``&&``, ``;`` and ``|`` split lines)."""
    if block.skip or (block.lang not in SHELL_LANGS and block.lang != "indented"):
        return []
    out = []
    for line in block.text.splitlines():
        for part in re.split(r"&&|;|\|(?!\|)", line.split("  #")[0]):
            part = part.strip()
            if _COMMAND.match(part):
                argv = shlex.split(part.removeprefix("$ "))
                argv = argv[3:] if argv[0].startswith("python") else argv[1:]
                out.append(argv)
    return out


ALL = blocks(README.read_text())
PYTHON = [b for b in ALL if b.lang in ("python", "py", "python3") and not b.skip]
COMMANDS = [(b, argv) for b in ALL for argv in commands(b)]


def test_the_readme_has_blocks_to_test() -> None:
    assert PYTHON, "README.md has no ```python block"
    assert {argv[0] for _, argv in COMMANDS} >= {"demo", "supervise", "status", "rollback", "replay"}


def test_block_extraction_and_the_no_test_marker() -> None:
    """The extractor above can fail: it finds indented fences, honours the marker, splits command lines."""
    md = (
        "text\n\n```python\nprint(1)\n```\n\n" + NO_TEST + "\n```python\nraise SystemExit(1)\n```\n\n"
        "- item\n\n  ```sh\n  agent-supervisor log runs/x --json | head -1\n  ```\n\n"
        "    python3 -m venv .venv && .venv/bin/agent-supervisor demo\n"
    )
    found = blocks(md)
    assert [(b.lang, b.skip) for b in found] == [("python", False), ("python", True), ("sh", False), ("indented", False)]
    assert [c for b in found for c in commands(b)] == [["log", "runs/x", "--json"], ["demo"]]


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: f"line{b.line}")
def test_python_block_runs(tmp_path: Path, block: Block) -> None:
    script = tmp_path / "agent.py"
    script.write_text(block.text)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"README.md line {block.line}:\n{r.stdout}{r.stderr}"


def test_sdk_example_resumes_as_the_readme_says(tmp_path: Path) -> None:
    """The SDK example, run twice as ``agent.py``: the second run replays every step and runs none."""
    block = next(b for b in PYTHON if "Run.open()" in b.text)
    (tmp_path / "agent.py").write_text(block.text)
    outs = [
        subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30)
        for _ in range(2)
    ]
    assert [(r.returncode, r.stdout) for r in outs] == [(0, "replayed 0 steps, ran 3\n"), (0, "replayed 3 steps, ran 0\n")]
    assert (tmp_path / "runs" / "agent" / "journal.jsonl").exists()


_HELP: dict[str, str] = {}


def _help(sub: str) -> str:
    if sub not in _HELP:
        r = run_cli(sub, "--help")
        assert r.returncode == 0, f"agent-supervisor {sub} --help: {r.stderr}"
        _HELP[sub] = r.stdout
    return _HELP[sub]


@pytest.mark.parametrize(("block", "argv"), COMMANDS, ids=[f"line{b.line}-{' '.join(a)[:40]}" for b, a in COMMANDS])
def test_command_line_parses(block: Block, argv: list[str]) -> None:
    _check_command("README.md", block, argv)


DOCS = sorted((ROOT / "docs").glob("*.md"))
DOC_COMMANDS = [(d.name, b, argv) for d in DOCS for b in blocks(d.read_text()) for argv in commands(b)]


def test_the_docs_have_commands_to_test() -> None:
    assert DOCS and DOC_COMMANDS, "docs/ has no page with an agent-supervisor command line"


@pytest.mark.parametrize(("doc", "block", "argv"), DOC_COMMANDS, ids=[f"{d}-line{b.line}-{' '.join(a)[:40]}" for d, b, a in DOC_COMMANDS])
def test_doc_command_line_parses(doc: str, block: Block, argv: list[str]) -> None:
    """The pages of docs/ are held to the README's rule: every command line names a command and its options."""
    _check_command(f"docs/{doc}", block, argv)


def _check_command(where: str, block: Block, argv: list[str]) -> None:
    assert argv and not argv[0].startswith("-"), f"{where} line {block.line}: no subcommand in {argv}"
    text = _help(argv[0])
    args = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    for a in args:
        for opt in re.findall(r"(?<![\w-])--[a-z][\w-]*", a):
            assert opt in text, f"{where} line {block.line}: agent-supervisor {argv[0]} has no option {opt}"


RUNNABLE = [
    (b, a) for b, a in COMMANDS
    if b.lang in ("sh", "bash", "console", "shell") and any("sample_runs/" in x for x in a)
    and (a[0] in READ_ONLY or (a[0] == "replay" and ("--verify" in a or "--live" in a)))
]


@pytest.mark.parametrize(("block", "argv"), RUNNABLE, ids=[f"line{b.line}-{' '.join(a)[:40]}" for b, a in RUNNABLE])
def test_command_on_a_sample_run_works(tmp_path: Path, block: Block, argv: list[str]) -> None:
    shutil.copytree(ROOT / "sample_runs", tmp_path / "sample_runs", ignore=shutil.ignore_patterns("__pycache__"))
    r = run_cli(*argv, cwd=tmp_path)
    assert r.returncode == 0, f"README.md line {block.line}: agent-supervisor {shlex.join(argv)}\n{r.stdout}{r.stderr}"


def test_the_readme_runs_a_sample_command() -> None:
    assert RUNNABLE, "no ```sh block of the README runs a command on sample_runs/"
