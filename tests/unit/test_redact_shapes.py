"""Credential names in key-value, header and JSON-key forms: the value is redacted, the name kept (issue 28, item 6).

Every name of ``NAMES`` goes through every form of ``FORMS`` (``password=V``, ``token: V``, ``secret = V``, an
HTTP header line, ``"name": "V"`` in a JSON text, a dict key of structured data, a JSON patch's path, ...),
raw and inside a journal line; the line stays the same JSON with only the value replaced. The near misses
(usage counts, plurals, ``secret_santa``, ``null``) stay as they are.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core.redact import Redactor, StreamState, redact_argv, secret_env_values
from supervisor.supervise.agentlog import MAX_LINE, AgentLog

R = "[REDACTED]"
NAMES = [
    "password", "passwd", "pwd", "secret", "client_secret", "token", "access_token", "refresh_token", "id_token",
    "api_key", "apikey", "x-api-key", "x_api_key", "aws_secret_access_key", "aws_session_token", "authorization",
    "x-auth-token", "cookie", "set-cookie", "private_key",
]


def header(name: str) -> str:
    return "-".join(p.capitalize() for p in re.split(r"[-_]", name))


def camel(name: str) -> str:
    first, *rest = re.split(r"[-_]", name)
    return first + "".join(p.capitalize() for p in rest)


def value(i: int) -> str:
    return f"Vq{i:03d}x7Kp9Zr2/L+w="


# form name -> (name, value) -> text; each form writes the value once
FORMS: dict[str, Callable[[str, str], str]] = {
    "eq": lambda n, v: f"{n}={v}",
    "colon": lambda n, v: f"config {n}: {v} (from the vault)",
    "spaced": lambda n, v: f"{n} = {v}",
    "upper-env": lambda n, v: f"export {n.upper().replace('-', '_')}={v}",
    "header": lambda n, v: f"GET /v1 HTTP/1.1\r\nHost: api.example.com\r\n{header(n)}: {v}\r\nAccept: */*\r\n\r\n",
    "camel": lambda n, v: f"{camel(n)}: {v}",
    "query": lambda n, v: f"https://example.com/cb?{n}={v}&state=ok",
    "double-quoted": lambda n, v: f'{n}="{v} with spaces"',
    "single-quoted": lambda n, v: f"login({n}='{v} with spaces')",
    "json-text": lambda n, v: json.dumps({"user": "bob", n: f"{v} with spaces", "n": 5}),
    "json-compact": lambda n, v: orjson.dumps({n: v, "ok": True}).decode(),
    "json-pretty": lambda n, v: json.dumps({"auth": {n: v}}, indent=2),
    "python-repr": lambda n, v: repr({n: v, "retries": 3}),
    "after-newline": lambda n, v: f"user: bob\n{n}: {v}\n",
    "tab": lambda n, v: f"{n}\t=\t{v}",
}


def cases() -> list[tuple[str, str, str]]:
    out = []
    for i, (n, f) in enumerate((n, f) for n in NAMES for f in FORMS):
        out.append((n, f, value(i)))
    return out


CASES = cases()


@pytest.fixture(scope="module")
def r() -> Redactor:
    return Redactor(from_env=False)


def deep_replace(doc: Any, old: str, new: str) -> Any:
    if isinstance(doc, str):
        return doc.replace(old, new)
    if isinstance(doc, list):
        return [deep_replace(x, old, new) for x in doc]
    if isinstance(doc, dict):
        return {k: deep_replace(x, old, new) for k, x in doc.items()}
    return doc


@pytest.mark.parametrize(("name", "form", "secret"), CASES, ids=[f"{n}-{f}" for n, f, _ in CASES])
def test_the_value_goes_the_name_stays(r: Redactor, name: str, form: str, secret: str) -> None:
    text = FORMS[form](name, secret)
    assert text.count(secret) == 1
    gone = secret + " with spaces" if " with spaces" in text else secret
    if form == "colon" and name in ("cookie", "set-cookie"):  # a cookie header's value: the rest of the line
        gone = secret + " (from the vault)"
    want = text.replace(gone, R)
    assert r(text.encode()).decode() == want
    # inside journal lines: as a string field, and as a JSON text inside a string inside a JSON text
    for doc in ({"out": text}, {"kind": "step", "output": {"log": [text, "next"]}},
                {"stdout": orjson.dumps({"nested": text}).decode()}):
        got = r(orjson.dumps(doc))
        assert secret.encode() not in got
        assert orjson.loads(got) == deep_replace(doc, gone, R)
    # far into a long line (only the lines around a prefilter hit are substituted), and twice changes nothing more
    filler = "lorem ipsum dolor sit amet " * 300
    assert r((filler + "\n" + text + "\n" + filler).encode()).decode() == filler + "\n" + want + "\n" + filler
    assert r(want.encode()).decode() == want


@pytest.mark.parametrize("name", NAMES)
def test_a_dict_key_of_structured_data(r: Redactor, name: str) -> None:
    secret = f"struct-{name}-Zx81q"
    docs: list[Any] = [
        {"kind": "begin", "inputs": {"kwargs": {name: secret, "query": "weather"}}, "seq": 3},  # a step's inputs
        {"output": {"session": {name: secret, "expires_in": 3600}}},  # its output
        {"state_patch": [{"op": "add", "path": f"/cfg/{name}", "value": secret}]},  # run.state["cfg"][name] = V
        {"state_patch": [{"op": "replace", "path": f"/{name}", "value": secret}]},
        {"kind": "note", "message": "login", name: secret},  # a note's field
        {"state": {"cfg": {name: secret}, "list": [{name: secret}]}},  # a checkpoint
    ]
    for doc in docs:
        # (indented, a patch's "value" is on the line after its "path": only compact lines, as the journal's)
        for line in (orjson.dumps(doc), *(() if "state_patch" in doc else (json.dumps(doc, indent=1).encode(),))):
            got = r(line)
            assert secret.encode() not in got and name.encode() in got, got
            assert orjson.loads(got) == deep_replace(doc, secret, R)


def test_the_whole_value_goes_after_a_name_in_a_name(r: Redactor) -> None:
    assert r(b"x_api_key = x-api-key: V") == b"x_api_key = [REDACTED]"
    assert r(b"x_api_key = x-api-key: Vk3y9 next") == b"x_api_key = [REDACTED] next"
    assert r(b"token: Authorization: abc123") == b"token: [REDACTED]"
    assert r(b"Authorization: Bearer x-api-key: V") == b"Authorization: Bearer [REDACTED]"
    line = orjson.dumps({"cfg": "x_api_key = x-api-key: V"})
    assert orjson.loads(r(line)) == {"cfg": "x_api_key = [REDACTED]"}


def test_headers_keep_their_scheme_and_cookies_go_whole(r: Redactor) -> None:
    assert r(b"Authorization: Bearer abc.def-ghi") == b"Authorization: Bearer [REDACTED]"
    assert r(b"authorization: Basic dXNlcjpwYXNz") == b"authorization: Basic [REDACTED]"
    assert r(b"Proxy-Authorization: short") == b"Proxy-Authorization: [REDACTED]"
    assert r(b"Cookie: theme=dark; session=abc123; csrf=x\r\nHost: h") == b"Cookie: [REDACTED]\r\nHost: h"
    assert r(b"Set-Cookie: sid=abc123; Path=/; HttpOnly\n") == b"Set-Cookie: [REDACTED]\n"
    assert r(b"X-Auth-Token: tok9\nX-Request-Id: 42") == b"X-Auth-Token: [REDACTED]\nX-Request-Id: 42"


@pytest.mark.parametrize("text", [
    "tokens used: 120", "input tokens: 5, output tokens: 7", "max_tokens=100", "--max-tokens 100", "token_count: 12",
    '{"input_tokens": 5, "max_tokens": 100, "output_tokens": 7, "total_tokens": 12, "cached_tokens": 0}',
    '{"usage": {"prompt_tokens": 9, "completion_tokens": 3, "cache_read_input_tokens": 0}}',
    '{"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}',
    '{"secret_santa": "bob", "secrets": 3, "tokenizer": "cl100k", "passwords_checked": 4}',
    '{"password": null, "token": 5, "secret": false, "cookie": {"a": 1}, "api_key": 12345678}',
    "api_key=None", "password: null", "token=true", "the password is wrong", "Cookies: 3", "secretary: Ann",
    "PWD=/home/bob/project", "OLDPWD=/tmp", "pwd: /srv/app", "keystroke tokenized secretly passworded",
    "Authorization failed for user bob", "api_key_name: openai", "my token ghp_short is", "cookie-policy: strict",
    # data a resumed agent needs back as written: a cursor, a tokenizer's special tokens
    '{"next_page_token": "CiAKGjBpNDd2Nmp2", "nextPageToken": "CiAKGjBpNDd2Nmp2"}',
    '{"eos_token": "</s>", "bos_token": "<s>", "pad_token": "<pad>"}', "max_token=abc123xyz",
])
def test_near_misses_stay(r: Redactor, text: str) -> None:
    assert r(text.encode()).decode() == text
    assert r(orjson.dumps({"out": text})) == orjson.dumps({"out": text})


def test_a_journal_line_stays_json_whatever_the_text_around_a_name() -> None:
    """No match runs across a JSON string's end: a number stays a number, a quote after ``name=`` ends no value."""
    r = Redactor(from_env=False)
    rng = random.Random(28)
    bits = ["password", "Token", "x-api-key", "Authorization", "cookie", "secret_key", "=", ":", " ", '"', "'", "\\",
            "\n", "\t", ",", "}", "abc", "Bearer ", "x-api-key: ", "null", "5", "/", "{", "é"]
    for _ in range(4000):
        text = "".join(rng.choice(bits) for _ in range(rng.randint(1, 10)))
        key = rng.choice(["out", "password", "token", "k"])
        for doc in ({key: text, "next": "password=", "n": 5}, {"a": [text, {text: 1}], key: 7},
                    {"s": orjson.dumps({key: text}).decode()}, {"s": orjson.dumps({"s": orjson.dumps({key: text}).decode()}).decode()}):
            line = orjson.dumps(doc)
            back = orjson.loads(r(line))  # raises if the line is no longer JSON
            assert back.keys() == doc.keys()


