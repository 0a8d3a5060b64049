"""The workspace's ignore rules: ``.gitignore`` semantics, compiled to regexes once per scan.

What git does, for the patterns people write: comments and blank lines, ``!`` negation, a leading
``/`` (or any ``/`` but a trailing one) anchors a pattern to its ``.gitignore``'s directory, a trailing
``/`` matches directories only, ``*``, ``?``, ``[...]``, ``**/``, ``/**`` and ``/**/``; a pattern
without a slash matches a name at any depth below its ``.gitignore``. Nested ``.gitignore`` files apply
to their subtree; the last matching pattern wins, a deeper file's over a shallower one's, and the
``--workspace-ignore`` globs rank below every ``.gitignore`` (as git's ``info/exclude`` does). A directory
that is ignored is not descended into, so a negation cannot bring back a file inside it (git's rule).

The built-in rules (:data:`DEFAULTS`: ``.git/``, ``node_modules/`` ...), a virtual environment (a
directory holding ``pyvenv.cfg``) and the run directory when it lies inside the workspace are *hard*: no
negation brings them back (snapshotting the run directory into itself, or a virtualenv, is never wanted).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

DEFAULTS: tuple[str, ...] = (".git/", "node_modules/", "__pycache__/", ".venv/", "venv/")
"""Ignored in every workspace (and not negatable)."""

GITIGNORE = ".gitignore"
VENV_MARK = "pyvenv.cfg"
RUN_MARK = "run.json"


def _read_regular(path: Path) -> str | None:
    """A ``.gitignore``'s text: never through a link (nothing outside the workspace is read), never a FIFO
    (it would block); ``None`` if it is not a readable regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(1 << 22).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _declares(run_json: Path, root: Path) -> bool:
    """Whether ``run_json`` is a run directory's ``run.json`` that declares ``root`` as its workspace."""
    text = _read_regular(run_json)
    try:
        meta = orjson.loads(text) if text is not None else None
    except orjson.JSONDecodeError:
        return False
    ws = meta.get("workspace") if isinstance(meta, dict) else None
    return isinstance(ws, dict) and ws.get("root") == str(root)


class Rule(NamedTuple):
    """One compiled pattern: it matches a path relative to ``base`` (``""``: the root, else ``"dir/"``)."""

    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    base: str


Rules = tuple[Rule, ...]
"""The rules in force in one directory, lowest precedence first."""


def _class(pat: str, i: int) -> tuple[str, int] | None:
    """A ``[...]`` bracket expression starting at ``pat[i]``: its regex and the index after it (``None``:
    no closing bracket, so the ``[`` is literal)."""
    j = i + 1
    if j < len(pat) and pat[j] in "!^":
        j += 1
    if j < len(pat) and pat[j] == "]":
        j += 1
    while j < len(pat) and pat[j] != "]":
        j += 1
    if j >= len(pat):
        return None
    body = pat[i + 1 : j]
    neg = body[:1] in ("!", "^")
    if neg:
        body = body[1:]
    inner = "".join("\\" + c if c in "\\[]^" else c for c in body)
    return ("(?!/)[^" if neg else "(?!/)[") + inner + "]", j + 1


def translate(pat: str) -> str:
    """The regex (without anchors) of a gitignore pattern body (no leading ``/``, no trailing ``/``)."""
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i):
                j = i + 2
                if (i == 0 or pat[i - 1] == "/") and (j == n or pat[j] == "/"):
                    if j == n:  # a trailing "/**" (or "**" alone): everything inside
                        out.append(".*")
                        i = j
                    else:  # "**/": zero or more directories
                        out.append("(?:.*/)?")
                        i = j + 1
                    continue
                while j < n and pat[j] == "*":
                    j += 1
                out.append("[^/]*")  # other consecutive asterisks are a plain "*"
                i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            cls = _class(pat, i)
            if cls is not None:
                out.append(cls[0])
                i = cls[1]
                continue
            out.append(re.escape(c))
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_line(line: str, base: str = "") -> Rule | None:
    """One line of a ``.gitignore`` (or a ``--workspace-ignore`` glob) as a rule; ``None`` for a blank line
    or a comment. ``base``: the ``.gitignore``'s directory relative to the root, ``""`` or ``"a/b/"``."""
    line = line.rstrip("\r\n")
    if line.endswith(" ") and not line.endswith("\\ "):
        line = line.rstrip(" ")
        if line.endswith("\\"):
            line += " "
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate or line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    if not line:
        return None
    body = translate(line)
    regex = re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.DOTALL)
    return Rule(regex, negate, dir_only, base)


