"""The resume view's read tells overlapping steps from the lines it splits (``ResumeView.overlaps``) exactly as
the wire's ``OVERLAP`` rule tells them from the file's bytes, whatever the chunking; a map the read did not
cover to its end is left to the regex."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from supervisor.core import journal_reader as journal
from supervisor.core import wire
from supervisor.core.history import Fold
from supervisor.core.records import LazyRecord

KINDS = [
    b'{"kind":"begin","step":"a","pos":1}',
    b'{"kind":"step","step":"a","pos":1,"output":1}',
    b'{"kind":"start","attempt":2}',
    b'{"kind":"rollback","checkpoint":"c"}',
    b'{"kind":"note","message":"x"}',
    b'{"kind":"step","step":"a","pos":1,"error":{"type":"E"}}',
    b"",
    b'{"kind":"be',
]


def _regex(m: Any) -> bool:
    return wire.overlaps(m)


def test_the_reads_answer_is_the_regexs(tmp_path: Path) -> None:
    rng = random.Random(15)
    registered = 0
    for trial in range(400):
        lines = rng.choices(KINDS, [5, 5, 1, 1, 1, 1, 0.3, 0.2], k=rng.randint(1, 12))
        run = tmp_path / f"r{trial}"
        run.mkdir()
        (run / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        for chunk in (8, 64, 1 << 20):
            view = journal.JournalReader(run, chunk=chunk).resume_view()
            for m in {e.src for e in view.entries if type(e) is LazyRecord}:
                got = view.overlaps.get(m)
                assert got is not None, (chunk, lines)
                registered += 1
                assert got == _regex(m), (chunk, lines)
    assert registered > 500


def test_a_map_longer_than_the_read_is_left_to_the_regex(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    # a torn tail after the last whole line: the map holds it, the read stops before it
    (run / "journal.jsonl").write_bytes(b'{"kind":"step","step":"a","pos":0}\n{"kind":"begin","step":"b","pos":1}\n{"kind":"st')
    view = journal.JournalReader(run).resume_view()
    (m,) = {e.src for e in view.entries if type(e) is LazyRecord}
    assert view.overlaps.get(m) is None
    assert _regex(m) is True  # the regex sees the torn line after the begin, as before
    f = Fold()
    f.extend(view.entries, view.overlaps)
    assert f.history.concurrent is True  # and the fold asks it
