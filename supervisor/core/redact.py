"""Secrets never reach disk: redaction of serialised journal lines, checkpoints and logs."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

import orjson

REDACTED = b"[REDACTED]"
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET)$|PASSWORD|PASSWD|SECRET", re.IGNORECASE)
_TOKEN_MARKERS = (b"sk-", b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"AKIA", b"xox", b"Bearer ")
"""Every token shape below starts with one of these: a line without any is not scanned."""
_TOKEN_SHAPES = [
    rb"sk-[A-Za-z0-9_\-]{16,}",
    rb"gh[pousr]_[A-Za-z0-9]{20,}",
    rb"github_pat_[A-Za-z0-9_]{20,}",
    rb"AKIA[0-9A-Z]{16}",
    rb"xox[abpr]-[A-Za-z0-9\-]{10,}",
    rb"(?<=Bearer )[A-Za-z0-9._~+/\-]{8,}=*",
]
MIN_SECRET_LEN = 6
"""Shorter values are not redacted: replacing every ``1`` or ``true`` would garble the journal."""


def secret_env_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret."""
    env = os.environ if env is None else env
    return [v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN]


class Redactor:
    """Replaces secret values and token shapes in bytes with ``[REDACTED]``."""

    def __init__(self, values: Iterable[str] = (), *, from_env: bool = True) -> None:
        self._values: set[str] = set()
        if from_env:
            self._values.update(secret_env_values())
        self._values.update(v for v in values if len(v) >= MIN_SECRET_LEN)
        self._compile()

    def add(self, value: str) -> None:
        """Register one more secret value (e.g. a key read from a file)."""
        if len(value) >= MIN_SECRET_LEN and value not in self._values:
            self._values.add(value)
            self._compile()

    def _compile(self) -> None:
        alts: list[bytes] = []
        for v in sorted(self._values, key=len, reverse=True):
            alts.append(re.escape(v.encode()))
            escaped = orjson.dumps(v)[1:-1]  # as the value appears inside a JSON string
            if escaped != v.encode():
                alts.append(re.escape(escaped))
        self._re = re.compile(b"|".join(alts + _TOKEN_SHAPES))
        # one search for literal markers (a secret's first bytes, a token's prefix) is
        # several times cheaper than the full substitution; most lines have none
        markers = set(_TOKEN_MARKERS) | {v.encode()[:4] for v in self._values}
        self._prefilter = re.compile(b"|".join(re.escape(m) for m in sorted(markers)))

    def __call__(self, data: bytes) -> bytes:
        if self._prefilter.search(data) is None:
            return data
        return self._re.sub(REDACTED, data)
