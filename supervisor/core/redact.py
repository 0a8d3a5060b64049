"""Secrets never reach disk: redaction of serialised journal lines, checkpoints, logs and command lines.

What is redacted (replaced by ``[REDACTED]``):

- literal values: environment variables whose names look secret, ``secrets=`` and
  ``add_secret`` values (also as they appear inside a JSON string), at least
  ``MIN_SECRET_LEN`` characters long;
- token shapes (``SHAPES``): API keys of common providers, JWTs, PEM private keys,
  the password of ``scheme://user:password@host``, ``Authorization:`` and ``x-api-key:``
  header values;
- the value after a credential name (``_KV_NAMES``: ``password``, ``secret``, ``token``, ``cookie``, ...,
  also ending a longer name: ``client_secret``, ``x-auth-token``), the name kept: ``name=V``, ``name: V``,
  a header line, ``"name": "V"`` in JSON (a dict key of structured data: the redactor runs on the encoded
  line), a state patch's ``"path":"/name","value":"V"``. A match never runs across a JSON string's end, so
  a redacted journal line or checkpoint stays the same JSON.

Speed: ``Redactor`` runs on every journal line the SDK writes and on every chunk
of agent output, and almost none holds a secret. A prefilter rejects such data: it
looks for anchor words (``Shape.anchors``, the PEM mark, the first bytes of each
literal value, the credential names), one of which every secret contains; only the lines around a hit go
through the full substitution (the values' regex, then the shapes'). Python's regex engine steps every byte of a line
(several ns a byte), so the prefilter has a gate in front with the same answer
whenever it says no: the line's *skeleton* (one ``bytes.translate`` at C speed
deletes the bytes no anchor needs, digits and hex letters among them, so the
skeleton of a journal line does not change with its seq, id, time or hashes) is
looked up in a small memo of skeletons known to hold no anchor's skeleton. A word
present in the data leaves its skeleton in the data's skeleton, so a skeleton
without any is a line without any anchor; the regex runs only behind a gate that
says maybe.

The values ``add_secret`` learns in the agent's process reach the supervisor
(which writes ``agent.log`` and ``supervisor.jsonl``) through a pipe
(``send_secrets``; the supervisor's end is ``supervisor.supervise.secrets``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import orjson

REDACTED = b"[REDACTED]"
REDACTED_STR = REDACTED.decode()
ENV_SECRETS_FD = "AGENT_SUPERVISOR_SECRETS_FD"
"""The write end of the pipe to the supervisor: one JSON string per line, each a secret value."""
MIN_SECRET_LEN = 6
"""Shorter values are not redacted: replacing every ``1`` or ``true`` would garble the journal."""
_SECRET_NAME = re.compile(r"(?:_KEY|APIKEY|(?:^|_)(?:TOKEN|COOKIE|AUTHORIZATION)|_PWD)$|PASSWORD|PASSWD|SECRET", re.IGNORECASE)
"""A secret-looking environment variable's name (``PWD`` alone is the working directory)."""


@dataclass(frozen=True)
class Shape:
    """A token shape: its ``patterns`` and the prefilter ``anchors`` they contain.

    An anchor is a word every match of a pattern holds: bytes, where ``[..]`` is one byte among those listed.

    Each pattern starts with a literal byte (the regex engine then tests one
    byte per position instead of trying every alternative: the full regex runs
    about as fast as the prefilter). A group named ``s`` is the secret part; the
    rest of the match is kept (``Authorization: Bearer ``). Without it, the whole match is redacted.
    """

    name: str
    patterns: tuple[bytes, ...]
    anchors: tuple[bytes, ...]


def _ci(word: bytes) -> bytes:
    return b"".join(b"[%s%s]" % (bytes([c]).upper(), bytes([c]).lower()) if chr(c).isalpha() else re.escape(bytes([c])) for c in word)


