// kvlab's decode step against llama.cpp's on the same model and weight dtype: the checkpoint is
// exported to GGUF per dtype (`kvlab export --format gguf`), llama.cpp (node-llama-cpp's prebuilt
// CPU library, as the tests install it under build/oracles) and `kvlab bench generate` decode the
// same prompt length and token count greedily, alternating in each round; medians over rounds,
// and the ratios kvlab ÷ llama.cpp of the prompt's and the decode's tokens/s. Both use an f16 KV cache. A benchmark, not a test
// (docs/kernels/dense-decode.md has the command and the numbers).
//
// usage: node bench/compare_llama_cpp.mjs --checkpoint RUN [--kvlab build/bin/kvlab]
//          [--oracles build/oracles] [--dtypes f32,f16,bf16,q8_0,q4_0] [--threads 1,2]
//          [--prompt 128] [--generate 256] [--rounds 3] [--json OUT.json]
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, renameSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const args = { kvlab: "build/bin/kvlab", oracles: "build/oracles", dtypes: "f32,f16,bf16,q8_0,q4_0",
               threads: "1,2", prompt: "128", generate: "256", rounds: "3" };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, "");
  if (!(key in args) && key !== "checkpoint" && key !== "json" || i + 1 >= process.argv.length) {
    console.error(`unknown or incomplete flag: ${process.argv[i]}`);
    process.exit(2);
  }
  args[key] = process.argv[i + 1];
}
if (!args.checkpoint) {
  console.error("usage: node bench/compare_llama_cpp.mjs --checkpoint RUN [flags]; see the header");
  process.exit(2);
}
const dtypes = args.dtypes.split(",");
const threadCounts = args.threads.split(",").map(Number);
const [P, N, rounds] = [Number(args.prompt), Number(args.generate), Number(args.rounds)];
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

let getLlama;
try {
  ({ getLlama } = await import(pathToFileURL(
      join(args.oracles, "llama-cpp/node_modules/node-llama-cpp/dist/index.js")).href));
} catch (e) {
  console.error(`llama.cpp is not installed under ${args.oracles}/llama-cpp ` +
                "(tests/oracles/install-oracles installs it): " + e.message);
  process.exit(2);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const work = mkdtempSync(join(tmpdir(), "kvlab-vs-llama-cpp-"));
// the prompt kvlab's bench uses: token i is i·7 mod the vocabulary
const promptTokens = (vocab) => Array.from({ length: P }, (_, i) => (i * 7) % vocab);

async function llamaCppRound(model, threads) {
  const context = await model.createContext({ contextSize: P + N + 16, batchSize: P, threads,
                                              flashAttention: false });
  const sequence = context.getSequence();
  const tokens = promptTokens(256);  // byte vocabularies (kvlab export writes them)
  let t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(0, -1));
  const prefill_s = (performance.now() - t0) / 1e3;
  // each step of the generator evaluates one token and picks the next greedily
  const steps = sequence.evaluate([tokens[tokens.length - 1]], { temperature: 0 });
  t0 = performance.now();
  for (let i = 0; i < N; ++i) await steps.next();
  const decode_s = (performance.now() - t0) / 1e3;
  await steps.return();
  await context.dispose();
  return { prefill: (P - 1) / prefill_s, decode: N / decode_s };
}

function kvlabRound(dtype, threads) {
  const out = execFileSync(args.kvlab, [
    "bench", "generate", "--checkpoint", args.checkpoint, "--weight-dtype", dtype,
    "--cache-dtype", "f16", "--threads", String(threads), "--prompt", String(P),
    "--generate", String(N), "--long-prompt", "0", "--repeats", "3", "--format", "json"],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const row = JSON.parse(out).rows[0];
  return { prefill: row.prefill_tokens_per_s, decode: row.decode_tokens_per_s,
           roofline: row.roofline_fraction, bytes: row.weight_bytes };
}

const results = [];
console.log(`kvlab vs llama.cpp: ${args.checkpoint}, prompt ${P}, ${N} greedy tokens, f16 KV ` +
            `caches, ${rounds} rounds (medians); CPU: ${cpus()[0].model}\n`);
console.log("| weights | threads | llama.cpp prompt tok/s | kvlab prompt tok/s | prompt: kvlab ÷ " +
            "llama.cpp | llama.cpp decode tok/s | kvlab decode tok/s | decode: kvlab ÷ llama.cpp " +
            "| kvlab of roofline |");
console.log("|:--|--:|--:|--:|--:|--:|--:|--:|--:|");
for (const dtype of dtypes) {
  const gguf = join(work, `model-${dtype}.gguf`);
  execFileSync(args.kvlab, ["export", "--checkpoint", args.checkpoint, "--format", "gguf",
                            "--dtype", dtype, "--out", gguf], { stdio: "ignore" });
  const model = await llama.loadModel({ modelPath: gguf });
  for (const threads of threadCounts) {
    const theirs = [], ours = [];
    await llamaCppRound(model, threads);  // warm-up
    for (let r = 0; r < rounds; ++r) {
      theirs.push(await llamaCppRound(model, threads));
      ours.push(kvlabRound(dtype, threads));
    }
    const row = {
      weight_dtype: dtype, threads,
      llama_cpp_prefill_tokens_per_s: median(theirs.map((x) => x.prefill)),
      kvlab_prefill_tokens_per_s: median(ours.map((x) => x.prefill)),
      llama_cpp_decode_tokens_per_s: median(theirs.map((x) => x.decode)),
      kvlab_decode_tokens_per_s: median(ours.map((x) => x.decode)),
      kvlab_roofline_fraction: median(ours.map((x) => x.roofline)),
      kvlab_weight_bytes: ours[0].bytes,
    };
    row.prefill_ratio = row.kvlab_prefill_tokens_per_s / row.llama_cpp_prefill_tokens_per_s;
    row.decode_ratio = row.kvlab_decode_tokens_per_s / row.llama_cpp_decode_tokens_per_s;
    results.push(row);
    const f = (x) => x.toFixed(0);
    console.log(`| ${dtype} | ${threads} | ${f(row.llama_cpp_prefill_tokens_per_s)} | ` +
                `${f(row.kvlab_prefill_tokens_per_s)} | ${row.prefill_ratio.toFixed(2)}× | ` +
                `${f(row.llama_cpp_decode_tokens_per_s)} | ` +
                `${f(row.kvlab_decode_tokens_per_s)} | ${row.decode_ratio.toFixed(2)}× | ` +
                `${(100 * row.kvlab_roofline_fraction).toFixed(1)}% |`);
  }
  await model.dispose();
}
if (args.json) {
  writeFileSync(args.json + ".tmp", JSON.stringify({ checkpoint: args.checkpoint, prompt: P,
                                                     generate: N, rounds, rows: results }, null, 2));
  renameSync(args.json + ".tmp", args.json);
}
rmSync(work, { recursive: true, force: true });
process.exit(0);
