// Drives `kvlab serve` with clients no one here wrote: OpenAI's official client library (openai on
// npm) for completions and chat, streamed and not, stop strings, usage and errors, and a Prometheus
// text-format parser (parse-prometheus-text-format) for /metrics. Exits 1 naming the first check
// that fails.
// usage: node openai_client.mjs ORACLES_DIR CONFIG.json
//   CONFIG: {url, model, key_url, api_key, cases: [{prompt, max_tokens, expected, stop}]}
//   expected: the text `kvlab generate` prints for the prompt (greedy).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [dir, configPath] = process.argv.slice(2);
const require = createRequire(join(dir, "package.json"));
const OpenAI = require("openai");
const parsePrometheus = require("parse-prometheus-text-format");
const config = JSON.parse(readFileSync(configPath, "utf8"));
let checks = 0;

function check(condition, what, detail) {
  checks += 1;
  if (!condition) {
    console.error(`FAILED: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
}

const client = new OpenAI({ baseURL: config.url + "/v1", apiKey: "unused", maxRetries: 0 });

// /metrics, parsed: name -> the family's samples
async function metrics() {
  const text = await (await fetch(config.url + "/metrics")).text();
  const families = parsePrometheus(text);  // throws on text that is not the exposition format
  const byName = {};
  for (const f of families) byName[f.name] = f;
  return byName;
}
const value = (m, name) => {
  check(m[name] !== undefined, `/metrics has ${name}`);
  return m[name].metrics.reduce((sum, s) => sum + Number(s.value ?? s.count), 0);
};
async function quiet() {
  // the engine publishes its gauges after each step: wait (bounded) for the requests to be gone
  for (let i = 0; i < 200; i++) {
    const m = await metrics();
    if (value(m, "kvlab:num_requests_running") === 0 && value(m, "kvlab:num_requests_waiting") === 0) return m;
    await new Promise((r) => setTimeout(r, 25));
  }
  check(false, "the server's running and waiting requests return to 0");
}

const models = await client.models.list();
check(models.data.some((m) => m.id === config.model), "models.list names the model", models.data);

// Completions and chat, greedy, streamed and not: the text kvlab generate prints
const before = await quiet();
let completionTokens = 0, promptTokens = 0, requests = 0;
for (const c of config.cases) {
  const r = await client.completions.create({
    model: config.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0,
  });
  check(r.object === "text_completion", "completion object", r.object);
  check(r.choices[0].text === c.expected, `completion text of ${JSON.stringify(c.prompt)}`,
        { got: r.choices[0].text, expected: c.expected });
  check(r.choices[0].finish_reason === "length", "finish_reason length", r.choices[0].finish_reason);
  check(r.usage.completion_tokens === c.max_tokens, "usage.completion_tokens", r.usage);
  check(r.usage.prompt_tokens === Buffer.byteLength(c.prompt), "usage.prompt_tokens (bytes)", r.usage);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "usage.total_tokens");
  completionTokens += r.usage.completion_tokens;
  promptTokens += r.usage.prompt_tokens;
  requests += 1;

  const stream = await client.completions.create({
    model: config.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check(text === c.expected, "streamed completion text", { got: text, expected: c.expected });
  check(chunks > 2, "a stream of several chunks", chunks);
  check(finish === "length", "streamed finish_reason", finish);
  check(usage !== null && usage.completion_tokens === c.max_tokens, "streamed usage", usage);
  completionTokens += usage.completion_tokens;
  promptTokens += usage.prompt_tokens;
  requests += 1;
}

const messages = [{ role: "system", content: "be brief" }, { role: "user", content: config.cases[0].prompt }];
const chat = await client.chat.completions.create({ model: config.model, messages, max_tokens: 12, temperature: 0 });
check(chat.object === "chat.completion", "chat object", chat.object);
check(chat.choices[0].message.role === "assistant", "chat role", chat.choices[0].message);
check(chat.usage.completion_tokens === 12, "chat usage", chat.usage);
// the plain template, rendered as kvlab documents it
const plain = "system: be brief\nuser: " + config.cases[0].prompt + "\nassistant: ";
check(chat.usage.prompt_tokens === Buffer.byteLength(plain), "chat prompt is the plain template", chat.usage);
const chatStream = await client.chat.completions.create({
  model: config.model, messages, max_tokens: 12, temperature: 0, stream: true,
});
let chatText = "", role = null;
for await (const chunk of chatStream) {
  if (chunk.choices[0]?.delta?.role) role = chunk.choices[0].delta.role;
  chatText += chunk.choices[0]?.delta?.content ?? "";
}
check(role === "assistant", "streamed chat role");
check(chatText === chat.choices[0].message.content, "streamed chat == chat", { chatText, chat: chat.choices[0].message.content });
completionTokens += 24;
promptTokens += 2 * chat.usage.prompt_tokens;
requests += 2;

// /metrics counted exactly these requests
const after = await quiet();
const delta = (name) => value(after, name) - value(before, name);
check(delta("kvlab:generation_tokens_total") === completionTokens, "generation_tokens_total delta",
      [delta("kvlab:generation_tokens_total"), completionTokens]);
check(delta("kvlab:prompt_tokens_total") === promptTokens, "prompt_tokens_total delta",
      [delta("kvlab:prompt_tokens_total"), promptTokens]);
check(delta("kvlab:request_success_total") === requests, "request_success_total delta",
      [delta("kvlab:request_success_total"), requests]);
check(delta("kvlab:time_to_first_token_seconds") === requests, "TTFT histogram count delta");
check(delta("kvlab:e2e_request_latency_seconds") === requests, "e2e histogram count delta");
check(value(after, "kvlab:kv_cache_usage_perc") >= 0, "KV usage gauge");
const ttft = after["kvlab:time_to_first_token_seconds"].metrics[0];
check(Number(ttft.buckets["+Inf"]) === Number(ttft.count), "+Inf bucket == count");

// Stop strings: the text before the first one, finish_reason stop, streamed the same
for (const c of config.cases.filter((c) => c.stop)) {
  const want = c.expected.slice(0, c.expected.indexOf(c.stop));
  const r = await client.completions.create({
    model: config.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stop: [c.stop],
  });
  check(r.choices[0].text === want, `text before stop ${JSON.stringify(c.stop)}`, { got: r.choices[0].text, want });
  check(r.choices[0].finish_reason === "stop", "finish_reason stop", r.choices[0].finish_reason);
  const stream = await client.completions.create({
    model: config.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stop: c.stop, stream: true,
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  check(text === want && finish === "stop", "streamed stop", { text, want, finish });
}

// Seeded sampling is reproducible
const seeded = async () => (await client.completions.create({
  model: config.model, prompt: config.cases[0].prompt, max_tokens: 16, temperature: 0.9, seed: 1234,
})).choices[0].text;
const first = await seeded();
check(first === await seeded(), "the same seed, the same text");

// Errors surface as the client's error types
async function expectError(promise, Type, status, param) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof Type, `${Type.name} (got ${e.constructor.name}: ${e.message})`);
    check(e.status === status, `status ${status}`, e.status);
    if (param !== undefined) check(e.param === param, `error param ${param}`, e.param);
    return;
  }
  check(false, `expected ${Type.name}`);
}
const base = { model: config.model, prompt: "and", max_tokens: 4 };
await expectError(client.completions.create({ ...base, n: 2 }), OpenAI.BadRequestError, 400, "n");
await expectError(client.completions.create({ ...base, temperature: 5 }), OpenAI.BadRequestError, 400, "temperature");
await expectError(client.completions.create({ ...base, max_tokens: 1 << 20 }), OpenAI.BadRequestError, 400, "max_tokens");
await expectError(client.completions.create({ ...base, model: "no-such-model" }), OpenAI.NotFoundError, 404, "model");
await expectError(client.chat.completions.create({ model: config.model, messages: [] }), OpenAI.BadRequestError, 400, "messages");

// A server with --api-key: 401 without it, served with it
const noKey = new OpenAI({ baseURL: config.key_url + "/v1", apiKey: "wrong", maxRetries: 0 });
await expectError(noKey.completions.create(base), OpenAI.AuthenticationError, 401);
const withKey = new OpenAI({ baseURL: config.key_url + "/v1", apiKey: config.api_key, maxRetries: 0 });
check((await withKey.completions.create(base)).usage.completion_tokens === 4, "served with the key");

console.log(`openai client: ${checks} checks passed`);
