// Opens `kvlab serve`'s page in a real browser (Debian's chromium, headless, driven by
// puppeteer-core) at a phone's width: it must load without console errors, show the numbers
// /info, /v1/models and /metrics give, and stream a completion into the page token by token.
// Writes a screenshot. Exits 1 naming the first check that fails.
// usage: node page_check.mjs ORACLES_DIR CONFIG.json
//   CONFIG: {url, chromium, screenshot, prompt, max_tokens, expected}
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [dir, configPath] = process.argv.slice(2);
const require = createRequire(join(dir, "package.json"));
const puppeteer = require("puppeteer-core");
const config = JSON.parse(readFileSync(configPath, "utf8"));

let browser;
function fail(what, detail) {
  console.error(`FAILED: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  if (browser) browser.close();
  process.exit(1);
}

browser = await puppeteer.launch({
  executablePath: config.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
const errors = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(e.message));
page.on("requestfailed", (r) => errors.push("request failed: " + r.url()));
await page.setViewport({ width: 390, height: 844 });  // a phone
await page.goto(config.url + "/", { waitUntil: "load", timeout: 30000 });

// the numbers, once the page has fetched them
await page.waitForFunction(() => document.getElementById("bytes-per-token").dataset.value !== undefined &&
                                 document.getElementById("running").textContent !== "…", { timeout: 20000 });
const info = await (await fetch(config.url + "/info")).json();
const models = await (await fetch(config.url + "/v1/models")).json();
const shown = await page.evaluate(() => {
  const text = (id) => document.getElementById(id).textContent;
  return {
    model: text("model"), attn: text("attn"), bytes: Number(document.getElementById("bytes-per-token").dataset.value),
    bytesText: text("bytes-per-token"), tokens: text("tokens"), running: text("running"),
    concurrency: text("max-concurrency"), overflow: document.documentElement.scrollWidth > window.innerWidth,
  };
});
if (shown.model !== models.data[0].id) fail("the model's name", shown);
if (shown.attn !== info.attn) fail("the attention variant", shown);
if (shown.bytes !== info.bytes_per_token) fail("bytes per token", [shown.bytes, info.bytes_per_token]);
if (!/ (B|KiB|MiB|GiB)$/.test(shown.bytesText)) fail("bytes shown with a unit", shown.bytesText);
if (shown.tokens !== info.tokens.toLocaleString("en-US")) fail("tokens held", [shown.tokens, info.tokens]);
if (shown.concurrency !== info.max_concurrency.toFixed(2) + "×") fail("max concurrency", shown.concurrency);
if (shown.running !== "0") fail("running requests at rest", shown.running);
if (shown.overflow) fail("the page fits a phone's width");

// a streamed completion, watched as it grows
await page.evaluate((prompt, maxTokens) => {
  document.getElementById("prompt").value = prompt;
  document.getElementById("max-tokens").value = String(maxTokens);
  document.getElementById("temperature").value = "0";
  window.kvlabUpdates = 0;
  // one record per change of the output's text: one per streamed event with text
  new MutationObserver((records) => { window.kvlabUpdates += records.length; })
    .observe(document.getElementById("output"), { childList: true, characterData: true, subtree: true });
}, config.prompt, config.max_tokens);
await page.click("#send");
await page.waitForFunction(() => document.getElementById("state").textContent.startsWith("done") ||
                                 document.getElementById("state").textContent.startsWith("error"),
                           { timeout: 60000 });
const result = await page.evaluate(() => ({
  text: document.getElementById("output").textContent,
  state: document.getElementById("state").textContent,
  updates: window.kvlabUpdates,
}));
if (result.text !== config.expected) fail("the streamed text", { got: result.text, expected: config.expected });
if (result.state !== "done (length)") fail("the state line", result.state);
// 40 byte tokens of ASCII text: an event, and an update of the page, each
if (result.updates < config.max_tokens) fail("the text arrived token by token", result.updates);
// the live numbers saw the tokens
await page.waitForFunction(() => document.getElementById("ttft").textContent.endsWith("ms"), { timeout: 10000 });
await page.screenshot({ path: config.screenshot, fullPage: true });
if (errors.length > 0) fail("console errors", errors);
await browser.close();
console.log(`page: ${JSON.stringify({ ...shown, updates: result.updates, screenshot: config.screenshot })}`);
