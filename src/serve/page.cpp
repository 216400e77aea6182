#include "serve/page.h"

namespace kvlab::serve {

std::string_view index_html() {
  static constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvlab serve</title>
<link rel="icon" href="data:,">
<style>
  :root { --fg: #1d2330; --muted: #667085; --line: #d0d5dd; --accent: #3559c7; --bg: #f7f8fa; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
         color: var(--fg); background: var(--bg); }
  main { max-width: 920px; margin: 0 auto; padding: 16px; }
  h1 { font-size: 20px; margin: 4px 0 2px; }
  .sub { color: var(--muted); margin-bottom: 14px; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px;
            margin-bottom: 14px; }
  h2 { font-size: 14px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
       margin: 0 0 8px; }
  .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 8px; }
  .stat { border-left: 3px solid var(--accent); padding: 2px 8px; }
  .stat b { display: block; font-size: 19px; font-variant-numeric: tabular-nums; }
  .stat span { color: var(--muted); font-size: 13px; }
  textarea, input { width: 100%; font: inherit; padding: 8px; border: 1px solid var(--line);
                    border-radius: 6px; }
  textarea { min-height: 80px; resize: vertical; }
  .row { display: flex; gap: 8px; align-items: center; margin-top: 8px; flex-wrap: wrap; }
  .row label { color: var(--muted); font-size: 13px; }
  .row input { width: 90px; }
  button { font: inherit; padding: 8px 16px; border: 0; border-radius: 6px; background: var(--accent);
           color: #fff; cursor: pointer; }
  button:disabled { opacity: .5; cursor: default; }
  pre { white-space: pre-wrap; word-break: break-word; background: var(--bg); border-radius: 6px;
        padding: 10px; min-height: 60px; margin: 10px 0 0; font: 14px/1.4 ui-monospace, monospace; }
  #state { color: var(--muted); font-size: 13px; }
</style>
</head>
<body>
<main>
  <h1>kvlab serve: <span id="model">…</span></h1>
  <div class="sub">attention <b id="attn">…</b> · <span id="layers">…</span> layers ·
    cache <span id="cache-dtype">…</span></div>
  <section>
    <h2>KV cache</h2>
    <div class="grid">
      <div class="stat"><b id="bytes-per-token">…</b><span>per token, all layers</span></div>
      <div class="stat"><b id="pool">…</b><span>pages of <span id="page-size">…</span> tokens, <span id="budget">…</span></span></div>
      <div class="stat"><b id="tokens">…</b><span>tokens held</span></div>
      <div class="stat"><b id="max-concurrency">…</b><span>requests of <span id="max-model-len">…</span> tokens at once</span></div>
    </div>
  </section>
  <section>
    <h2>Live</h2>
    <div class="grid">
      <div class="stat"><b id="running">…</b><span>running</span></div>
      <div class="stat"><b id="waiting">…</b><span>waiting</span></div>
      <div class="stat"><b id="cache-usage">…</b><span>KV cache in use</span></div>
      <div class="stat"><b id="tokens-per-s">…</b><span>generated tokens/s</span></div>
      <div class="stat"><b id="ttft">…</b><span>time to first token (mean)</span></div>
      <div class="stat"><b id="itl">…</b><span>inter-token latency (mean)</span></div>
    </div>
  </section>
  <section>
    <h2>Try it</h2>
    <textarea id="prompt" aria-label="prompt">In the beginning</textarea>
    <div class="row">
      <label for="max-tokens">max tokens</label><input id="max-tokens" type="number" value="64" min="1">
      <label for="temperature">temperature</label><input id="temperature" type="number" value="0.7" min="0" max="2" step="0.1">
      <button id="send">Generate</button><span id="state"></span>
    </div>
    <pre id="output"></pre>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const bytes = (n) => {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toString() : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
};
const count = (n) => Math.round(n).toLocaleString("en-US");
const ms = (s) => (s * 1000).toFixed(s < 0.001 ? 2 : s < 0.1 ? 1 : 0) + " ms";

async function loadInfo() {
  const info = await (await fetch("/info")).json();
  $("model").textContent = info.model;
  $("attn").textContent = info.attn;
  $("layers").textContent = info.layers;
  $("cache-dtype").textContent = info.cache_dtype;
  $("bytes-per-token").textContent = bytes(info.bytes_per_token);
  $("bytes-per-token").dataset.value = info.bytes_per_token;
  $("pool").textContent = count(info.pages);
  $("page-size").textContent = info.page_size;
  $("budget").textContent = bytes(info.budget_bytes);
  $("tokens").textContent = count(info.tokens);
  $("max-concurrency").textContent = info.max_concurrency.toFixed(2) + "×";
  $("max-model-len").textContent = count(info.max_model_len);
}

// Prometheus text: sample name (labels dropped, summed) -> value
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    const name = line.slice(0, space).replace(/\{.*\}$/, "");
    out[name] = (out[name] || 0) + Number(line.slice(space + 1));
  }
  return out;
}
let last = null;
async function poll() {
  try {
    const now = performance.now();
    const m = parseMetrics(await (await fetch("/metrics")).text());
    $("running").textContent = count(m["kvlab:num_requests_running"]);
    $("waiting").textContent = count(m["kvlab:num_requests_waiting"]);
    $("cache-usage").textContent = (100 * m["kvlab:kv_cache_usage_perc"]).toFixed(1) + " %";
    const mean = (name) => m[name + "_count"] > 0 ? ms(m[name + "_sum"] / m[name + "_count"]) : "—";
    $("ttft").textContent = mean("kvlab:time_to_first_token_seconds");
    $("itl").textContent = mean("kvlab:inter_token_latency_seconds");
    if (last) {
      const rate = (m["kvlab:generation_tokens_total"] - last.tokens) / ((now - last.at) / 1000);
      $("tokens-per-s").textContent = rate.toFixed(1);
    }
    last = { at: now, tokens: m["kvlab:generation_tokens_total"] };
  } catch (e) {
    $("state").textContent = "metrics unavailable: " + e.message;
  }
}

async function generate() {
  const out = $("output");
  out.textContent = "";
  $("send").disabled = true;
  $("state").textContent = "streaming…";
  try {
    const res = await fetch("/v1/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: $("prompt").value, max_tokens: Number($("max-tokens").value),
                             temperature: Number($("temperature").value), stream: true }),
    });
    if (!res.ok) {
      const e = await res.json();
      throw new Error(e.error ? e.error.message : res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", finish = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.choices.length === 0) continue;
        out.textContent += chunk.choices[0].text;
        if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      }
    }
    $("state").textContent = "done (" + finish + ")";
  } catch (e) {
    $("state").textContent = "error: " + e.message;
  } finally {
    $("send").disabled = false;
  }
}

$("send").addEventListener("click", generate);
loadInfo().catch((e) => { $("state").textContent = "info unavailable: " + e.message; });
poll();
setInterval(poll, 1000);
</script>
</body>
</html>
)page";
  return kPage;
}

}  // namespace kvlab::serve
