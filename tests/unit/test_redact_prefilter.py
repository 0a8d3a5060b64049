"""The redaction prefilter's gate (a skeleton of the line, memoised) answers exactly as the prefilter regex did.

The reference is the prefilter as it was written before the gate (one regex of hand-pinned anchors, kept
here verbatim): on every anchor word in every form, on every one-byte edit of them, on random data built
from the anchors' bytes, and on journal lines, ``Redactor._hit`` must say what the reference says.
"""

from __future__ import annotations

import itertools
import random
import re

import orjson
import pytest

from supervisor.core import redact
from supervisor.core.redact import SHAPES, Redactor, _word

_CI_API = rb"[Aa][Pp][Ii]"
REFERENCE_ANCHORS = [
    rb"k-", rb"_(?<=gh[pousr]_)", rb"_(?<=hub_pat_)", rb"AKIA", rb"xox", rb"AIza", rb"_(?<=hf_)",
    rb"_(?:(?<=k_live_)|(?<=k_test_))", rb"glpat-", rb"_(?<=gsk_)", rb"_(?<=npm_)", rb"ypi-", rb"J(?<=eyJ)", rb"@",
    rb"zation", rb"ZATION",
    *(k + rb"(?:(?<=" + _CI_API + k + rb")|(?<=" + _CI_API + rb"[-_]" + k + rb"))" for k in (b"key", b"Key", b"KEY")),
    rb"Bearer ",
]
VALUES = ["registered-secret-42", "correct horse battery staple", "deadbeef0123", "[x]y\x00z-9", "pässwort-1"]
SETS = pytest.mark.parametrize("values", [VALUES[:2], VALUES], ids=["values", "hex-only value"])


def reference(r: Redactor) -> re.Pattern[bytes]:
    literals = [re.escape(v[:4]) for v in r._literals]
    return re.compile(redact._first_byte_groups(REFERENCE_ANCHORS + [redact._PEM_MARK] + literals))


def expansions() -> list[bytes]:
    words = [_word(a) for s in SHAPES for a in s.anchors] + [tuple(bytes([b]) for b in redact._PEM_MARK)]
    return [bytes(p) for w in words for p in itertools.product(*w)]


def check(r: Redactor, ref: re.Pattern[bytes], data: bytes) -> None:
    want = ref.search(data) is not None
    assert (r._hit(data) is not None) is want, data
    assert (r._hit(data) is not None) is want, data  # again, from the memo
    if not want:
        assert r(data) is data


@SETS
def test_every_anchor_and_every_one_byte_edit_of_it(values: list[str]) -> None:
    # (a value of hex digits only makes skeletons keep them: the gate then has no word with a byte choice cut)
    r = Redactor(values, from_env=False)
    ref = reference(r)
    words = expansions() + [v[:4] for v in r._literals]
    alphabet = sorted({b for w in words for b in w} | set(b"0a9f\"\n"))
    for w in words:
        assert ref.search(w) is not None and r._hit(w) is not None, w
        for ctx in (b"", b'{"k":"', b"x", b"0" * 3):
            check(r, ref, ctx + w + ctx)
        for i in range(len(w) + 1):
            for b in alphabet:
                check(r, ref, w[:i] + bytes([b]) + w[i + 1 :])  # a byte replaced (or one added at the end)
                check(r, ref, w[:i] + bytes([b]) + w[i:])  # a byte inserted
            check(r, ref, w[:i] + w[i + 1 :])  # a byte deleted


@SETS
def test_random_data_from_the_anchors_bytes(values: list[str]) -> None:
    r = Redactor(values, from_env=False)
    ref = reference(r)
    pieces = expansions() + [b"_", b"-", b"k", b"e", b"y", b"a", b"0", b"f", b"\n", b'"', b"api", b"gh", b"hub", b"AI"]
    rng = random.Random(1234)
    for _ in range(12000):
        data = b"".join(rng.choice(pieces)[: rng.randint(0, 6)] for _ in range(rng.randint(0, 12)))
        check(r, ref, data)


def test_journal_lines_that_differ_only_in_numbers_share_a_memo_entry() -> None:
    r = Redactor(VALUES[:2], from_env=False)  # (a value of hex digits only makes skeletons keep them)
    ref = reference(r)
    for i in range(200):
        rec = {"kind": "step", "step": "work", "pos": i, "inputs": {"args": [i]}, "inputs_hash": f"{i * 7919:016x}",
               "output": {"value": i}, "dur_ms": i / 7, "key": f"run:{i}", "seq": 2 * i, "id": f"f83e9{i:x}",
               "ts": f"2026-11-30T16:22:{i % 60:02d}.{i:03d}Z"}
        check(r, ref, orjson.dumps(rec))
    assert len(r._memo) <= 3  # the numbers, hex ids and times are not in the skeleton
    secret = orjson.dumps({"kind": "step", "output": "Bearer abcdef1234567890", "seq": 1})
    assert b"abcdef1234567890" not in r(secret)


def test_a_secret_learned_later_is_seen_in_a_line_whose_skeleton_was_remembered() -> None:
    r = Redactor(from_env=False)
    line = b'{"output":"id 0123456789abcdef","seq":1}'
    assert r(line) is line
    r.add("0123456789abcdef")  # hex only: a skeleton must now keep those bytes
    assert b"0123456789abcdef" not in r(line)
    ref = reference(r)
    for data in (line, line.replace(b"0123", b"0124"), b"0123", b"x0123y"):
        check(r, ref, data)
