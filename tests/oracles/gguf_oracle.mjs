// Reads a GGUF file with @huggingface/gguf (the Hugging Face Hub's parser) and writes what it
// found as JSON, for kvlab's GGUF export test.
// usage: node gguf_oracle.mjs ORACLES_DIR FILE.gguf OUT.json
import { writeFileSync, renameSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, file, out] = process.argv.slice(2);
const { gguf } = await import(pathToFileURL(join(dir, "node_modules/@huggingface/gguf/dist/index.mjs")).href);
const parsed = await gguf(file, { allowLocalFile: true, typedMetadata: true });
const plain = (value) => JSON.parse(JSON.stringify(value, (k, v) => (typeof v === "bigint" ? Number(v) : v)));
writeFileSync(out + ".tmp", JSON.stringify({
  typedMetadata: plain(parsed.typedMetadata),
  tensorInfos: plain(parsed.tensorInfos),
  tensorDataOffset: Number(parsed.tensorDataOffset),
}));
renameSync(out + ".tmp", out);
