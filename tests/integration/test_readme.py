"""Every code block of README.md and of the pages in docs/ works: Python blocks run, ``agent-supervisor``
command lines parse, links lead somewhere.

- Each fenced ```python block runs as a script in its own temporary directory
  (a real ``python`` process, no network, a timeout), and must exit 0. The blocks start together, a few at a
  time (most of their time is the interpreter's start and the frameworks' imports), and each test waits for its own.
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
- Each relative link (``[text](docs/sdk.md#anchor)``, an image) names a file that exists and, with an
  ``#anchor``, a heading of that file as GitHub makes its anchor.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import ROOT, clean_env, run_cli

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
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


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


ALL = blocks(README.read_text())
COMMANDS = [(b, argv) for b in ALL for argv in commands(b)]
PYTHON = [(_name(p), b) for p in PAGES for b in blocks(p.read_text()) if b.lang in ("python", "py", "python3") and not b.skip]
_RUNS: dict[tuple[str, int], Future[subprocess.CompletedProcess[str]]] = {}


def _run_block(tmp: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp / "agent.py").write_text(text)
    return subprocess.run([sys.executable, "agent.py"], cwd=tmp, env=clean_env(), capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def python_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Future[subprocess.CompletedProcess[str]]]:
    """Every python block started at once on a small pool: the first test to ask waits for its own block only."""
    if not _RUNS:
        pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)), thread_name_prefix="readme-block")
        for page, b in PYTHON:
            _RUNS[page, b.line] = pool.submit(_run_block, tmp_path_factory.mktemp("block"), b.text)
        pool.shutdown(wait=False)
    return _RUNS


def test_the_readme_has_blocks_to_test() -> None:
    assert any(page == "README.md" for page, _ in PYTHON), "README.md has no ```python block"
    assert {page for page, _ in PYTHON} >= {"docs/sdk.md", "docs/adapters.md"}
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


@pytest.mark.parametrize(("page", "block"), PYTHON, ids=[f"{p}-line{b.line}" for p, b in PYTHON])
def test_python_block_runs(python_runs: dict[tuple[str, int], Future[subprocess.CompletedProcess[str]]],
                           page: str, block: Block) -> None:
    r = python_runs[page, block.line].result(timeout=120)
    assert r.returncode == 0, f"{page} line {block.line}:\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("page", ["README.md", "docs/sdk.md"])
def test_sdk_example_resumes_as_the_page_says(tmp_path: Path, page: str) -> None:
    """The page's first SDK example, run twice as ``agent.py``: the second run replays every step and runs none;
    the README's records a priced model call, marked with ``call=``, that the resume saved."""
    block = next(b for p, b in PYTHON if p == page and "Run.open()" in b.text)
    outs = [_run_block(tmp_path, block.text) for _ in range(2)]
    assert [(r.returncode, r.stdout) for r in outs] == [(0, "replayed 0 steps, ran 3\n"), (0, "replayed 3 steps, ran 0\n")]
    assert (tmp_path / "runs" / "agent" / "journal.jsonl").exists()
    if page == "README.md":
        r = run_cli("status", str(tmp_path / "runs" / "agent"), "--json")
        status = json.loads(r.stdout)
        assert status["tokens"]["input"] == status["saved_tokens"]["input"] > 0 and status["cost_usd"] > 0, status
        text = (tmp_path / "runs" / "agent" / "journal.jsonl").read_text()
        assert '"call":{"kind":"model"' in text and '"kind":"checkpoint"' in text


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


DOCS = PAGES[1:]
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


ALL_COMMANDS = [(_name(p), b, argv) for p in PAGES for b in blocks(p.read_text()) for argv in commands(b)]
RUNNABLE = [
    (page, b, a) for page, b, a in ALL_COMMANDS
    if b.lang in ("sh", "bash", "console", "shell") and any("sample_runs/" in x for x in a)
    and (a[0] in READ_ONLY or (a[0] == "replay" and ("--verify" in a or "--live" in a)))
]


@pytest.mark.parametrize(("page", "block", "argv"), RUNNABLE, ids=[f"{p}-line{b.line}-{' '.join(a)[:40]}" for p, b, a in RUNNABLE])
def test_command_on_a_sample_run_works(tmp_path: Path, page: str, block: Block, argv: list[str]) -> None:
    shutil.copytree(ROOT / "sample_runs", tmp_path / "sample_runs", ignore=shutil.ignore_patterns("__pycache__"))
    r = run_cli(*argv, cwd=tmp_path)
    assert r.returncode == 0, f"{page} line {block.line}: agent-supervisor {shlex.join(argv)}\n{r.stdout}{r.stderr}"


def test_the_readme_runs_a_sample_command() -> None:
    assert any(page == "README.md" for page, _, _ in RUNNABLE), "no ```sh block of the README runs a command on sample_runs/"


def test_the_readme_stays_a_page_a_newcomer_finishes() -> None:
    """The reference lives in docs/: the README says what it is, the two commands, three ways in, and links."""
    words = len(README.read_text().split())
    assert words < 1800, f"README.md has {words} words: move the reference into a page of docs/"


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a page (outside code blocks): lower case, punctuation dropped,
    spaces as hyphens, a repeated one numbered ``-1``, ``-2``..."""
    out: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6} (.*)$", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n, base = 0, a
            while a in out:
                n += 1
                a = f"{base}-{n}"
            out.add(a)
    return out


def links(page: Path) -> list[tuple[int, str]]:
    """The relative links of a page outside code blocks, with their line numbers."""
    out, fenced = [], False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced:
            out += [(n, m.group(1)) for m in _LINK.finditer(re.sub(r"`[^`]*`", "", line)) if "://" not in m.group(1)]
    return out


def test_anchor_rule() -> None:
    md = "# The SDK: `from supervisor import Run`\n\n```\n# not a heading\n```\n## Model calls: `llm.jsonl`\n## Notes\n## Notes\n"
    assert anchors(md) == {"the-sdk-from-supervisor-import-run", "model-calls-llmjsonl", "notes", "notes-1"}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_lead_somewhere(page: Path) -> None:
    bad = []
    for n, link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"line {n}: {link}: no file {path}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            bad.append(f"line {n}: {link}: no heading #{anchor} in {_name(target)}")
    assert not bad, f"{_name(page)}:\n" + "\n".join(bad)