_SP = rb"(?:[ \t]|\\{1,8}t){0,16}"
"""Spaces and tabs, also a tab as a JSON string writes it (``\t``, and ``\\t`` in a JSON text inside one)."""
_EQ = _SP + rb"[:=]" + _SP
"""Between a name and its value: ``=``, ``:``, `` = ``, a header's ``: ``."""
_Q0 = rb'(?:[^"\\\r\n]|\\.)+'
"""The inside of a ``"..."`` string, its escapes taken whole (a journal line stays valid JSON)."""
_Q1 = rb'(?:[^"\\\r\n]|\\\\(?:\\["\\]|[^"\\])|\\[^"\\nr])+'
"""The inside of a ``\"...\"`` string: a JSON text inside a JSON string (its ``\\\"`` is the inner text's escaped quote)."""
_Q2 = rb'[^"\\\r\n]+'
"""Deeper still (``\\\"...\\\"``): up to the first backslash."""
_QS = rb"(?:[^'\"\\\r\n]|\\[^nr])+"
"""The inside of a ``'...'`` string (never a ``"``: a match never runs across a JSON string's end)."""
_BARE_CHAR = rb"[^\s\"'\\,;&]"
_BARE = rb"(?:[A-Za-z][A-Za-z0-9_.\-]{0,64}:[ \t]+)*" + _BARE_CHAR + rb"+"
"""An unquoted value: one word, and the next one while a word is a header's name (``k = x-api-key: V``: all of it)."""
_LINE_REST = rb'[^\r\n"\\]+'
"""A cookie header's value: the rest of the line (``a=1; session=...``)."""
_NULLISH = rb"(?!(?i:none|null|nil|true|false|undefined)(?!" + _BARE_CHAR + rb"))"
_FIRST_Q0 = rb'(?=[^"\\\r\n,:}\] \t])'
"""After ``name=`` a ``"`` opens a value only if what follows cannot be JSON after a string's end (``"k":"password=","v":1``)."""


def _tail(lead: bytes = b"", header: bool = False) -> bytes:
    """What follows a credential name: a separator, then its value (group ``s``; ``lead`` is kept before it).

    A quoted name takes a value quoted the same way (``"name": "V"``, ``\"name\": \"V\"``, ``'name': 'V'``,
    a JSON patch's ``"path":"/name","value":"V"``), never a number, ``null`` or an object (``"max": 5``
    stays JSON); an unquoted name takes a quoted or a bare value (``name=V``, ``name = 'V'``, ``Name: V``).
    With ``header``, a bare value after ``:`` is the rest of the line (``Cookie: a=1; session=V``).
    """

    def val(q: bytes) -> bytes:
        return lead + rb"(?P<s>" + q + rb")"

    patch0 = _SP + rb"," + _SP + rb'"value"' + _EQ
    patch1 = _SP + rb"," + _SP + rb'\\"value\\"' + _EQ
    unquoted = (
        rb'\\\\\\"' + val(_Q2),
        rb'\\"' + val(_Q1),
        rb"'" + val(_QS),
        rb'"' + _FIRST_Q0 + val(_Q0),
        lead + _NULLISH + rb"(?P<s>" + _BARE + rb")",
    )
    line = (_SP + rb":" + _SP + lead + _NULLISH + rb"(?P<s>" + _LINE_REST + rb")",) if header else ()
    return rb"(?:" + b"|".join((
        rb'"(?:' + _EQ + rb"|" + patch0 + rb')"' + val(_Q0),
        rb'\\"(?:' + _EQ + rb"|" + patch1 + rb')\\"' + val(_Q1),
        rb'\\\\\\"' + _EQ + rb'\\\\\\"' + val(_Q2),
        rb"'" + _EQ + rb"'" + val(_QS),
        *line,
        _EQ + rb"(?:" + b"|".join(unquoted) + rb")",
    )) + rb")"


_KV_NAMES: tuple[tuple[bytes, ...], ...] = (
    (b"password",), (b"passwd",), (b"pwd",), (b"secret",), (b"token",), (b"cookie",),
    (b"private", b"key"), (b"access", b"key"), (b"secret", b"key"),
)
"""Credential names whose value is redacted in ``name=V``, ``name: V``, ``"name": "V"`` forms, the name kept.

A name ends the word it is in and may end a longer one: ``client_secret``, ``x-auth-token``, ``accessToken``,
``aws_secret_access_key``, ``set-cookie``, ``DB_PASSWORD`` (``api_key`` and ``authorization`` are shapes of
their own; ``token`` ends only the names of :data:`_TOKEN_KINDS`). ``tokens``, ``input_tokens``, ``secret_santa``,
``token_count``, ``next_page_token`` are not names.
"""
_AFTER_NAME = b"\"'\\ \t:="
"""The byte after a name in every form (the prefilter's words end with one of them: ``tokens`` is no word)."""


