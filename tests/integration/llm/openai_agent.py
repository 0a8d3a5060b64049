"""An unmodified agent on the real ``openai`` client: found its endpoint only through the environment.

``OpenAI()`` reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``. One conversation of 7 model calls, each
turn carrying the answers before it:

1. chat, plain; 2. chat, streamed with ``include_usage``; 3. chat with a tool: the model asks for it;
4. chat with the tool's result; 5. Responses, plain; 6. chat whose prompt holds ``FAIL429-ONCE:<tag>``
(a fresh server answers it 429 once: the client retries by itself, so 8 requests reach it);
7. Responses, streamed.

Writes the concatenated answers to ``AGENT_OUT`` (atomically) and exits 0. Run again, it starts over.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from openai import OpenAI

MODEL = "gpt-4o-mini"
TAG = os.environ.get("AGENT_FAIL_TAG", "openai-agent")
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a term up in the knowledge base.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


def say(msg: str) -> None:
    print(msg, flush=True)


def lookup(query: str) -> str:
    return f"the knowledge base says {query!r} is a fine topic"


def main() -> int:
    client = OpenAI(max_retries=3, timeout=30)
    answers: list[str] = []
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful research assistant. Answer briefly."},
        {"role": "user", "content": "Name a topic worth researching."},
    ]

    r = client.chat.completions.create(model=MODEL, messages=messages)
    text = r.choices[0].message.content or ""
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"1 chat: {text}")

    messages.append({"role": "user", "content": "Outline it in three points."})
    parts = []
    usage = None
    stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    text = "".join(parts)
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"2 chat stream: {text} (usage {usage.completion_tokens if usage else None})")

    messages.append({"role": "user", "content": "Look the first point up."})
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    msg = r.choices[0].message
    calls = msg.tool_calls or []
    if not calls:
        say("expected a tool call")
        return 1
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in calls]})
    for c in calls:
        result = lookup(json.loads(c.function.arguments)["query"])
        messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
        answers.append(f"{c.function.name}({c.function.arguments})")
    say(f"3 tool call: {answers[-1]}")

    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    text = r.choices[0].message.content or ""
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"4 after the tool: {text}")

    resp = client.responses.create(model=MODEL, instructions="Summarize briefly.",
                                   input=f"Summarize: {' / '.join(answers)}")
    answers.append(resp.output_text)
    say(f"5 responses: {resp.output_text}")

    messages.append({"role": "user", "content": f"Now the conclusion. FAIL429-ONCE:{TAG}"})
    r = client.chat.completions.create(model=MODEL, messages=messages)
    text = r.choices[0].message.content or ""
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"6 chat after a 429: {text}")

    parts = []
    with client.responses.create(model=MODEL, input=f"A title for: {text}", stream=True) as events:
        for ev in events:
            if ev.type == "response.output_text.delta":
                parts.append(ev.delta)
    answers.append("".join(parts))
    say(f"7 responses stream: {answers[-1]}")

    out = Path(os.environ["AGENT_OUT"])
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(answers) + "\n")
    os.replace(tmp, out)
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
