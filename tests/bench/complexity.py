"""The figures issue 22 set for the package's rooms: functions over cyclomatic complexity 15 and 30, the longest
functions, ``type: ignore`` comments and modules over 800 lines (radon's numbers, not a test).

    .venv/bin/pip install radon && .venv/bin/python tests/bench/complexity.py [-v]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PKG = ROOT / "supervisor"


def functions() -> list[tuple[int, int, str]]:
    """(complexity, lines, where) of every function and method, each once (radon lists methods twice)."""
    out = subprocess.run([sys.executable, "-m", "radon", "cc", "-j", str(PKG)], capture_output=True, text=True, check=True)
    seen: set[tuple[str, int]] = set()
    fns: list[tuple[int, int, str]] = []

    def walk(f: str, blocks: list[dict[str, Any]]) -> None:
        for b in blocks:
            if b["type"] in ("function", "method") and (f, b["lineno"]) not in seen:
                seen.add((f, b["lineno"]))
                where = f"{Path(f).relative_to(ROOT)}:{b['lineno']} {b.get('classname') or ''}.{b['name']}"
                fns.append((b["complexity"], b["endline"] - b["lineno"] + 1, where))
            walk(f, b.get("closures", []) + (b.get("methods", []) if b["type"] == "class" else []))

    for f, blocks in json.loads(out.stdout).items():
        if isinstance(blocks, list):
            walk(f, blocks)
    return fns


def main() -> None:
    fns = functions()
    over15 = sorted((x for x in fns if x[0] > 15), reverse=True)
    print("functions over CC 15:", len(over15), " over 30:", sum(1 for x in fns if x[0] > 30))
    print("longest functions:", *(f"{n} lines {w} (cc {c})" for c, n, w in sorted(fns, key=lambda x: -x[1])[:5]), sep="\n  ")
    files = sorted(PKG.rglob("*.py"))
    print("type: ignore:", sum(p.read_text().count("type: ignore") for p in files))
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in files]
    print("modules over 800 lines:", sorted((s for s in sizes if s[0] > 800), reverse=True))
    print("package lines:", sum(s[0] for s in sizes))
    if "-v" in sys.argv:
        for c, n, w in over15:
            print(f"  cc {c:3d} {n:4d} lines {w}")


if __name__ == "__main__":
    main()
