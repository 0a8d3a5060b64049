"""agent.log sees every secret whole: across its 64 KiB line split, across read chunks, in the stderr tail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from supervisor.core.redact import Redactor
from supervisor.supervise.agentlog import MAX_HOLD, MAX_LINE, AgentLog

TOKEN = "sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzd"
VALUE = "correct horse battery staple 4711"  # a literal value: no token shape, spaces inside
PREFIX = re.compile(rb"^\S+ \[\d+:(stdout|stderr|supervisor)\] ")


def log_lines(path: Path, stream: str = "stdout") -> list[bytes]:
    out = []
    for line in path.read_bytes().splitlines():
        m = PREFIX.match(line)
        assert m, line[:80]
        if m.group(1) == stream.encode():
            out.append(line[m.end():])
    return out


def feed_all(log: AgentLog, data: bytes, chunk: int, stream: str = "stdout") -> None:
    for i in range(0, len(data), chunk):
        log.feed(stream, data[i : i + chunk])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("secret", [TOKEN, VALUE], ids=["token-shape", "literal-value"])
def test_a_secret_at_every_offset_across_the_line_split(tmp_path: Path, secret: str) -> None:
    sec = secret.encode()
    r = Redactor([VALUE], from_env=False)
    for off in range(MAX_LINE - len(sec) - 1, MAX_LINE + 2):
        line = b"x" * off + sec + b" " + b"y" * 3000
        data = line + b"\n" + b"q" * 100_000  # a second endless line: the split runs again
        # reads: the whole output at once; 4093-byte reads; and two reads, the first one ending inside the
        # secret past the split (only the first part of the secret has arrived when the line must be cut)
        inside = {max(MAX_LINE, off + 1), (max(MAX_LINE, off) + off + len(sec)) // 2, off + len(sec) - 1}
        feeds = [[data], [data[i : i + 4093] for i in range(0, len(data), 4093)]]
        feeds += [[data[:at], data[at:]] for at in sorted(inside) if MAX_LINE <= at < off + len(sec)]
        for n, chunks in enumerate(feeds):
            d = tmp_path / f"{off}-{n}"
            d.mkdir()
            log = AgentLog(d, redact=r, tee=False)
            log.begin_attempt(1, 1, ["agent"])
            for c in chunks:
                log.feed("stdout", c)
            log.close()
            raw = (d / "agent.log").read_bytes()
            assert sec not in raw
            # no piece of it either: the pieces, joined, are the line with the whole secret replaced
            pieces = log_lines(d / "agent.log")
            joined = b"".join(pieces)
            assert joined == b"x" * off + b"[REDACTED] " + b"y" * 3000 + b"q" * 100_000, (off, n)
            assert all(len(p) <= MAX_LINE for p in pieces)


def test_an_endless_secret_is_held_then_written_redacted(tmp_path: Path) -> None:
    r = Redactor(from_env=False)
    log = AgentLog(tmp_path, redact=r, tee=False)
    log.begin_attempt(1, 1, ["agent"])
    token = b"sk-" + b"A" * (3 * MAX_LINE)  # longer than a line: one piece once it ends
    feed_all(log, b"b" * 100 + token + b" tail\n", 8192)
    log.close()
    assert log_lines(tmp_path / "agent.log") == [b"b" * 100, b"[REDACTED] tail"]
    # past MAX_HOLD it is cut anyway (bounded memory)
    log = AgentLog(tmp_path, redact=r, tee=False)
    feed_all(log, b"sk-" + b"B" * (MAX_HOLD + 10), 65536)
    assert sum(len(s.partial) for s in log._streams.values()) < MAX_HOLD + MAX_LINE
    log.close()


def test_pem_key_split_across_reads_and_the_stderr_tail(tmp_path: Path) -> None:
    log = AgentLog(tmp_path, redact=Redactor(from_env=False), tee=False)
    log.begin_attempt(2, 1, ["agent", TOKEN])
    log.feed("stderr", b"loading key\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5v")
    log.feed("stderr", b"bmUAAAAEbm9uZQ\nQyNTUxOQAAACDy4cVkOV0Ic3Bbhc1o1b\n-----END OPENSSH PRIVATE KEY-----\n")
    log.feed("stderr", f"crash with {TOKEN}\n".encode())
    log.end_attempt()
    text = (tmp_path / "agent.log").read_bytes()
    for piece in (b"b3BlbnNzaC1y", b"bmUAAAAEbm9uZQ", b"QyNTUxOQAAACDy4", TOKEN.encode()):
        assert piece not in text
    assert log.stderr_tail() == ["loading key", "[REDACTED]", "[REDACTED]", "[REDACTED]", "[REDACTED]",
                                 "crash with [REDACTED]"]
    assert b"attempt 2 started, pid 1: agent [REDACTED]" in text
    log.close()


def test_a_value_learned_before_a_held_line_is_written_is_redacted(tmp_path: Path) -> None:
    """The supervisor drains the secrets pipe before it redacts: a value added late still covers held text."""
    r = Redactor(from_env=False)
    log = AgentLog(tmp_path, redact=r, tee=False)
    log.feed("stdout", b"value: late-value-123")  # held: no newline yet
    r.add("late-value-123")
    log.feed("stdout", b" end\n")
    log.close()
    assert log_lines(tmp_path / "agent.log") == [b"value: [REDACTED] end"]