def _name_ends(parts: tuple[bytes, ...]) -> list[bytes]:
    """Lookbehinds saying ``parts`` (any case, ``-``, ``_`` or nothing between) end here, at a word's start:
    after no letter or digit, after a ``\\n``/``\\t`` escape, or at a camelCase hump (``clientSecret``)."""
    out = []
    for join in (b"[-_]", b"") if len(parts) > 1 else (b"",):
        body = join.join(_ci(p) for p in parts)
        hump = parts[0][:1].upper() + _ci(parts[0][1:]) + b"".join(join + _ci(p) for p in parts[1:])
        out.append(rb"(?<=" + body + rb")(?:(?<![A-Za-z0-9]" + body + rb")|(?<=\\[nrt]" + body + rb"))")
        out.append(rb"(?<=[a-z0-9]" + hump + rb")")
    return out


_TOKEN_KINDS = (b"access", b"refresh", b"id", b"auth", b"api", b"bearer", b"session", b"security", b"csrf", b"xsrf",
                b"oauth", b"x")
"""The words before ``token`` that make a credential's name of it (``access_token``, ``x-auth-token``,
``sessionToken``, ``aws_session_token``), as ``token`` alone is one and so is an upper-case ``NAME_TOKEN`` (an
environment's ``GITHUB_TOKEN``). Other names ending in ``token`` are data a resumed agent needs back as it was
written, never redacted: a cursor (``next_page_token``, ``nextPageToken``), a tokenizer's ``eos_token``."""


def _token_ends() -> list[bytes]:
    """:func:`_name_ends` for ``token``: the name alone (not ending a longer one), after a word of
    :data:`_TOKEN_KINDS`, or ``_TOKEN`` ending an upper-case name."""
    t = _ci(b"token")
    out = [rb"(?<=" + t + rb")(?:(?<![A-Za-z0-9_\-.]" + t + rb")|(?<=\\[nrt]" + t + rb"))"]
    for kind in _TOKEN_KINDS:
        out += _name_ends((kind, b"token"))
    out.append(rb"(?<=[A-Z0-9]_TOKEN)")
    return out


def _kv_patterns() -> tuple[bytes, ...]:
    """One pattern per last byte of the names (its two cases): the byte, the lookbehinds, the value."""
    ends: dict[bytes, list[bytes]] = {}
    for parts in _KV_NAMES:
        behind = _token_ends() if parts == (b"token",) else _name_ends(parts)
        if parts == (b"pwd",):  # PWD=~/project (an environment's dump) is the working directory
            behind = [rb"(?:" + b"|".join(behind) + rb")(?!(?:\\*[\"'])?" + _EQ + rb"(?:\\*[\"'])?[/~])"]
        ends.setdefault(parts[-1][-1:], []).extend(behind)
    out = []
    for last, behind in ends.items():
        tail = _tail(header=last == b"e")  # cookie: the whole header line
        # the byte after the name first: a common letter ends many words, few of them names
        out += [c + rb"(?=[\"'\\ \t:=])(?:" + b"|".join(behind) + rb")" + tail for c in (last, last.upper())]
    return tuple(out)


def _kv_words() -> list[tuple[bytes, ...]]:
    """The prefilter's words for the names: each part lower case with a Title initial, or UPPER case (``token``,
    ``Token``, ``TOKEN``, ``clientSecret``, ``Private-Key``, ``PRIVATE_KEY``), then a byte of ``_AFTER_NAME``."""

    def lower(p: bytes) -> tuple[bytes, ...]:
        return (p[:1] + p[:1].upper(), *(bytes([c]) for c in p[1:]))

    out: list[tuple[bytes, ...]] = []
    for parts in _KV_NAMES:
        for case in (lower, lambda p: tuple(bytes([c]) for c in p.upper())):
            for sep in ((b"-_",), ()) if len(parts) > 1 else ((),):
                out.append(case(parts[0]) + sum((sep + case(p) for p in parts[1:]), ()) + (_AFTER_NAME,))
    return out


