"""Redaction of token shapes and secret values: one row per shape, each with a positive and a near miss."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from supervisor.core import redact
from supervisor.core.redact import (
    ENV_SECRETS_FD,
    SHAPES,
    Redactor,
    StreamState,
    argv_is_redacted,
    redact_argv,
    send_secrets,
)

R = "[REDACTED]"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aumPWXOuBbNcHSm/0oWNbGsG3Zh\n"
    "hSm/0oWNbGsG3Zh/fukSNd2JPeMTq8ih+Y1ld2mCgVvWn5t4Z8gL1v5pQeR7sT==\n"
    "-----END RSA PRIVATE KEY-----"
)
PEM_BODY = "MIIEpAIBAAKCAQEA1c7"

# shape, positive text, what it becomes, the secret part (must be gone), a near miss (must stay as it is)
TABLE: list[tuple[str, str, str, str, str]] = [
    ("openai", "key sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzd ok", f"key {R} ok", "u8jzPde0IgxLd6",
     "a skeleton for the task-list"),
    ("github", "token ghp_ocJ2isAjIhKtJ0RlgLKOmxgJTeKdNnFRIBXu", f"token {R}", "ocJ2isAjIhKtJ0",
     "push to gh_pages_deploy_branch, ghp_short"),
    ("github_pat", "github_pat_11ABCDEFG0aBcDeFgHiJkLmN_oPqRsTuVwXyZ0123456789", R, "aBcDeFgHiJkLmN",
     "github_pat_ is the prefix of fine-grained tokens"),
    ("aws", "aws AKIAIOSFODNN7EXAMPLE", f"aws {R}", "IOSFODNN7EXAMPLE", "AKIA1234 is too short"),
    ("slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", R, "1234567890123-AbCd",
     "xoxo-hugs from the team"),
    ("google", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", R, "SyDaGmWKa4JsXZ", "AIzaShort and AIza alone"),
    ("huggingface", "HF hf_DL7DxtpYlSXpfKtHF4vUCsMehGAkWvj7FA.", f"HF {R}.", "DL7DxtpYlSXpf",
     "hf_hub_download_from_the_model_repository"),
    ("stripe", "sk_live_51HqIg8xNbe3nNyjOq9wMxEhh2FD", R, "Ig8xNbe3nNyjOq", "pk_live_51HqIg8xNbe3nNyjOq9wMxEhh2FD"),
    ("stripe", "restricted rk_live_51HqIg8xNbe3nNyjOq9wMxEhh2FD", f"restricted {R}", "Ig8xNbe3nNyjOq", "rk_live_ alone"),
    ("stripe", "test key sk_test_51HqIg8xNbe3nNyjOq9wMxEhh2FD", f"test key {R}", "Ig8xNbe3nNyjOq", "sk_test_ alone"),
    ("gitlab", "glpat-xYz12AbC34dEf56GhI78 end", f"{R} end", "xYz12AbC34dEf56", "glpat-short"),
    ("groq", "GROQ 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", f"GROQ {R}", "c9QeWJKY40uvSw",
     "gsk_short and a task_runner_for_everything"),
    ("npm", "//registry.npmjs.org/:_authToken=npm_nXsiVpzz63FfkCzJr4i0B3JrTAwR4y9ojflj",
     f"//registry.npmjs.org/:_authToken={R}", "nXsiVpzz63FfkC", "npm_config_cache_directory_somewhere"),
    ("pypi", "pypi-AgEIcHlwaS5vcmcoQoaF1LlqsajAIxNKu8iS2G8NPRVdD53X83RZJzzzzgEOzdmenCkhvMdgaKj", R,
     "oQoaF1LlqsajAIx", "pypi-simple-index-mirror"),
    ("jwt", "jwt=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
     "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", f"jwt={R}", "SflKxwRJSMeKKF2QT4",
     "header eyJhbGciOiJIUzI1NiJ9 only"),
    ("pem", f"key:\n{PEM}\ndone", f"key:\n{R}\n{R}\n{R}\n{R}\ndone", PEM_BODY,
     "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0B\n-----END PUBLIC KEY-----"),
    ("url_password", "postgres://app:Tr0ub4dor-and-3@db.internal:5432/main",
     f"postgres://app:{R}@db.internal:5432/main", "Tr0ub4dor-and-3",
     "https://example.com:8443/path@v2 and git@github.com:org/repo.git"),
    ("url_password", "redis://:hunter2-hunter2@cache:6379/0", f"redis://:{R}@cache:6379/0", "hunter2-hunter2",
     "mailto:bob@example.com"),
    ("authorization", "Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {R}", "dXNlcjpwYXNz",
     "Authorization failed for user bob"),
    ("api_key", "x-api-key: 3f9a8b7c6d5e4f3a2b1c", f"x-api-key: {R}", "3f9a8b7c6d5e4f",
     "api_key_name: openai"),
    ("api_key", "X-Goog-Api-Key: 3f9a8b7c6d5e4f3a2b1c", f"X-Goog-Api-Key: {R}", "3f9a8b7c6d5e4f",
     "the API key is in the vault"),
    ("bearer", "curl -H 'x: Bearer abcdef1234567890'", f"curl -H 'x: Bearer {R}'", "abcdef1234567890",
     "Bearer token"),
]
GIT_SHA = "e83c5163316f89bfbde7d9ab23ca2e25604af290"


@pytest.fixture
def r() -> Redactor:
    return Redactor(from_env=False)


def red(r: Redactor, text: str) -> str:
    return r(text.encode()).decode()


def test_every_shape_has_a_row() -> None:
    assert {s.name for s in SHAPES} | {"pem"} == {row[0] for row in TABLE}


@pytest.mark.parametrize(("shape", "text", "expected", "secret", "near_miss"), TABLE, ids=[f"{t[0]}-{i}" for i, t in enumerate(TABLE)])
def test_shape(r: Redactor, shape: str, text: str, expected: str, secret: str, near_miss: str) -> None:
    assert secret in text
    assert red(r, text) == expected
    assert red(r, near_miss) == near_miss
    # inside a journal line: redacted, and the line is still the same JSON with the secret replaced
    for doc in ({"out": text}, {"a": 1, "nested": [f"say {text}!", {"k": text}]}):
        line = orjson.dumps(doc)
        got = r(line)
        assert secret.encode() not in got
        back = orjson.loads(got)
        assert R in orjson.dumps(back).decode()
    assert r(orjson.dumps({"out": near_miss})) == orjson.dumps({"out": near_miss})
    # far from the start of a long line (only the lines around a prefilter hit are substituted)
    filler = "lorem ipsum dolor sit amet " * 400
    assert red(r, filler + text + " " + filler) == filler + expected + " " + filler
    # redacting twice changes nothing more
    assert red(r, red(r, text)) == red(r, text)


def test_ordinary_words_and_hashes_are_left_alone(r: Redactor) -> None:
    for text in ("skeleton", GIT_SHA, "desk-lamp", "task_runner_for_everything",
                 "https://user@example.com/x", "api_key=None", "hf_", "Proc-Type: 4,ENCRYPTED",
                 "took_ms_total_for_the_whole_batch_of_requests", "task_live_updates_for_everyone_here"):
        assert red(r, text) == text


def test_a_line_without_anchor_is_returned_as_is(r: Redactor) -> None:
    line = b'{"seq":12,"kind":"step","name":"search:q2","output":["alpha beta"],"status":"ok"}\n'
    assert r(line) is line  # the step path's fast path: no copy, no substitution


def test_pem_key_without_end_is_redacted_to_the_end_of_the_key(r: Redactor) -> None:
    cut = PEM.rsplit("\n", 1)[0]
    assert red(r, f"{cut}\nnext line of output") == f"{R}\n{R}\n{R}\nnext line of output"
    # inside a JSON string the key stops at the closing quote: the record stays valid JSON
    doc = {"out": cut, "after": "kept"}
    back = orjson.loads(r(orjson.dumps(doc)))
    assert back == {"out": R, "after": "kept"}
    # an escaped quote right after the key is not eaten
    back = orjson.loads(r(orjson.dumps({"out": cut + '"quoted"'})))
    assert back == {"out": R + '"quoted"'}


def test_pem_key_across_stream_chunks(r: Redactor) -> None:
    st = StreamState()
    head, rest = PEM.split("\n", 2)[:2], PEM.split("\n", 2)[2]
    out1 = r.redact_stream("\n".join(head).encode(), st)
    assert st.in_pem and PEM_BODY.encode() not in out1
    out2 = r.redact_stream(rest.encode(), st)
    assert not st.in_pem and b"fukSNd2JPeMTq8ih" not in out2 and out2.count(R.encode()) == 2
    assert r.redact_stream(b"plain text", st) == b"plain text"


def test_literal_values_raw_and_json_escaped() -> None:
    value = 'correct "horse" battery\\staple'
    r = Redactor([value, "short"], from_env=False)
    assert r.values == [value]  # under MIN_SECRET_LEN: not a secret (it would garble everything)
    assert red(r, f"pw={value}; short") == f"pw={R}; short"
    line = orjson.dumps({"v": f"<{value}>"})
    assert value.encode() not in r(line) and orjson.loads(r(line)) == {"v": f"<{R}>"}
    assert r.add("another-value-1") and not r.add("another-value-1") and not r.add("tiny")
    assert red(r, "x another-value-1 y") == f"x {R} y"


def test_multi_line_value_printed_line_by_line() -> None:
    r = Redactor(["first-line-of-it\nsecond-line-of-it"], from_env=False)
    st = StreamState()
    assert r.redact_stream(b"first-line-of-it", st) == R.encode()
    assert r.redact_stream(b"second-line-of-it", st) == R.encode()
    assert orjson.loads(r(orjson.dumps({"v": "first-line-of-it\nsecond-line-of-it"}))) == {"v": R}


def test_values_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "env-token-value-1")
    monkeypatch.setenv("DB_PASSWORD", "env-password-2")
    monkeypatch.setenv("PLAIN_SETTING", "plain-setting-3")
    r = Redactor()
    assert red(r, "env-token-value-1 env-password-2 plain-setting-3") == f"{R} {R} plain-setting-3"
    assert red(Redactor(from_env=False), "env-token-value-1") == "env-token-value-1"


def test_spans_and_overlap() -> None:
    r = Redactor(["v" * 20000], from_env=False)
    assert r.overlap() == 20000
    assert Redactor(from_env=False).overlap() == redact.MAX_SHAPE_LEN
    data = b"abc sk-" + b"A" * 30 + b" def"
    assert list(Redactor(from_env=False).spans(data)) == [(4, 4 + 33)]


def test_redact_argv() -> None:
    r = Redactor(["registered-value-9"], from_env=False)
    argv = ["python", "agent.py", "sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzd", "--api-key", "abc",
            "--token=xyz", "--db-password", "pw", "OPENAI_API_KEY=plainvalue", "--max-tokens", "100",
            "--token-file", "t.txt", "--note=registered-value-9", "--secret", "--verbose"]
    assert redact_argv(argv, r) == [
        "python", "agent.py", R, "--api-key", R, f"--token={R}", "--db-password", R,
        f"OPENAI_API_KEY={R}", "--max-tokens", "100", "--token-file", "t.txt", f"--note={R}", "--secret", "--verbose",
    ]
    assert argv_is_redacted(redact_argv(argv, r)) and not argv_is_redacted(["python", "agent.py"])
    # inside one argument, as given to sh -c
    assert redact_argv(["sh", "-c", "DB_PASSWORD=hunter2 python a.py --api-key k1 --token=t2 --max-tokens 9 x=1"], r) == [
        "sh", "-c", f"DB_PASSWORD={R} python a.py --api-key {R} --token={R} --max-tokens 9 x=1"]
    # not UTF-8 (an argument from the OS as surrogate escapes) survives
    odd = os.fsdecode(b"caf\xe9")
    assert redact_argv([odd], r) == [odd]


def test_send_secrets_writes_json_lines_to_the_pipe_only(tmp_path: object) -> None:
    rfd, wfd = os.pipe()
    try:
        send_secrets(["value-one-1", "tiny", 'with "quote"\nand newline'], {ENV_SECRETS_FD: str(wfd)})
        os.close(wfd)
        wfd = -1
        data = os.read(rfd, 65536)
        assert [orjson.loads(line) for line in data.splitlines()] == ["value-one-1", 'with "quote"\nand newline']
    finally:
        os.close(rfd)
        if wfd >= 0:
            os.close(wfd)
    # no variable, a bad number, a closed fd: silent
    send_secrets(["value-one-1"], {})
    send_secrets(["value-one-1"], {ENV_SECRETS_FD: "nope"})
    send_secrets(["value-one-1"], {ENV_SECRETS_FD: "987"})


def test_send_secrets_never_writes_into_a_file_that_reuses_the_number(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "data.txt")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        send_secrets(["value-one-1"], {ENV_SECRETS_FD: str(fd)})
    finally:
        os.close(fd)
    assert os.path.getsize(path) == 0
    # nor into the read end of a pipe
    rfd, wfd = os.pipe()
    try:
        send_secrets(["value-one-1"], {ENV_SECRETS_FD: str(rfd)})
    finally:
        os.close(rfd)
        os.close(wfd)


def test_send_secrets_to_a_closed_reader_is_silent() -> None:
    rfd, wfd = os.pipe()
    os.close(rfd)
    try:
        # EPIPE (SIGPIPE is ignored in Python): the SDK goes on
        subprocess.run(
            [sys.executable, "-c", f"from supervisor.core.redact import send_secrets; "
             f"send_secrets(['value-one-1'], {{'{ENV_SECRETS_FD}': '{wfd}'}})"],
            pass_fds=(wfd,), check=True, timeout=30,
        )
    finally:
        os.close(wfd)
