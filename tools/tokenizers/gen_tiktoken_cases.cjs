// Makes tiktoken_cases.json: the ids the real tiktoken (its Rust core, compiled to WASM: npm
// package `tiktoken`, 1.0.22 was used) gives for test texts, with both Whisper vocabularies.
//
//   npm install tiktoken@1.0.22
//   node gen_tiktoken_cases.cjs . TEXTS.json > tiktoken_cases.json
//
// TEXTS.json is a list of {"text": ..., "allow_special": true?}; the texts of the existing
// tiktoken_cases.json can be reused by passing it as TEXTS.json (each text is encoded once per
// vocabulary, whatever its "vocab" there).
const fs = require("fs");
const { Tiktoken } = require("tiktoken/lite");
const PAT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const LANGS = "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su".split(" ");
function load(path) {
  const lines = fs.readFileSync(path, "utf8").split("\n").filter((l) => l.length);
  lines.forEach((l, i) => { if (+l.split(" ")[1] !== i) throw new Error("rank order"); });
  const n = lines.length;
  const specials = {};
  const names = ["<|endoftext|>", "<|startoftranscript|>", ...LANGS.map((c) => `<|${c}|>`),
    "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"];
  for (let i = 0; i < 1501; i++) names.push(`<|${(i * 0.02).toFixed(2)}|>`);
  names.forEach((s, i) => { specials[s] = n + i; });
  // multilingual.tiktoken ends with an empty token ("=", rank 50256), which tiktoken-wasm cannot
  // take; it can never be produced, so it is left out (the special tokens keep their ids).
  const tokens = lines.map((l) => l.split(" ")[0]);
  while (tokens[tokens.length - 1] === "=") tokens.pop();
  const bfe = "! 0 " + tokens.join(" ");
  return new Tiktoken(bfe, specials, PAT);
}
const dir = process.argv[2];
const seen = new Set();
const texts = JSON.parse(fs.readFileSync(process.argv[3], "utf8")).filter((t) => {
  const key = JSON.stringify([t.text, !!t.allow_special]);
  return seen.has(key) ? false : (seen.add(key), true);
});
const encoders = { gpt2: load(dir + "/gpt2.tiktoken"), multilingual: load(dir + "/multilingual.tiktoken") };
const cases = [];
for (const vocab of ["gpt2", "multilingual"]) {
  for (const t of texts) {
    const ids = t.allow_special ? encoders[vocab].encode(t.text, "all") : encoders[vocab].encode_ordinary(t.text);
    const c = { vocab, text: t.text, ids: Array.from(ids) };
    if (t.allow_special) c.allow_special = true;
    cases.push(c);
  }
}
process.stdout.write("[\n" + cases.map((c) => "  " + JSON.stringify(c)).join(",\n") + "\n]\n");
