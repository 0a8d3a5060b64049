#!/usr/bin/env bash
# An unmodified agent in bash + curl, found its endpoints only through the environment: OPENAI_BASE_URL,
# OPENAI_API_KEY, ANTHROPIC_BASE_URL (no /v1: the client adds it), ANTHROPIC_API_KEY. JSON is built and read
# by python3 -c ($PYTHON if set). Six model calls, each turn carrying the answers before it:
#   1. chat, plain; 2. chat, plain; 3. chat, streamed (curl -N, the SSE read line by line);
#   4. Anthropic messages, plain; 5. messages, plain; 6. messages, streamed.
# Writes the concatenated answers to AGENT_OUT (atomically) and exits 0. Run again, it starts over.
set -euo pipefail

PY=${PYTHON:-python3}
WORK=$(mktemp -d "${AGENT_OUT}.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# req CONV MODEL TEXT EXTRA: append the user's TEXT to the conversation CONV; print the request body
# (model, messages, and the JSON object EXTRA merged in).
# ans CONV FORM: read an answer (FORM: chat, chat-sse, messages, messages-sse) on stdin, print its text,
# append it to CONV and to the answers.
HELPER='
import json, os, sys
cmd, conv = sys.argv[1], os.path.join(os.environ["WORK"], sys.argv[2])
msgs = json.load(open(conv)) if os.path.exists(conv) else []
if cmd == "req":
    model, text, extra = sys.argv[3:6]
    msgs.append({"role": "user", "content": text})
    body = {"model": model, "messages": msgs, **json.loads(extra)}
    print(json.dumps(body))
else:
    form = sys.argv[3]
    if form == "chat":
        text = json.load(sys.stdin)["choices"][0]["message"]["content"]
    elif form == "messages":
        text = "".join(b["text"] for b in json.load(sys.stdin)["content"] if b["type"] == "text")
    else:
        parts, ended = [], False
        for line in sys.stdin:
            line = line.rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                ended = True
                continue
            ev = json.loads(line[6:])
            if form == "chat-sse":
                parts += [c["delta"].get("content") or "" for c in ev["choices"]]
            else:
                if ev["type"] == "content_block_delta" and ev["delta"]["type"] == "text_delta":
                    parts.append(ev["delta"]["text"])
                ended = ended or ev["type"] == "message_stop"
        if not ended:
            sys.exit("the stream ended before its last event")
        text = "".join(parts)
    msgs.append({"role": "assistant", "content": text})
    with open(os.path.join(os.environ["WORK"], "answers"), "a") as f:
        f.write(text + "\n")
    print(text)
json.dump(msgs, open(conv + ".tmp", "w"))
os.replace(conv + ".tmp", conv)
'
export WORK
req() { "$PY" -c "$HELPER" req "$@"; }
ans() { "$PY" -c "$HELPER" ans "$@"; }

openai() {  # POST a body to chat/completions; the answer's body on stdout (-N: an SSE body as it comes)
  curl -sS -f -N -X POST "$OPENAI_BASE_URL/chat/completions" -H "content-type: application/json" \
    -H "Authorization: Bearer $OPENAI_API_KEY" --data-binary "$1"
}
anthropic() {
  curl -sS -f -N -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "content-type: application/json" \
    -H "x-api-key: $ANTHROPIC_API_KEY" -H "anthropic-version: 2023-06-01" --data-binary "$1"
}

# (each body is built before its pipeline: ``req`` and ``ans`` both rewrite the conversation's file)
echo '[{"role": "system", "content": "You are a careful research assistant (curl)."}]' > "$WORK/oai"
b=$(req oai gpt-4o-mini "Name a topic worth researching." '{}')
a=$(openai "$b" | ans oai chat); echo "1 chat: $a"
b=$(req oai gpt-4o-mini "Outline it in three points." '{}')
a=$(openai "$b" | ans oai chat); echo "2 chat: $a"
b=$(req oai gpt-4o-mini "Expand the first point." '{"stream": true}')
a=$(openai "$b" | ans oai chat-sse); echo "3 chat stream: $a"
b=$(req ant claude-haiku-4-5 "Review this outline: $a" '{"max_tokens": 256}')
a=$(anthropic "$b" | ans ant messages); echo "4 messages: $a"
b=$(req ant claude-haiku-4-5 "Anything missing?" '{"max_tokens": 256}')
a=$(anthropic "$b" | ans ant messages); echo "5 messages: $a"
b=$(req ant claude-haiku-4-5 "Say it once more." '{"max_tokens": 256, "stream": true}')
a=$(anthropic "$b" | ans ant messages-sse); echo "6 messages stream: $a"

cp "$WORK/answers" "$AGENT_OUT.tmp"
mv -f "$AGENT_OUT.tmp" "$AGENT_OUT"
echo done