def test_a_stream_never_cuts_between_a_name_and_its_value(tmp_path: Path) -> None:
    """A line longer than agent.log's split, read in pieces: wherever the cut falls in ``x-auth-token: V``, V is
    redacted (the cut goes before the name: redacted apart, ``n: V`` would not say whose value V is)."""
    r = Redactor(from_env=False)
    secret = b"cutTok3nValue9"
    text = b"x-auth-token: " + secret
    for off in range(MAX_LINE - len(text) - 1, MAX_LINE + 1):
        d = tmp_path / str(off)
        d.mkdir()
        log = AgentLog(d, redact=r, tee=False)
        log.begin_attempt(1, 1, ["agent"])
        data = b"x" * off + text + b" " + b"y" * 3000 + b"\n" + b"q" * 100_000
        for i in range(0, len(data), 4093):
            log.feed("stdout", data[i : i + 4093])
        log.close()
        raw = (d / "agent.log").read_bytes()
        assert secret not in raw, off
        pieces = [ln.split(b"[1:stdout] ", 1)[1] for ln in raw.splitlines() if b"[1:stdout] " in ln]
        assert b"".join(pieces) == b"x" * off + b"x-auth-token: [REDACTED] " + b"y" * 3000 + b"q" * 100_000, off
    assert list(r.spans(b"abc token: V1 def")) == [(0, 13)]  # the span reaches back over the name


