// An unmodified agent in Node (v20: the built-in fetch, no npm package), found its endpoint only through
// the environment: OPENAI_BASE_URL and OPENAI_API_KEY. One conversation of 6 chat completion calls, each
// turn carrying the answers before it:
//   1. plain; 2. streamed (the SSE body read by hand, with include_usage); 3. with a tool: the model asks
//   for it; 4. with the tool's result; 5. streamed, with SLOW in the prompt (about a second: a test can
//   kill the agent mid-stream); 6. plain.
// Writes the concatenated answers to AGENT_OUT (atomically) and exits 0. Run again, it starts over.
import { renameSync, writeFileSync } from "node:fs";

const BASE = process.env.OPENAI_BASE_URL;
const KEY = process.env.OPENAI_API_KEY;
const MODEL = "gpt-4o-mini";
const TOOLS = [{ type: "function", function: { name: "lookup", description: "Look a term up.",
  parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] } } }];

async function post(body) {
  const r = await fetch(`${BASE}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  return r;
}

async function chat(messages, extra = {}) {
  const r = await post({ model: MODEL, messages, ...extra });
  return (await r.json()).choices[0].message;
}

async function chatStream(messages) {
  const r = await post({ model: MODEL, messages, stream: true, stream_options: { include_usage: true } });
  const decoder = new TextDecoder();
  let buf = "", text = "", done = false, usage = null;
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") { done = true; continue; }
        const obj = JSON.parse(data);
        if (obj.usage) usage = obj.usage;
        for (const c of obj.choices) if (c.delta && c.delta.content) text += c.delta.content;
      }
    }
  }
  if (!done) throw new Error("the stream ended without [DONE]");
  return { text, usage };
}

const say = (msg) => console.log(msg);
const answers = [];
const messages = [
  { role: "system", content: "You are a careful research assistant. Answer briefly." },
  { role: "user", content: "Name a topic worth researching (node)." },
];

let m = await chat(messages);
answers.push(m.content);
messages.push({ role: "assistant", content: m.content });
say(`1 chat: ${m.content}`);

messages.push({ role: "user", content: "Outline it in three points." });
let s = await chatStream(messages);
answers.push(s.text);
messages.push({ role: "assistant", content: s.text });
say(`2 chat stream: ${s.text} (usage ${s.usage && s.usage.completion_tokens})`);

messages.push({ role: "user", content: "Look the first point up." });
m = await chat(messages, { tools: TOOLS });
if (!m.tool_calls || !m.tool_calls.length) throw new Error("expected a tool call");
messages.push({ role: "assistant", content: null, tool_calls: m.tool_calls });
for (const c of m.tool_calls) {
  const q = JSON.parse(c.function.arguments).query;
  messages.push({ role: "tool", tool_call_id: c.id, content: `the knowledge base says ${q} is fine` });
  answers.push(`${c.function.name}(${c.function.arguments})`);
}
say(`3 tool call: ${answers[answers.length - 1]}`);

m = await chat(messages, { tools: TOOLS });
answers.push(m.content);
messages.push({ role: "assistant", content: m.content });
say(`4 after the tool: ${m.content}`);

messages.push({ role: "user", content: "SLOW: the long version." });
s = await chatStream(messages);
answers.push(s.text);
messages.push({ role: "assistant", content: s.text });
say(`5 slow stream: ${s.text}`);

messages.push({ role: "user", content: "And a title?" });
m = await chat(messages);
answers.push(m.content);
say(`6 chat: ${m.content}`);

const out = process.env.AGENT_OUT;
writeFileSync(`${out}.tmp`, answers.join("\n") + "\n");
renameSync(`${out}.tmp`, out);
say("done");
