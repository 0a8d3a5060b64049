"""An unmodified agent on the real ``anthropic`` client: found its endpoint only through the environment.

``Anthropic()`` reads ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``. One conversation of 6 model calls,
each turn carrying the answers before it:

1. plain; 2. streamed (``client.messages.stream``); 3. with a tool: the model asks for it (``tool_use``);
4. with the tool's result; 5. streamed, with ``SLOW`` in the prompt (the server takes about a second over it:
a test can kill the agent mid-stream); 6. plain.

Writes the concatenated answers to ``AGENT_OUT`` (atomically) and exits 0. Run again, it starts over.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from anthropic import Anthropic

MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a careful research assistant. Answer briefly."
TOOLS = [{"name": "lookup", "description": "Look a term up in the knowledge base.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


def say(msg: str) -> None:
    print(msg, flush=True)


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def main() -> int:
    client = Anthropic(max_retries=3, timeout=30)
    answers: list[str] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Name a topic worth researching."}]

    m = client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=messages)
    text = text_of(m)
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"1 messages: {text} ({m.usage.input_tokens} in, {m.usage.output_tokens} out)")

    messages.append({"role": "user", "content": "Outline it in three points."})
    with client.messages.stream(model=MODEL, max_tokens=256, system=SYSTEM, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"2 stream: {text} ({final.usage.output_tokens} out)")

    messages.append({"role": "user", "content": "Look the first point up."})
    m = client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=messages, tools=TOOLS)
    uses = [b for b in m.content if b.type == "tool_use"]
    if not uses:
        say("expected a tool_use block")
        return 1
    messages.append({"role": "assistant", "content": [
        {"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": u.id, "content": f"the knowledge base says {u.input['query']!r} is fine"}
        for u in uses]})
    answers.append(" ".join(f"{u.name}({json.dumps(u.input, sort_keys=True)})" for u in uses))
    say(f"3 tool use: {answers[-1]}")

    m = client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=messages, tools=TOOLS)
    text = text_of(m)
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"4 after the tool: {text}")

    messages.append({"role": "user", "content": "SLOW: write the long version."})
    parts = []
    with client.messages.stream(model=MODEL, max_tokens=1024, system=SYSTEM, messages=messages) as stream:
        for piece in stream.text_stream:
            parts.append(piece)
    text = "".join(parts)
    answers.append(text)
    messages.append({"role": "assistant", "content": text})
    say(f"5 slow stream: {text}")

    messages.append({"role": "user", "content": "And a title for it?"})
    m = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=messages)
    answers.append(text_of(m))
    say(f"6 messages: {answers[-1]}")

    out = Path(os.environ["AGENT_OUT"])
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(answers) + "\n")
    os.replace(tmp, out)
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
