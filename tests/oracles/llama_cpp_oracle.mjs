// Runs a GGUF file in llama.cpp (node-llama-cpp's prebuilt CPU binary) and writes, for every
// position of a token sequence fed one token at a time, llama.cpp's next-token probabilities
// (softmax of its logits: temperature 1, no top-k/top-p/min-p; f32 KV cache), for kvlab's GGUF
// export test.
// usage: node llama_cpp_oracle.mjs ORACLES_DIR ID,ID,... FILE.gguf OUT.json [FILE.gguf OUT.json ...]
import { writeFileSync, renameSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, ids, ...files] = process.argv.slice(2);
const { getLlama } = await import(
  pathToFileURL(join(dir, "llama-cpp/node_modules/node-llama-cpp/dist/index.js")).href);
const tokens = ids.split(",").map(Number);
// llama.cpp's CPU flash-attention kernel computes in f16 (probabilities then differ by ~1e-3):
// the oracle runs the f32 path
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
for (let f = 0; f + 1 < files.length; f += 2) {
  const [file, out] = [files[f], files[f + 1]];
  const model = await llama.loadModel({ modelPath: file });
  const context = await model.createContext({
    contextSize: tokens.length + 8,
    flashAttention: false,
    // one thread: the default pool's threads spin between tiny evaluations, which on 2 cores
    // took 3.4 s a model against 0.1 s (the same probabilities, bit for bit)
    threads: 1,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  const rows = [];
  const steps = sequence.evaluateWithMetadata([tokens[0]], { probabilities: true },
                                              { temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1,
                                                yieldEogToken: true });
  let step = await steps.next();
  for (let i = 1; ; ++i) {
    const row = {};
    for (const [token, p] of step.value.probabilities) row[token] = p;
    rows.push(row);
    if (i >= tokens.length) break;
    step = await steps.next(tokens[i]);  // teacher forcing: the next input is ours
  }
  await steps.return();
  await context.dispose();
  await model.dispose();
  writeFileSync(out + ".tmp", JSON.stringify(rows));
  renameSync(out + ".tmp", out);
}
process.exit(0);