_KEYS = (b"key", b"Key", b"KEY")
SHAPES: tuple[Shape, ...] = (
    Shape("openai", (rb"sk-[A-Za-z0-9_\-]{16,}",), (b"k-",)),
    Shape("github", (rb"gh[pousr]_[A-Za-z0-9]{20,}",), (b"gh[pousr]_",)),
    Shape("github_pat", (rb"github_pat_[A-Za-z0-9_]{20,}",), (b"hub_pat_",)),
    Shape("aws", (rb"AKIA[0-9A-Z]{16}",), (b"AKIA",)),
    Shape("slack", (rb"xox[abpr]-[A-Za-z0-9\-]{10,}",), (b"xox",)),
    Shape("google", (rb"AIza[0-9A-Za-z_\-]{30,}",), (b"AIza",)),
    Shape("huggingface", (rb"hf_[A-Za-z0-9]{30,}",), (b"hf_",)),
    Shape("stripe", (rb"sk_(?:live|test)_[A-Za-z0-9]{10,}", rb"rk_(?:live|test)_[A-Za-z0-9]{10,}"),
          (b"k_live_", b"k_test_")),
    Shape("gitlab", (rb"glpat-[A-Za-z0-9_\-]{20,}",), (b"glpat-",)),
    Shape("groq", (rb"gsk_[A-Za-z0-9]{20,}",), (b"gsk_",)),
    Shape("npm", (rb"npm_[A-Za-z0-9]{30,}",), (b"npm_",)),
    Shape("pypi", (rb"pypi-[A-Za-z0-9_\-]{50,}",), (b"ypi-",)),
    Shape("jwt", (rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",), (b"eyJ",)),
    # scheme://user:PASSWORD@host: only the password (the user and host say where it went)
    Shape("url_password", (rb"://[^\s/:@\"'\\?#]{0,256}:(?P<s>[^\s/@\"'\\?#]{1,256})(?=@)",), (b"@",)),
    Shape(
        "authorization",
        tuple(
            z + rb"(?<=" + _ci(b"authori") + z + rb")" + _tail(lead=rb"(?:(?i:bearer|basic|token|digest)[ \t]+)?")
            for z in (b"zation", b"ZATION")
        ),
        (b"zation", b"ZATION"),
    ),
    Shape(  # x-api-key, x-goog-api-key, api_key, apikey, API_KEY=
        "api_key",
        tuple(
            k + rb"(?:(?<=" + _ci(b"api") + k + rb")|(?<=" + _ci(b"api") + rb"[-_]" + k + rb"))" + _tail()
            for k in _KEYS
        ),
        tuple(b"[Aa][Pp][Ii]" + sep + k for k in _KEYS for sep in (b"", b"[-_]")),
    ),
    Shape("bearer", (rb"Bearer (?P<s>[A-Za-z0-9._~+/\-]{8,}=*)",), (b"Bearer ",)),
)
"""The token shapes (redacted after the literal values, which have a regex of their own: the longest first)."""
_KV_PATTERNS = _kv_patterns()


@functools.cache
def _shapes_re() -> re.Pattern[bytes]:
    """The token shapes and the credential names in one regex (each secret group named apart), compiled on first use."""
    n = itertools.count()
    alts = [re.sub(rb"\(\?P<s>", lambda _: b"(?P<s%d>" % next(n), p) for s in SHAPES for p in s.patterns]
    alts += [re.sub(rb"\(\?P<s>", lambda _: b"(?P<s%d>" % next(n), p) for p in _KV_PATTERNS]
    return re.compile(_first_byte_groups(alts, keep_order=True))


_KV_WORDS = _kv_words()
_NAME_REACH = 24
"""How far before a match the name its lookbehind reads may start (``private-key`` and a byte before it)."""

_PEM_MARK = b"PRIVATE KEY-----"
_PEM_CHAR = rb"(?:[A-Za-z0-9+/= \t\r:,.\-]|\\[nrt])"
"""What a PEM body holds: base64, its ``Proc-Type:``/``DEK-Info:`` headers, and newlines (raw or JSON-escaped)."""
_PEM = re.compile(
    rb"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?:" + _PEM_CHAR + rb"{0,65536}?-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----"
    rb"|(?P<open>" + _PEM_CHAR + rb"*))"
)
"""A private key, up to its END line; without one, as far as PEM characters go (``open``: the key goes on)."""
_PEM_END = re.compile(rb"^" + _PEM_CHAR + rb"*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_BODY = re.compile(rb"[A-Za-z0-9+/=]*\r?|(?:Proc-Type|DEK-Info|Comment): [^\r]*\r?")
"""A line of a key's body in a stream: base64, or one of its headers (text after a cut-short key is not)."""
MAX_SHAPE_LEN = 8192
"""Longest token shape a stream must see whole before it may cut a long line (JWTs are the long ones)."""


def secret_env_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret."""
    env = os.environ if env is None else env
    return [v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN]


def _first_byte_groups(fragments: Iterable[bytes], *, keep_order: bool = False) -> bytes:
    """``ab|ac|d`` -> ``a(?:b|c)|d``: one branch per first byte, so a position costs one byte test, not one per pattern.

    Alternatives with different first bytes never match at the same position, so
    grouping keeps the regex's meaning if the order within a group is kept.
    """
    groups: dict[bytes, list[bytes]] = {}
    for f in fragments:
        head = f[:2] if f.startswith(b"\\") else f[:1]
        assert head and head not in (b"(", b"[", b"."), f  # a literal first byte (see Shape)
        tails = groups.setdefault(head, [])
        if f[len(head):] not in tails:
            tails.append(f[len(head):])
    parts = []
    for head, tails in groups.items() if keep_order else sorted(groups.items()):
        if b"" in tails and not keep_order:
            parts.append(head)  # one anchor is the bare byte: the others add nothing
        else:
            parts.append(head + b"(?:" + b"|".join(tails if keep_order else sorted(tails)) + b")")
    return b"|".join(parts)


Word = tuple[bytes, ...]
"""An anchor word: at each position, the bytes that may be there (one, or the choice of a ``[..]``)."""


def _word(anchor: bytes) -> Word:
    """``b"gh[pousr]_"`` -> ``(b"g", b"h", b"pousr", b"_")``."""
    out: list[bytes] = []
    i = 0
    while i < len(anchor):
        if anchor[i : i + 1] == b"[":
            j = anchor.index(b"]", i)
            out.append(anchor[i + 1 : j])
            i = j + 1
        else:
            out.append(anchor[i : i + 1])
            i += 1
    return tuple(out)


_COMMON = b'"0123456789:,.{} etaoinsrhldcumf-pgwybv[]/kETAOINSRHLDCUMFPGWYBV_xjqzKXJQZ'
"""Bytes from the most common in journal lines and text to the rarest (a byte not here is rarer still)."""
_HEX = frozenset(b"0123456789abcdef")
"""Bytes a skeleton never keeps unless an anchor needs them: the digits and hex of seq, ids, times and hashes."""
_SAME = bytes(range(256))
"""``translate``'s table that changes nothing (it deletes faster with a table than with none)."""
MEMO_SIZE = 512
"""Skeletons remembered (then forgotten all at once); a skeleton longer than ``MEMO_KEY_MAX`` is not kept."""
MEMO_KEY_MAX = 4096


def _rarity(c: int) -> int:
    i = _COMMON.find(bytes([c]))
    return len(_COMMON) if i < 0 else i


def _choice(c: bytes) -> bytes:
    return re.escape(c) if len(c) == 1 else b"[" + b"".join(re.escape(bytes([b])) for b in sorted(set(c))) + b"]"


def _pinned(words: Iterable[Word]) -> re.Pattern[bytes]:
    """A regex that finds any of ``words``, each from its rarest single byte (the bytes after it, then a lookbehind
    over the whole word), so the engine tests one byte per position and tries a word only where its rarest byte is."""
    frags: list[bytes] = []
    todo = list(words)
    while todo:
        w = todo.pop()
        singles = [i for i, c in enumerate(w) if len(c) == 1]
        if not singles:  # every position a choice: one word per byte of the narrowest
            k = min(range(len(w)), key=lambda i: len(w[i]))
            todo.extend(w[:k] + (bytes([b]),) + w[k + 1 :] for b in w[k])
            continue
        j = max(singles, key=lambda i: (_rarity(w[i][0]), -i))
        # the bytes after it first (a literal that fails costs less than a lookbehind), then those before it
        look = b"(?<=" + b"".join(map(_choice, w)) + b")" if j else b""
        frags.append(re.escape(w[j]) + b"".join(map(_choice, w[j + 1 :])) + look)
    return re.compile(_first_byte_groups(frags))


def _skeleton_gate(words: list[Word]) -> tuple[bytes, re.Pattern[bytes]]:
    """The bytes a skeleton deletes, and the regex of the words' skeletons (see the module's docstring).

    A word present in some data is present in its skeleton with the same bytes deleted: contiguous still,
    as only the word's own bytes lay between. A position whose choice lost some bytes (``[Aa]``, ``a`` being
    hex) may be gone from the skeleton: both forms are looked for. Every word keeps at least one position whole
    (its bytes are kept if not), so no skeleton of a word is empty.
    """
    keep = _kept_bytes(words)
    skeletons: list[Word] = []
    for w in words:
        skeletons.extend(_skeleton_forms(w, keep))
    return bytes(b for b in range(256) if b not in keep), _pinned(skeletons)


def _kept_bytes(words: list[Word]) -> set[int]:
    """The bytes skeletons keep: every byte of the words but hex digits, and all of a word's if none of it is whole."""
    keep = {b for w in words for c in w for b in c} - _HEX
    grown = True
    while grown:
        grown = False
        for w in words:
            if not any(keep.issuperset(c) for c in w):
                keep.update(b for c in w for b in c)
                grown = True
    return keep


def _skeleton_forms(w: Word, keep: set[int]) -> list[Word]:
    """The skeletons of one word: a position that lost some of its choices may be there or gone."""
    forms: list[Word] = [()]
    for c in w:
        kept = bytes(b for b in c if b in keep)
        if len(kept) == len(c):
            forms = [f + (kept,) for f in forms]
        elif kept:
            forms = [f + (kept,) for f in forms] + forms
    return forms


@dataclass
class StreamState:
    """What a line-oriented stream carries from one chunk to the next: inside a PEM private key or not."""

    in_pem: bool = False


class Redactor:
    """Replaces secret values and token shapes in bytes with ``[REDACTED]``.

    ``redactor(data)`` redacts one complete piece of data (a journal line, a
    checkpoint); ``redact_stream(data, state)`` redacts whole lines of a stream
    whose PEM keys may span chunks.
    """

    def __init__(self, values: Iterable[str] = (), *, from_env: bool = True) -> None:
        self._values: dict[str, None] = {}  # ordered: send_secrets sends them in the order given
        if from_env:
            for v in secret_env_values():
                self._values.setdefault(v, None)
        for v in values:
            if len(v) >= MIN_SECRET_LEN:
                self._values.setdefault(v, None)
        self._compile()

    @property
    def values(self) -> list[str]:
        """The literal secret values known (those long enough to be redacted)."""
        return list(self._values)

    def overlap(self) -> int:
        """How much text a stream must see past a cut to know no secret runs across it."""
        return max(MAX_SHAPE_LEN, self.max_literal)

    def add(self, value: str) -> bool:
        """Register one more secret value (e.g. a key read from a file); ``True`` if it is new."""
        if len(value) < MIN_SECRET_LEN or value in self._values:
            return False
        self._values[value] = None
        self._compile()
        return True

    def _compile(self) -> None:
        literals: set[bytes] = set()
        for v in self._values:
            raw = os.fsencode(v)
            literals.add(raw)
            with contextlib.suppress(orjson.JSONEncodeError):  # a lone surrogate has no JSON form
                literals.add(orjson.dumps(v)[1:-1])  # as the value appears inside a JSON string
            # a multi-line value printed to a stream is redacted line by line: each long-enough line is a secret too
            literals.update(p for p in raw.replace(b"\r", b"\n").split(b"\n") if len(p) >= MIN_SECRET_LEN)
        ordered = sorted(literals, key=len, reverse=True)  # the longest first: a value containing another
        self._literals = ordered
        self.max_literal = len(ordered[0]) if ordered else 0
        # the values' regex only: the shapes' (large, the same for every redactor) is compiled once
        self._re = re.compile(_first_byte_groups([re.escape(v) for v in ordered], keep_order=True)) if ordered else None
        words = [_word(a) for s in SHAPES for a in s.anchors]
        words += [tuple(bytes([b]) for b in a) for a in [_PEM_MARK] + [v[:4] for v in ordered]]
        words += _KV_WORDS
        self._prefilter = _pinned(words)
        delete, gate = _skeleton_gate(words)
        self._memo: dict[bytes, bool] = {}  # skeleton -> whether an anchor's skeleton is in it
        # one attribute, replaced whole: a thread redacting while add() compiles sees one generation
        self._gate = (delete, gate, self._memo, self._prefilter)

    def _hit(self, data: bytes) -> re.Match[bytes] | None:
        """The first anchor in ``data`` (``self._prefilter.search(data)``), the regex run only if the
        skeleton's gate says maybe."""
        delete, gate, memo, prefilter = self._gate
        skeleton = data.translate(_SAME, delete)
        maybe = memo.get(skeleton)
        if maybe is None:
            maybe = gate.search(skeleton) is not None
            if len(skeleton) <= MEMO_KEY_MAX:
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                memo[skeleton] = maybe
        return prefilter.search(data) if maybe else None

    @staticmethod
    def _repl(m: re.Match[bytes]) -> bytes:
        g = m.lastgroup  # the secret part of a shape with context kept; None: all of it
        if g is None:
            return REDACTED
        whole, at = m.group(0), m.start()
        return whole[: m.start(g) - at] + REDACTED + whole[m.end(g) - at :]

    def _sub(self, data: bytes) -> bytes:
        """The values first (known exactly), then the shapes and credential names."""
        if self._re is not None:
            data = self._re.sub(REDACTED, data)
        return _shapes_re().sub(self._repl, data)

    def __call__(self, data: bytes) -> bytes:
        first = self._hit(data)
        if first is None:
            return data
        return self._redact(data, StreamState(), first)

    def redact_stream(self, data: bytes, state: StreamState) -> bytes:
        """Redact whole lines of a stream (``data`` ends at a line end or a forced cut); ``state`` spans calls."""
        first = None
        if not state.in_pem:
            first = self._hit(data)
            if first is None:
                return data
        return self._redact(data, state, first)

    def _redact(self, data: bytes, st: StreamState, first: re.Match[bytes] | None = None) -> bytes:
        """The slow path: each line holding an anchor goes through the full substitution; PEM keys across lines."""
        out: list[bytes] = []
        pos, n = 0, len(data)
        search = self._prefilter.search
        while pos < n:
            if st.in_pem:
                if data[pos : pos + 1] == b"\n":
                    out.append(b"\n")
                    pos += 1
                    continue
                le = data.find(b"\n", pos)
                le = n if le < 0 else le
                out.append(self._pem_body_line(data[pos:le], st))
                pos = le
                continue
            m: re.Match[bytes] | None = first  # the prefilter's search from 0, already done
            if m is None:
                m = search(data, pos)
            first = None
            if m is None:
                out.append(data[pos:])
                break
            ls = data.rfind(b"\n", pos, m.start()) + 1
            ls = max(ls, pos)
            le = data.find(b"\n", m.end())
            le = n if le < 0 else le
            out.append(data[pos:ls])
            out.append(self._line(data[ls:le], st))
            pos = le
        return b"".join(out)

    def _line(self, line: bytes, st: StreamState) -> bytes:
        if _PEM_MARK not in line:
            return self._sub(line)
        out: list[bytes] = []
        pos = 0
        for m in _PEM.finditer(line):
            out.append(self._sub(line[pos : m.start()]))
            out.append(REDACTED)
            pos = m.end()
            if m.group("open") is not None and pos == len(line):
                st.in_pem = True  # the key goes on in the next lines
        out.append(self._sub(line[pos:]))
        return b"".join(out)

    def _pem_body_line(self, line: bytes, st: StreamState) -> bytes:
        """A line after an unfinished BEGIN ... PRIVATE KEY: redacted while it looks like the key, up to its END."""
        m = _PEM_END.match(line)
        if m is not None:
            st.in_pem = False
            return REDACTED + self._line(line[m.end():], st)
        if _PEM_BODY.fullmatch(line):
            return REDACTED
        st.in_pem = False  # not a key line: the key was cut short
        return self._line(line, st)

    def spans(self, data: bytes) -> Iterator[tuple[int, int]]:
        """Where secrets are in ``data`` (one line or a piece of one), in order: a stream must not cut inside one."""
        if self._hit(data) is None:
            return
        found = [(m.start(), m.end()) for m in _PEM.finditer(data)] if _PEM_MARK in data else []
        if self._re is not None:
            found += [m.span() for m in self._re.finditer(data)]
        for m in _shapes_re().finditer(data):
            # a kept name before the secret (``token: V``, ``api_key=V``) is cut with it: redacted apart, V would stay
            found.append((m.start() if m.lastgroup is None else max(0, m.start() - _NAME_REACH), m.end()))
        yield from sorted(found)


_FLAG_NAME = r"--?(?:[A-Za-z0-9]+[-_])*(?:api[-_]?key|access[-_]?key|secret[-_]?key|auth[-_]?key|token|secret|password|passwd|pwd)"
_SECRET_FLAG = re.compile(rf"^{_FLAG_NAME}$", re.IGNORECASE)
_SECRET_OPTION_IN_TEXT = re.compile(rf"(?<![\w-])({_FLAG_NAME})(=| +)(?!-)(\S+)", re.IGNORECASE)
"""``--api-key=VALUE`` in an argument, or ``--token VALUE`` inside one (``sh -c '... --token VALUE'``)."""
_ASSIGN_IN_TEXT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=(\S+)")


def _redact_arg_text(arg: str) -> str:
    arg = _SECRET_OPTION_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + REDACTED_STR, arg)
    return _ASSIGN_IN_TEXT.sub(
        lambda m: f"{m.group(1)}={REDACTED_STR}" if _SECRET_NAME.search(m.group(1)) else m.group(0), arg
    )


def redact_argv(argv: Iterable[str], redactor: Redactor) -> list[str]:
    """A command line as it may be written to disk: secret values and token shapes redacted.

    Also the value of an option whose name says secret (``--api-key VALUE``,
    ``--token=VALUE``, also inside one argument such as ``sh -c '... --token VALUE'``)
    and of a ``NAME=VALUE`` whose name looks secret (``OPENAI_API_KEY=...``, as
    given to ``env``). The real argv stays in memory.
    """
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next and not a.startswith("--"):
            out.append(REDACTED_STR)
            hide_next = False
            continue
        hide_next = bool(_SECRET_FLAG.match(a))
        out.append(os.fsdecode(redactor(os.fsencode(_redact_arg_text(a)))))
    return out


def argv_is_redacted(argv: Iterable[str]) -> bool:
    """Whether a command line holds ``[REDACTED]`` (it was read back from ``run.json``: it cannot run as is)."""
    return any(REDACTED_STR in a for a in argv)


def send_secrets(values: Iterable[str], env: Mapping[str, str] | None = None) -> None:
    """Tell the supervisor (if any) of secret values: one JSON string per line on the ``ENV_SECRETS_FD`` pipe.

    Silent when there is no supervisor, the descriptor is gone or is not a pipe
    open for writing (a grandchild that inherited the variable but not the pipe
    must not write into a file that reuses the number). Never writes a file.
    """
    env = os.environ if env is None else env
    try:
        fd = int(env.get(ENV_SECRETS_FD) or "")
    except ValueError:
        return
    lines = []
    for v in values:
        if len(v) >= MIN_SECRET_LEN:
            with contextlib.suppress(orjson.JSONEncodeError):
                lines.append(orjson.dumps(v) + b"\n")
    data = b"".join(lines)
    if fd < 0 or not data:
        return
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        return  # EBADF, EPIPE (the supervisor is gone): the SDK still redacts its own files