def test_a_stream_redacts_each_line() -> None:
    r = Redactor(from_env=False)
    st = StreamState()
    assert r.redact_stream(b"ok\npassword=hunter2\n{\"token\": \"t0k\"}\n", st) == (
        b'ok\npassword=[REDACTED]\n{"token": "[REDACTED]"}\n')


def test_argv_with_the_shapes() -> None:
    r = Redactor(from_env=False)
    argv = ["agent.py", "password=pw1", "--header", "X-Auth-Token: tok2", "client_secret = cs3", '{"access_token": "at4"}',
            "cookie: a=b; s=c5", "--max-tokens", "100", "tokens=7"]
    assert redact_argv(argv, r) == ["agent.py", f"password={R}", "--header", f"X-Auth-Token: {R}", f"client_secret = {R}",
                                    f'{{"access_token": "{R}"}}', f"cookie: {R}", "--max-tokens", "100", "tokens=7"]


def test_environment_names_that_look_secret() -> None:
    env = {n: f"value-of-{n}" for n in (
        "PASSWORD", "DB_PASSWD", "DB_PWD", "SECRET", "CLIENT_SECRET", "TOKEN", "ACCESS_TOKEN", "ID_TOKEN", "API_KEY",
        "APIKEY", "X_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AUTHORIZATION", "X_AUTH_TOKEN", "COOKIE",
        "SET_COOKIE", "PRIVATE_KEY")}
    plain = {"PWD": "/home/bob/x", "OLDPWD": "/home/bob", "TOKENIZERS_PARALLELISM": "false-ish", "MAX_TOKENS": "100000",
             "KEYBOARD": "us-intl", "COOKIE_JAR_PATH_X": "/tmp/cookies"}
    assert sorted(secret_env_values({**env, **plain})) == sorted(env.values())
