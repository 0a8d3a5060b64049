"""Tokens, cost and saved by resume (issue 12): supervisor.core.usage and supervisor.export.pricing.

The prices below were read from genai-prices 0.2.3's table (``calc_price(...).model_price``) and
are written out as literals, so a figure is checked by hand, not by the code under test:

- gpt-4o (openai): $2.50 / M input, $1.25 / M cached input (cache read), $10 / M output
- gpt-4o-mini (openai): $0.15 / M input, $0.075 / M cache read, $0.60 / M output
- claude-sonnet-4-5 (anthropic), under 200k input tokens: $3 / M input, $0.30 / M cache read, $15 / M output
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.core.history import Fold, load
from supervisor.core.journal_reader import JournalReader
from supervisor.core.usage import Tokens, call_of, run_usage, step_model, step_tokens, usage_entries
from supervisor.export import pricing
from supervisor.export.pricing import step_cost, usage_cost

from ..conftest import ROOT, clean_env

AGENT = ROOT / "tests" / "integration" / "usage_agent.py"

# the usage_agent's model calls, priced by hand (input includes cached; cached priced as cache reads)
GPT4O = (1000 * 2.50 + 200 * 1.25 + 300 * 10.0) / 1e6  # 1200 in (200 cached), 300 out: 0.00575
SONNET = (500 * 3.0 + 1500 * 0.30 + 500 * 15.0) / 1e6  # 2000 in (1500 cached), 500 out: 0.00945
MINI = (5000 * 0.15 + 1000 * 0.60) / 1e6  # 5000 in, 1000 out: 0.00135


def _model_rec(model: str, provider: str | None, i: int, o: int, c: int = 0, **extra: Any) -> dict[str, Any]:
    u: dict[str, Any] = {"model": model, "input_tokens": i, "output_tokens": o, "cached_tokens": c}
    if provider:
        u["provider"] = provider
    return {"kind": "step", "step": f"model:{model}", "call": {"kind": "model", "model": model, "provider": provider},
            "usage": [u], "output": "x", **extra}


# ---------------------------------------------------------------- reading one record


def test_tokens_sum_and_total() -> None:
    a, b = Tokens(10, 5, 3), Tokens(1, 2, 0)
    assert a.plus(b) == Tokens(11, 7, 3)
    assert Tokens.sum([a, b, Tokens()]) == Tokens(11, 7, 3)
    assert Tokens.sum([]) == Tokens(0, 0, 0)
    assert a.total == 15  # cached tokens are part of the input


def test_step_tokens_sums_the_usage_list_and_rejects_malformed() -> None:
    rec = {"step": "s", "usage": [{"model": "m", "input_tokens": 10, "output_tokens": 2},
                                  {"input_tokens": 5, "cached_tokens": 4, "output_tokens": 1}]}
    assert step_tokens(rec) == Tokens(15, 3, 4)
    assert step_tokens({"step": "s"}) is None
    assert step_tokens({"step": "s", "usage": []}) is None
    assert step_tokens({"step": "s", "usage": [{"model": "m"}]}) is None  # no count at all: no figure
    for bad in ("x", {"input_tokens": 1}, [1], [{"input_tokens": "7"}], [{"input_tokens": -1}],
                [{"input_tokens": True}], [{"input_tokens": 1.5}], [{"input_tokens": 3}, "junk"]):
        assert step_tokens({"step": "s", "usage": bad}) is None, bad


def test_call_of_and_step_model() -> None:
    rec = _model_rec("gpt-4o", "openai", 1, 1)
    assert call_of(rec) == {"kind": "model", "model": "gpt-4o", "provider": "openai"}
    assert step_model(rec) == "gpt-4o"
    tool = {"step": "tool:search", "call": {"kind": "tool", "tool": "search", "call_id": "c1"}}
    assert call_of(tool) == tool["call"] and step_model(tool) is None
    assert call_of({"call": {"kind": "other"}}) is None
    assert call_of({"call": ["model"]}) is None
    assert call_of({"call": "model"}) is None
    # no call: the first usage entry's model
    assert step_model({"usage": ["junk", {"model": ""}, {"model": "claude-x"}]}) == "claude-x"
    # an entry without model/provider takes the call's
    rec2 = {"call": {"kind": "model", "model": "gpt-4o", "provider": "openai"}, "usage": [{"input_tokens": 3}]}
    assert usage_entries(rec2) == [("gpt-4o", "openai", Tokens(3, 0, 0))]


# ---------------------------------------------------------------- pricing


def test_step_cost_by_hand() -> None:
    assert step_cost(_model_rec("gpt-4o", "openai", 1200, 300, 200)) == pytest.approx(GPT4O, rel=1e-12)
    assert step_cost(_model_rec("claude-sonnet-4-5", "anthropic", 2000, 500, 1500)) == pytest.approx(SONNET, rel=1e-12)
    assert step_cost(_model_rec("gpt-4o-mini", None, 5000, 1000)) == pytest.approx(MINI, rel=1e-12)  # the model picks the provider
    # two calls in one step: the sum
    two = _model_rec("gpt-4o", "openai", 1200, 300, 200)
    two["usage"].append({"model": "gpt-4o-mini", "provider": "openai", "input_tokens": 5000, "output_tokens": 1000})
    assert step_cost(two) == pytest.approx(GPT4O + MINI, rel=1e-12)
    # claude-sonnet-4-5 above 200k input tokens: the table's tier ($6 / M input, $22.50 / M output)
    assert step_cost(_model_rec("claude-sonnet-4-5", "anthropic", 300_000, 1000)) == pytest.approx(
        (300_000 * 6.0 + 1000 * 22.5) / 1e6, rel=1e-12)


def test_cached_rates_equal_the_table_for_any_tokens_and_time() -> None:
    """usage_cost computes from rates it asks genai-prices for once per price region (minute, tier): the
    same figures as asking genai-prices for every call, across tier boundaries and times of day."""
    from datetime import UTC, datetime, timedelta

    from genai_prices import Usage, calc_price

    rnd = random.Random(7)
    models = [("gpt-4o", "openai"), ("gpt-4o-mini", None), ("claude-sonnet-4-5", "anthropic"),
              ("gemini-2.5-pro", "google"), ("deepseek-chat", "deepseek")]
    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    for _ in range(400):
        model, provider = rnd.choice(models)
        i = rnd.choice([0, 1, rnd.randint(1, 5000), rnd.randint(150_000, 250_000), 200_000, 200_001])
        c, o = rnd.randint(0, i), rnd.randint(0, 20_000)
        when = t0 + timedelta(minutes=rnd.randint(0, 24 * 60))
        kw = {"provider_id": provider} if provider else {}
        want = float(calc_price(Usage(input_tokens=i, output_tokens=o, cache_read_tokens=c), model,
                                genai_request_timestamp=when, **kw).total_price)
        assert usage_cost(model, provider, Tokens(i, o, c), when=when) == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_unknown_model_or_provider_has_no_cost_never_a_wrong_one() -> None:
    assert step_cost(_model_rec("local-llama", "ollama", 800, 100)) is None
    assert step_cost(_model_rec("gpt-4o", "my-proxy", 800, 100)) is None  # not another provider's price
    assert step_cost(_model_rec("no-such-model-xyz", None, 800, 100)) is None
    assert step_cost({"step": "tool:x", "call": {"kind": "tool", "tool": "x"}}) is None
    # one unpriceable call in a step: the step has no cost (a part would be a wrong figure)
    mixed = _model_rec("gpt-4o", "openai", 1200, 300, 200)
    mixed["usage"].append({"model": "local-llama", "provider": "ollama", "input_tokens": 1})
    assert step_cost(mixed) is None
    assert usage_cost(None, "openai", Tokens(1, 1, 0)) is None


def test_without_genai_prices_costs_are_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # import genai_prices raises ImportError
    monkeypatch.setattr(pricing, "_calc", pricing._UNSET)
    monkeypatch.setattr(pricing, "_table", pricing._UNSET)  # the price cache is not read without genai-prices
    assert step_cost(_model_rec("gpt-4o", "openai", 1200, 300, 200)) is None
    assert not pricing.available()
    monkeypatch.setattr(pricing, "_calc", pricing._UNSET)  # the next test imports it again
    monkeypatch.setattr(pricing, "_table", pricing._UNSET)


def test_pricing_imports_genai_prices_only_to_price_usage(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from supervisor.export.pricing import step_cost\n"
        "from supervisor.core.usage import run_usage\n"
        "assert 'genai_prices' not in sys.modules\n"
        "assert step_cost({'step': 'plain', 'output': 1}) is None\n"
        "assert 'genai_prices' not in sys.modules\n"
        "step_cost({'step': 'm', 'usage': [{'model': 'gpt-4o', 'input_tokens': 1}]})\n"
        "assert 'genai_prices' in sys.modules\n"
    )
    env = {**clean_env(), "XDG_CACHE_HOME": str(tmp_path)}  # an empty price cache: the model is priced first here
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- run totals and saved by resume


def test_real_crash_and_resume_totals_and_saved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent crashes hard inside its third model call; the second attempt serves the first three steps."""
    run = tmp_path / "run"
    args = [sys.executable, str(AGENT), str(run), "--crash-in", "model:local-llama", "--crash-marker", str(tmp_path / "m")]
    first = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=30)
    assert first.returncode == 1, first.stderr
    second = subprocess.run(args, capture_output=True, text=True, env=clean_env(), timeout=30)
    assert second.returncode == 0, second.stderr
    u = run_usage(load(run), price=step_cost)
    assert u.attempts == 2
    assert u.tokens == Tokens(1200 + 2000 + 800 + 5000, 300 + 500 + 100 + 1000, 200 + 1500)
    assert u.steps == 4 and u.unpriced == 1  # local-llama on ollama: tokens, no price
    assert u.cost_usd == pytest.approx(GPT4O + SONNET + MINI, rel=1e-9)
    assert u.by_model == {"gpt-4o": Tokens(1200, 300, 200), "claude-sonnet-4-5": Tokens(2000, 500, 1500),
                          "local-llama": Tokens(800, 100, 0), "gpt-4o-mini": Tokens(5000, 1000, 0)}
    # served on resume: gpt-4o, the search tool (no tokens), claude-sonnet-4-5
    assert u.saved_tokens == Tokens(3200, 800, 1700) and u.saved_steps == 2 and u.saved_unpriced == 0
    assert u.saved_cost_usd == pytest.approx(GPT4O + SONNET, rel=1e-9)
    # without a price function: tokens only
    bare = run_usage(load(run))
    assert bare.tokens == u.tokens and bare.cost_usd is None and bare.saved_cost_usd is None
    # status --json and the text line carry the same figures
    from supervisor.cli.main import main

    capsys.readouterr()
    assert main(["status", str(run), "--json"]) == 0
    st = orjson.loads(capsys.readouterr().out)
    assert st["tokens"] == {"input": 9000, "output": 1900, "cached": 1700, "total": 10900}
    assert st["saved_tokens"] == {"input": 3200, "output": 800, "cached": 1700, "total": 4000}
    assert st["cost_usd"] == pytest.approx(GPT4O + SONNET + MINI) and st["unpriced_steps"] == 1
    assert st["saved_cost_usd"] == pytest.approx(GPT4O + SONNET)
    assert main(["status", str(run)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("tokens")]
    assert lines == ["tokens     9,000 in (1,700 cached), 1,900 out, $0.0165 (+1 step(s) unpriced); "
                     "saved by resume 3,200 in, 800 out, $0.0152"]


def test_status_of_a_run_without_usage_has_no_tokens_line(capsys: pytest.CaptureFixture[str]) -> None:
    from supervisor.cli.main import main

    run = ROOT / "sample_runs" / "runs" / "clean"
    assert main(["status", str(run), "--json"]) == 0
    st = orjson.loads(capsys.readouterr().out)
    assert st["tokens"]["total"] == 0 and st["cost_usd"] is None and st["saved_cost_usd"] is None
    assert main(["status", str(run)]) == 0
    assert "tokens" not in capsys.readouterr().out


def _with_usage(src: Path, dst: Path, usage: dict[str, tuple[str, str, int, int]]) -> Path:
    """A copy of a sample run whose step records (of the names in ``usage``) carry model usage."""
    shutil.copytree(src, dst)
    lines = []
    for raw in (dst / "journal.jsonl").read_bytes().splitlines():
        rec = orjson.loads(raw)
        name = rec.get("step")
        if rec.get("kind") == "step" and name in usage:
            model, provider, i, o = usage[name]
            rec["call"] = {"kind": "model", "model": model, "provider": provider}
            rec["usage"] = [{"model": model, "provider": provider, "input_tokens": i, "output_tokens": o}]
        lines.append(orjson.dumps(rec) + b"\n")
    (dst / "journal.jsonl").write_bytes(b"".join(lines))
    return dst


def test_sample_rolled_back_run_by_hand(tmp_path: Path) -> None:
    """sample_runs/runs/rolled-back with usage on its model steps: summarize fails three times (three
    attempts), the SDK rolls back to research-done, a fourth attempt finishes. Paid: plan once, summarize
    four times (the failed tries too), write_report once; served: plan by attempts 2, 3 and 4, saved once (the
    crash loop serving it again saves nothing more: issue 26)."""
    run = _with_usage(ROOT / "sample_runs" / "runs" / "rolled-back", tmp_path / "rb", {
        "plan": ("gpt-4o", "openai", 1000, 100),
        "summarize": ("gpt-4o-mini", "openai", 2000, 200),
        "write_report": ("claude-sonnet-4-5", "anthropic", 1000, 1000),
    })
    plan = (1000 * 2.50 + 100 * 10.0) / 1e6  # 0.0035
    summarize = (2000 * 0.15 + 200 * 0.60) / 1e6  # 0.00042
    report = (1000 * 3.0 + 1000 * 15.0) / 1e6  # 0.018
    u = run_usage(load(run), price=step_cost)
    assert u.attempts == 4 and u.steps == 6 and u.unpriced == 0
    assert u.tokens == Tokens(1000 + 4 * 2000 + 1000, 100 + 4 * 200 + 1000, 0)
    assert u.cost_usd == pytest.approx(plan + 4 * summarize + report, rel=1e-9)
    assert u.saved_steps == 1 and u.saved_tokens == Tokens(1000, 100, 0)
    assert u.saved_cost_usd == pytest.approx(plan, rel=1e-9)


def test_sample_crashed_resumed_run_by_hand(tmp_path: Path) -> None:
    run = _with_usage(ROOT / "sample_runs" / "runs" / "crashed-resumed", tmp_path / "cr", {
        "plan": ("gpt-4o", "openai", 1000, 100),
        "search:q1": ("gpt-4o-mini", "openai", 2000, 200),
        "write_report": ("local-llama", "ollama", 10, 10),
    })
    u = run_usage(load(run), price=step_cost)
    assert u.tokens == Tokens(3010, 310, 0) and u.steps == 3 and u.unpriced == 1
    assert u.cost_usd == pytest.approx((1000 * 2.5 + 100 * 10 + 2000 * 0.15 + 200 * 0.6) / 1e6, rel=1e-9)
    assert u.saved_tokens == Tokens(3000, 300, 0) and u.saved_steps == 2  # attempt 2 served plan and search:q1
    assert u.saved_cost_usd == pytest.approx(u.cost_usd, rel=1e-9)


def _step(name: str, tokens: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "step", "step": name, "output": 1,
            "usage": [{"model": "m", "input_tokens": tokens, "output_tokens": 0}], **extra}


def _journal(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.mkdir()
    (path / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


def test_saved_counts_only_the_effective_path_at_each_attempt(tmp_path: Path) -> None:
    run = _journal(tmp_path / "r", [
        {"kind": "start", "attempt": 1, "resume": False},
        _step("a", 1),
        {"kind": "checkpoint", "name": "c1"},
        _step("b", 10),
        {"kind": "checkpoint", "name": "c2"},
        _step("c", 100),
        {"kind": "start", "attempt": 2, "resume": True},  # serves a, b, c: 111
        {"kind": "rollback", "checkpoint": "c1"},
        {"kind": "start", "attempt": 3, "resume": True},  # serves a: 1, saved already
        _step("b2", 1000),
        _step("x", 10000, error={"type": "E", "message": "m"}),  # failed: paid, never served
        {"kind": "rollback", "checkpoint": "no-such-checkpoint"},  # names none: no cut
        {"kind": "start", "attempt": 4, "resume": True},  # serves a, b2: 1001, of which b2 is new
        {"kind": "start", "attempt": 5, "resume": True},  # a crash loop serves them again: nothing new
        {"kind": "rollback", "checkpoint": "c2"},  # c2 is on the abandoned branch: names none here
        {"kind": "checkpoint", "name": "c3"},
        {"kind": "rollback", "checkpoint": "start"},
        {"kind": "start", "attempt": 6, "resume": True},  # serves nothing
    ])
    u = run_usage(load(run))
    assert u.attempts == 6
    assert u.tokens.input == 11111 and u.steps == 5
    assert u.saved_tokens.input == 111 + 1000  # each step served once: a, b, c, then b2
    assert u.saved_steps == 3 + 1


def _oracle_saved(entries: list[Any]) -> int:
    """Saved input tokens the slow way: the keeping fold's effective steps at each start record, each step once."""
    f = Fold()
    saved, counted = 0, set()
    for e in entries:
        f.add(e)
        if isinstance(e, dict) and e.get("kind") == "start":
            for s in f.history.steps:
                if s["seq"] not in counted:
                    counted.add(s["seq"])
                    saved += (step_tokens(s) or Tokens()).input
    return saved


def test_saved_matches_the_keeping_fold_on_random_journals(tmp_path: Path) -> None:
    rnd = random.Random(12)
    for n in range(60):
        recs: list[dict[str, Any]] = []
        cps: list[str] = []
        for i in range(rnd.randint(5, 40)):
            r = rnd.random()
            if r < 0.5:
                recs.append(_step(f"s{i}", rnd.randint(1, 1000)) if rnd.random() < 0.8 else {"kind": "step", "step": f"s{i}", "output": 1})
            elif r < 0.6:
                recs.append(_step(f"s{i}", 5, error={"type": "E", "message": "m"}))
            elif r < 0.72:
                cps.append(f"cp{i}")
                recs.append({"kind": "checkpoint", "name": cps[-1]})
            elif r < 0.82 and cps:
                recs.append({"kind": "rollback", "checkpoint": rnd.choice([*cps, "start", "nowhere"])})
            else:
                recs.append({"kind": "start", "attempt": i, "resume": True})
        run = _journal(tmp_path / f"r{n}", recs)
        entries = JournalReader(run).load()
        want = _oracle_saved(JournalReader(run).load())
        assert run_usage(entries).saved_tokens.input == want, recs


def test_a_fork_saved_nothing_until_it_runs(tmp_path: Path) -> None:
    """A fork copies its origin's records, start records included: it saved nothing until its own attempt
    resumes on them (issue 26: "saved by resume" showed on a fork that never ran)."""
    run = _journal(tmp_path / "f", [
        {"kind": "start", "attempt": 1, "resume": False},
        _step("a", 10),
        {"kind": "start", "attempt": 2, "resume": True},  # the origin's resume: served a
        _step("b", 100),
        {"kind": "fork", "origin": "runs/x", "seq": 3},
        {"kind": "checkpoint", "name": "fork"},
    ])
    assert run_usage(load(run)).saved_tokens.input == 0
    with open(run / "journal.jsonl", "ab") as f:
        f.write(orjson.dumps({"kind": "start", "attempt": 3, "resume": True, "seq": 6}) + b"\n")
    assert run_usage(load(run)).saved_tokens.input == 110  # the fork's own attempt served a and b


def test_cost_command_by_model_and_by_step(tmp_path: Path) -> None:
    """``cost RUN``: the paid calls by model (every try), by step, the total and what resuming saved (issue 26)."""
    run = _with_usage(ROOT / "sample_runs" / "runs" / "rolled-back", tmp_path / "rb", {
        "plan": ("gpt-4o", "openai", 1000, 100),
        "summarize": ("gpt-4o-mini", "openai", 2000, 200),
        "write_report": ("not-a-known-model-xyz", "openai", 10, 10),
    })
    plan, summarize = (1000 * 2.50 + 100 * 10.0) / 1e6, (2000 * 0.15 + 200 * 0.60) / 1e6

    def cost(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "supervisor", "cost", str(run), *args], capture_output=True,
                              text=True, timeout=60, env=clean_env(), cwd=ROOT)

    doc = orjson.loads(cost("--json").stdout)
    rows = {r["name"]: r for r in doc["rows"]}
    assert [r["name"] for r in doc["rows"]] == ["gpt-4o", "gpt-4o-mini", "not-a-known-model-xyz"]  # by cost
    assert rows["gpt-4o-mini"]["calls"] == 4 and rows["gpt-4o-mini"]["cost_usd"] == pytest.approx(4 * summarize)
    assert rows["not-a-known-model-xyz"]["cost_usd"] is None and rows["not-a-known-model-xyz"]["unpriced"] == 1
    assert doc["total"]["calls"] == 6 and doc["total"]["unpriced"] == 1
    assert doc["total"]["cost_usd"] == pytest.approx(plan + 4 * summarize)
    assert doc["saved"]["cost_usd"] == pytest.approx(plan) and doc["saved"]["calls"] == 1
    by_step = {r["name"]: r["calls"] for r in orjson.loads(cost("--by", "step", "--json").stdout)["rows"]}
    assert by_step == {"plan": 1, "summarize": 4, "write_report": 1}
    text = cost().stdout.splitlines()
    assert text[0].split() == ["model", "calls", "in", "cached", "out", "cost"]
    assert text[1].split()[:2] == ["gpt-4o", "1"] and text[-2].split()[0] == "total"
    assert "served from the journal on resume" in text[-1]


def test_a_tiny_cost_is_not_shown_as_zero() -> None:
    """``status`` printed ``$0.0000`` for a $0.000012 run (issue 29, item 6)."""
    from supervisor.cli.supervise_cmds import _usd
    from supervisor.views.fmt import fmt_cost

    assert _usd(0.000012) == "$0.000012" and _usd(0.0165) == "$0.0165" and _usd(0.0) == "$0.0000"
    assert fmt_cost(0.00009) == "$0.00009" and fmt_cost(0.0000123456) == "$0.000012" and fmt_cost(0.0064) == "$0.0064"