def compile_lines(lines: Sequence[str], base: str = "") -> Rules:
    """The rules of a file's lines (blank lines and comments dropped), in order."""
    return tuple(r for r in (compile_line(s, base) for s in lines) if r is not None)


def decide(rules: Rules, rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` is ignored by ``rules`` alone: the last rule that matches decides."""
    for r in reversed(rules):
        if r.dir_only and not is_dir:
            continue
        base = r.base
        if base:
            if not rel.startswith(base):
                continue
            sub = rel[len(base) :]
        else:
            sub = rel
        if r.regex.match(sub):
            return not r.negate
    return False


class Matcher:
    """The ignore rules of one workspace, read lazily: a directory's ``.gitignore`` when the walk (or a query)
    reaches it. ``extra``: the ``--workspace-ignore`` globs (relative to the root); ``hard``: relative paths
    of directories always ignored (the run directory when inside the root).

    A :class:`Matcher` does not see a ``.gitignore`` changed after it read it: make a new one then.
    """

    def __init__(self, root: Path, extra: Sequence[str] = (), hard: Sequence[str] = ()) -> None:
        self.root = root
        self.hard = compile_lines(DEFAULTS) + tuple(
            Rule(re.compile(re.escape(h.strip("/")) + r"\Z"), False, True, "") for h in hard if h.strip("/")
        )
        self.base_rules: Rules = compile_lines(extra)
        self._dirs: dict[str, tuple[bool, Rules]] = {}  # the cache of __call__: dir -> (ignored, its rules)

    def rules_in(self, rel_dir: str, parent: Rules) -> Rules:
        """The rules in force inside directory ``rel_dir`` (``""``: the root) whose parent's are ``parent``:
        those plus its own ``.gitignore``'s, if it has one."""
        path = self.root / rel_dir / GITIGNORE if rel_dir else self.root / GITIGNORE
        text = _read_regular(path)
        if text is None:
            return parent
        lines = text.splitlines()
        own = compile_lines(lines, rel_dir + "/" if rel_dir else "")
        return parent + own if own else parent

    def root_rules(self) -> Rules:
        """The rules in force in the root directory."""
        return self.rules_in("", self.base_rules)

    def is_ignored(self, rel: str, is_dir: bool, rules: Rules) -> bool:
        """Whether the entry ``rel`` of a directory that is not ignored (whose rules are ``rules``) is."""
        if decide(self.hard, rel, is_dir):
            return True
        return decide(rules, rel, is_dir)

    def special(self, rel_dir: str, names: Collection[str] | None) -> bool:
        """Whether directory ``rel_dir`` (holding ``names``; ``None``: not listed) is a virtual environment
        (it holds ``pyvenv.cfg``) or a run directory of this workspace (its ``run.json`` declares the root:
        the run's own, a fork's, any run the agent keeps inside its workspace)."""
        d = self.root / rel_dir
        if VENV_MARK in names if names is not None else os.path.exists(d / VENV_MARK):
            return True
        if names is not None and RUN_MARK not in names:
            return False
        return _declares(d / RUN_MARK, self.root)

    def _dir(self, rel_dir: str) -> tuple[bool, Rules]:
        """Whether directory ``rel_dir`` is ignored (itself or an ancestor), and the rules in force inside it."""
        got = self._dirs.get(rel_dir)
        if got is not None:
            return got
        if not rel_dir:
            got = (False, self.root_rules())
        else:
            parent, _, _ = rel_dir.rpartition("/")
            p_ignored, p_rules = self._dir(parent)
            if p_ignored or self.is_ignored(rel_dir, True, p_rules) or self.special(rel_dir, None):
                got = (True, p_rules)
            else:
                got = (False, self.rules_in(rel_dir, p_rules))
        self._dirs[rel_dir] = got
        return got

    def __call__(self, rel: str, is_dir: bool) -> bool:
        """Whether the relative path ``rel`` (``/``-separated) is ignored, its ancestors' rules included."""
        rel = rel.strip("/")
        if not rel:
            return False
        if is_dir:
            return self._dir(rel)[0]
        parent, _, _ = rel.rpartition("/")
        p_ignored, p_rules = self._dir(parent)
        return p_ignored or self.is_ignored(rel, False, p_rules)
