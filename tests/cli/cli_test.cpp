// Runs the kvlab program as a user would and checks stdout, stderr and exit codes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cli/run_kvlab.h"
#include "harness/process.h"
#include "kernels/fast_decoder.h"
#include "svg_check.h"
#include "tokenizer/tiny_tokenizers.h"
#include "tokenizer/utf8.h"

namespace {

using RunResult = kvlab::test::ProcessResult;

int kvlab_main(int argc, char** argv) {
  return kvlab::run_kvlab(argc, argv, std::cin, std::cout, std::cerr);
}

// kvlab with `args` (split as sh would, `< FILE` for stdin): the program's run_kvlab() in a
// forked child of this test (tests/harness/process.h). With env_prefix (words put before the
// binary, e.g. "env -u VAR NAME=value"), the built binary itself through /bin/sh.
RunResult run_kvlab(const std::string& args, const std::string& env_prefix = "") {
  if (env_prefix.empty()) {
    return kvlab::test::run_forked(kvlab_main, "kvlab", kvlab::test::parse_command_line(args));
  }
  kvlab::test::Invocation shell;
  shell.args = {"-c", env_prefix + " " + std::string(KVLAB_BIN) + " " + args};
  return kvlab::test::run_exec("/bin/sh", shell);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A SentencePiece-style tokenizer.json (byte fallback, "▁" for spaces, <s> from its template).
std::string write_tokenizer_folder() {
  const std::string dir = "/tmp/kvlab_cli_tokenizer_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const nlohmann::json tokenizer = kvlab::tok::sentencepiece_tokenizer(/*byte_fallback=*/true);
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  return dir;
}

TEST(CliTest, TokenizeEncodesDecodesAndRefusesBadInput) {
  const std::string dir = write_tokenizer_folder();
  const std::string flag = "tokenize --tokenizer " + dir;
  std::ofstream(dir + "/text.txt") << "hi hi\xC3\xA9";
  RunResult r = run_kvlab(flag + " < " + dir + "/text.txt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "263 263 198 172\n");  // "▁hi" twice, then é's bytes 0xC3 0xA9 (+3)
  r = run_kvlab(flag + "/tokenizer.json --add-special-tokens < " + dir + "/text.txt");
  EXPECT_EQ(r.out, "1 263 263 198 172\n") << r.err;
  r = run_kvlab(flag + " --tokens < " + dir + "/text.txt");
  EXPECT_EQ(r.out,
            "263\t\xE2\x96\x81hi\thi\n263\t\xE2\x96\x81hi\thi\n"
            "198\t<0xC3>\t\xEF\xBF\xBD\n172\t<0xA9>\t\xEF\xBF\xBD\n")
      << r.err;
  std::ofstream(dir + "/ids.txt") << "263 263\n198 172\n";
  r = run_kvlab(flag + " --decode < " + dir + "/ids.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hi hi\xC3\xA9");

  std::ofstream(dir + "/bad_ids.txt") << "263 x1";
  r = run_kvlab(flag + " --decode < " + dir + "/bad_ids.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "'x1' (word 2) is not a token id")) << r.err;
  std::ofstream(dir + "/big_id.txt") << "264";
  r = run_kvlab(flag + " --decode < " + dir + "/big_id.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "id 264 is not in the vocabulary")) << r.err;
  std::ofstream(dir + "/latin1.txt") << "caf\xE9";
  r = run_kvlab(flag + " < " + dir + "/latin1.txt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "not valid UTF-8 (byte 3 of 4)")) << r.err;
  r = run_kvlab("tokenize --tokenizer " + dir + "/missing < /dev/null");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, dir + "/missing")) << r.err;
  r = run_kvlab(flag + " --ids --decode < /dev/null");
  EXPECT_EQ(r.exit_code, 2);
  r = run_kvlab(flag + " --skip-special-tokens < /dev/null");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--skip-special-tokens: applies only with --decode")) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, ExportToHuggingFaceAndBack) {
  const std::string dir = "/tmp/kvlab_cli_export_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream text(dir + "/corpus.txt");
    for (int i = 0; i < 300; ++i) text << "in the beginning god created the heaven and the earth. ";
  }
  const RunResult train = run_kvlab(
      "train --task text --data " + dir +
      "/corpus.txt --seq-len 32 --layers 1 --d-model 16 "
      "--heads 4 --attn gqa:2 --mlp-kind swiglu --mlp 32 --norm rmsnorm --bias none --pos rope "
      "--steps 20 --batch 8 --threads 1 --no-progress --out " +
      dir + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const RunResult exported = run_kvlab("export --checkpoint " + dir + "/run --out " + dir + "/hf");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_TRUE(contains(exported.out, "as LlamaForCausalLM to " + dir + "/hf")) << exported.out;
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/hf/" + file)) << file;
  }
  // the same greedy text from the run and from its Hugging Face folder
  const std::string gen = " --prompt 'in the ' --max-tokens 24 --threads 1";
  const RunResult from_run = run_kvlab("generate --checkpoint " + dir + "/run" + gen);
  const RunResult from_hf = run_kvlab("generate --checkpoint " + dir + "/hf" + gen);
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.err;
  EXPECT_EQ(from_run.out.size(), 25u);  // 24 bytes and a newline
  // the folder's tokenizer decodes bytes that are not UTF-8 to U+FFFD, as transformers does
  EXPECT_EQ(kvlab::tok::utf8_with_replacement(from_run.out), from_hf.out);
  // analyze reads the folder too: weights as for a run, the maps of --input (required there)
  const RunResult analyzed = run_kvlab("analyze --checkpoint " + dir + "/hf --out " + dir +
                                       "/analysis --input 'in the beginning' --threads 1");
  ASSERT_EQ(analyzed.exit_code, 0) << analyzed.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/analysis/attention_l0_mean.svg"));
  const RunResult no_input =
      run_kvlab("analyze --checkpoint " + dir + "/hf --out " + dir + "/analysis2 --threads 1");
  EXPECT_NE(no_input.exit_code, 0);
  EXPECT_TRUE(contains(no_input.err, "give the text whose attention maps are drawn with --input"))
      << no_input.err;
  // --timings: the same text, and the times on stderr (7 prompt bytes, 23 decode steps)
  const RunResult timed = run_kvlab("generate --checkpoint " + dir + "/hf" + gen + " --timings");
  EXPECT_EQ(timed.out, from_hf.out);
  EXPECT_TRUE(contains(timed.err, "prompt 7 tokens") && contains(timed.err, "23 decode steps"))
      << timed.err;
  // perplexity over a text file through the folder's tokenizer.json, sliding window
  const RunResult eval =
      run_kvlab("eval --checkpoint " + dir + "/hf --data " + dir +
                "/corpus.txt --context 32 --stride 16 --format json --threads 1");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const nlohmann::json e = nlohmann::json::parse(eval.out);
  EXPECT_EQ(e["tokenizer"], "tokenizer.json");
  EXPECT_EQ(e["tokens"], e["bytes"]);  // the byte vocabulary
  EXPECT_EQ(e["scored_tokens"], e["tokens"].get<int64_t>() - 1);
  EXPECT_GT(e["perplexity"].get<double>(), 1.0);
  EXPECT_LT(e["perplexity"].get<double>(), 256.0);

  RunResult r = run_kvlab("export --checkpoint " + dir + "/run --out " + dir + "/hf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "already exists and is not an empty folder")) << r.err;
  const std::string gguf =
      "export --checkpoint " + dir + "/run --format gguf --out " + dir + "/m.gguf";
  r = run_kvlab(gguf + " --dtype bf16");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "as GGUF (llama, bf16, 12 tensors)")) << r.out;
  EXPECT_EQ(run_kvlab(gguf).exit_code, 2);  // never overwrites
  r = run_kvlab("export --checkpoint " + dir + "/run --format gguf --dtype q4 --out " + dir +
                "/q.gguf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--dtype")) << r.err;
  r = run_kvlab("eval --checkpoint " + dir + "/hf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "give the text to evaluate on with --data FILE")) << r.err;
  r = run_kvlab("eval --checkpoint " + dir + "/hf --data " + dir + "/corpus.txt --context 64");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "64 exceeds the model's 32 positions")) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, ConvertARunThenEvaluateAndGenerateFromIt) {
  const std::string dir = "/tmp/kvlab_cli_convert_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream text(dir + "/corpus.txt");
    for (int i = 0; i < 300; ++i)
      text << "and the spirit of god moved upon the face of the waters. ";
    std::ofstream(dir + "/short.txt") << "too short";
  }
  const RunResult train = run_kvlab(
      "train --task text --data " + dir +
      "/corpus.txt --seq-len 32 --layers 2 --d-model 32 --heads 4 --attn gqa:2 --mlp-kind swiglu "
      "--mlp 48 --norm rmsnorm --bias none --pos rope --steps 20 --batch 8 --threads 1 "
      "--no-progress --out " +
      dir + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const RunResult converted =
      run_kvlab("convert --checkpoint " + dir +
                "/run --attn gva:2,dr=4 --calibration-tokens 2048 --out " + dir + "/gva");
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  EXPECT_TRUE(contains(converted.out, "converted gqa:2 -> gva:2,dr=4,dn=4")) << converted.out;
  EXPECT_TRUE(contains(converted.out, "| layer | method")) << converted.out;
  EXPECT_TRUE(contains(converted.err, "layer 2/2")) << converted.err;
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/gva/config.json"));
  EXPECT_EQ(config["converted_from"]["report"]["layers"].size(), 2u);
  EXPECT_EQ(config["task"]["name"], "text");
  // the converted folder is a checkpoint like any other
  const RunResult eval = run_kvlab("eval --checkpoint " + dir + "/gva --threads 1 --format json");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const RunResult gen = run_kvlab("generate --checkpoint " + dir +
                                  "/gva --prompt 'and the ' --max-tokens 8 --threads 1");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out.size(), 9u);
  // decode speed of the source and of the converted model side by side
  const RunResult bench =
      run_kvlab("bench generate --checkpoint " + dir + "/run --checkpoint " + dir +
                "/gva --prompt 8 --generate 4 --long-prompt 0 "
                "--repeats 1 --threads 1 --format json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const nlohmann::json bench_rows = nlohmann::json::parse(bench.out)["rows"];
  ASSERT_EQ(bench_rows.size(), 2u);
  EXPECT_EQ(bench_rows[1]["attn"], "gva:2,dr=4,dn=4");
  EXPECT_GT(bench_rows[0]["cache_bytes"].get<int64_t>(),
            bench_rows[1]["cache_bytes"].get<int64_t>());
  // uptraining: the converted weights, the source as teacher, the task from the checkpoint
  const RunResult up =
      run_kvlab("train --init-from " + dir + "/gva --distill-from " + dir +
                "/run --steps 4 --batch 4 --threads 1 --no-progress --out " + dir + "/up");
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_TRUE(contains(up.err, "gva:2,dr=4,dn=4 on text")) << up.err;
  std::ifstream up_log(dir + "/up/log.jsonl");
  std::string first_line;
  std::getline(up_log, first_line);
  EXPECT_TRUE(nlohmann::json::parse(first_line).contains("ce")) << first_line;
  const RunResult with_model =
      run_kvlab("train --init-from " + dir + "/gva --attn mha --out " + dir + "/bad");
  EXPECT_EQ(with_model.exit_code, 2);
  EXPECT_TRUE(contains(with_model.err, "the model comes from --init-from; drop --attn"))
      << with_model.err;
  const RunResult json =
      run_kvlab("convert --checkpoint " + dir + "/run --attn q-gqa:2 --calibration " + dir +
                "/corpus.txt --context 32 --format json --out " + dir + "/kv");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["layers"][0]["candidates"].size(), 4u);

  // a Hugging Face folder converts too, calibrated on a text file through its tokenizer.json
  ASSERT_EQ(run_kvlab("export --checkpoint " + dir + "/run --out " + dir + "/hf").exit_code, 0);
  const RunResult from_hf =
      run_kvlab("convert --checkpoint " + dir + "/hf --attn mqa --calibration " + dir +
                "/corpus.txt --out " + dir + "/from-hf");
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.err;
  EXPECT_TRUE(contains(from_hf.out, "converted gqa:2 -> mqa")) << from_hf.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/from-hf/tokenizer.json"));
  const RunResult hf_no_text =
      run_kvlab("convert --checkpoint " + dir + "/hf --attn mqa --out " + dir + "/bad");
  EXPECT_EQ(hf_no_text.exit_code, 2);
  EXPECT_TRUE(contains(hf_no_text.err, "give the text with --calibration FILE")) << hf_no_text.err;

  const std::string run = " --checkpoint " + dir + "/run --out " + dir + "/bad";
  const std::pair<std::string, std::string> refusals[] = {
      {"convert --attn gla:hc=2" + run, "conversion to gla is not implemented"},
      {"convert --attn gqa:4" + run, "do not divide the source's 2"},
      {"convert --attn gva:2,dr=4 --calibration " + dir + "/short.txt" + run,
       "at least 2 windows of 32 tokens"},
      {"convert --attn gva:2,dr=4 --calibration " + dir + "/missing.txt" + run, "calibration"},
      {"convert --attn gva:2,dr=4 --checkpoint " + dir + "/run --out " + dir + "/gva",
       "already exists and is not an empty folder"},
      {"convert --attn gva:2,dr=4 --context 32" + run, "applies only to --calibration files"},
      {"convert --attn gva:2,dr=4 --calibration-tokens 0" + run, "calibration-tokens"},
      {"convert --attn gva:2,dr=4 --checkpoint " + dir + "/gva --out " + dir + "/bad",
       "kvlab converts from mha, gqa or mqa"},
  };
  for (const auto& [args, message] : refusals) {
    const RunResult r = run_kvlab(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_TRUE(contains(r.err, message)) << args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/bad/config.json")) << args;
  }
  std::filesystem::remove_all(dir);
}

TEST(CliTest, NoArgumentsPrintsTheDefaultComparison) {
  const RunResult r = run_kvlab("cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "llama-3-8b"));
  for (const char* row : {"| gqa:8 ", "| q-gqa:8 ", "| gva:8,dr=16 ", "| mla:dc=512,dr=64 "}) {
    EXPECT_TRUE(contains(r.out, row)) << row << "\n" << r.out;
  }
  EXPECT_TRUE(contains(r.out, "32,768 tokens"));
  EXPECT_TRUE(contains(r.out, "4,294,967,296"));  // gqa:8 at 32k in bf16
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(CliTest, JsonHasExactIntegers) {
  const RunResult r = run_kvlab(
      "cache --model paper-300m --attn mha --attn q-kv --context 32000 "
      "--macs --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["rows"][0]["attn"], "mha");
  EXPECT_EQ(doc["rows"][0]["cache_bytes"].get<int64_t>(), 2'621'440'000);
  EXPECT_EQ(doc["rows"][1]["cache_bytes"].get<int64_t>(), 1'310'720'000);
  EXPECT_DOUBLE_EQ(doc["rows"][1]["saving_vs_first"].get<double>(), 0.5);
  EXPECT_TRUE(doc["rows"][0]["prefill_macs"].is_number_integer());
  EXPECT_TRUE(doc["rows"][0]["decode_attn_macs"].is_number_integer());
  EXPECT_EQ(doc["context_tokens"], 32000);
  EXPECT_EQ(doc["dtype"], "bf16");
}

TEST(CliTest, RecastAModelAndReadAHuggingFaceConfig) {
  const RunResult recast = run_kvlab("cache --model llama-3-8b --attn gva:8,dr=16 --format json");
  ASSERT_EQ(recast.exit_code, 0) << recast.err;
  EXPECT_EQ(nlohmann::json::parse(recast.out)["rows"][0]["cache_scalars_per_token_per_layer"],
            1040);
  const RunResult hf = run_kvlab(std::string("cache --hf-config ") + KVLAB_TEST_DATA +
                                 "/deepseek-v2-lite.config.json --format json");
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  EXPECT_EQ(nlohmann::json::parse(hf.out)["rows"][0]["attn"], "mla:dc=512,dr=64");
  const RunResult llama =
      run_kvlab(std::string("cache --hf-config ") + KVLAB_TEST_DATA + "/llama-3-8b.config.json");
  ASSERT_EQ(llama.exit_code, 0) << llama.err;
  EXPECT_TRUE(contains(llama.out, "| gqa:8 "));
}

TEST(CliTest, CustomShapeAndOverrides) {
  const RunResult r = run_kvlab(
      "cache --layers 2 --d-model 8 --heads 2 --vocab 10 --max-context 6 --mlp 16 "
      "--attn mha --context 5 --batch 3 --dtype f32 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["rows"][0]["cache_bytes"], 3 * 2 * 5 * 16 * 4);
  EXPECT_EQ(doc["rows"][0]["total_params"], 1344);  // see accounting_test
  const RunResult fewer = run_kvlab("cache --model llama-3-8b --layers 16 --format json");
  ASSERT_EQ(fewer.exit_code, 0) << fewer.err;
  EXPECT_EQ(nlohmann::json::parse(fewer.out)["rows"][0]["cache_bytes_per_token"], 65536);
}

TEST(CliTest, HelpExplainsEveryFlag) {
  const RunResult top = run_kvlab("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_TRUE(contains(top.out, "cache"));
  const RunResult cache = run_kvlab("cache --help");
  EXPECT_EQ(cache.exit_code, 0);
  for (const char* flag :
       {"--model", "--hf-config", "--attn", "--context", "--batch", "--dtype", "--format", "--macs",
        "--layers", "--d-model", "--heads", "--head-dim"}) {
    EXPECT_TRUE(contains(cache.out, flag)) << flag;
  }
}

nlohmann::json summary_json(const std::string& args) {
  const RunResult r = run_kvlab("summary --format json " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

TEST(CliSummaryTest, ModuleCountEqualsSpecCountForEveryVariantAndKind) {
  const std::string decoder = "--layers 2 --d-model 32 --heads 4 --vocab 50 --max-context 16";
  const std::string llama = decoder + " --pos rope --norm rmsnorm --mlp-kind swiglu --bias none";
  const std::string encoder = decoder + " --model-kind encoder";
  const std::string vit =
      "--layers 2 --d-model 32 --heads 4 --model-kind vit --image-size 8 "
      "--patch-size 4 --channels 3 --classes 5";
  const std::string set =
      "--layers 2 --d-model 32 --heads 4 --model-kind set --pos none "
      "--set-input-dim 6";
  std::vector<std::pair<std::string, std::string>> cases;
  for (const char* attn : {"mha", "gqa:2", "mqa", "qk-v", "q-kv", "qkv1", "q-gqa:2", "q-mqa", "mla",
                           "gva:2,dr=4", "gva:2,dr=0,qnorm", "gta:2", "gla:hc=2", "linear"}) {
    cases.push_back({decoder, attn});
  }
  for (const char* attn : {"gqa:2", "q-gqa:2,knorm", "mla:dc=16,dr=4,dq=8", "gva:4,dr=8",
                           "gta:4,dr=4", "gla:hc=2,dc=16"}) {
    cases.push_back({llama, attn});
  }
  for (const std::string& model : {encoder, vit, set}) {
    for (const char* attn : {"mha", "qk-v", "qkv1", "qk-v+", "qkv1+", "gva:2,dr=4"}) {
      cases.push_back({model, attn});
    }
  }
  cases.push_back({vit + " --mean-pool", "q-kv"});
  cases.push_back({"--model deepseek-v3", "mla:dc=512,dr=64,dq=1536"});
  for (const auto& [model, attn] : cases) {
    SCOPED_TRACE(model + " --attn " + attn);
    const nlohmann::json doc = summary_json(model + " --attn " + attn);
    ASSERT_TRUE(doc.contains("params_module"));
    EXPECT_EQ(doc["params_module"], doc["params_spec"]);
    EXPECT_GT(doc["params_module"].get<int64_t>(), 0);
  }
}

TEST(CliSummaryTest, Paper1p2bReproducesTheSeedsCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"mha", 1215}, {"q-kv", 1123},    {"gqa:8", 1077},
      {"mqa", 1036}, {"q-gqa:8", 1054}, {"q-mqa", 1033},
  };
  for (auto [attn, millions] : expected) {
    const nlohmann::json doc = summary_json(std::string("--model paper-1.2b --attn ") + attn);
    EXPECT_EQ(std::llround(doc["params_module"].get<double>() / 1e6), millions) << attn;
  }
  const RunResult table = run_kvlab("summary --model paper-1.2b");
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_TRUE(contains(table.out, "| 1,215,102,976 |"));
  EXPECT_TRUE(contains(table.out, "module and spec agree"));
}

struct BadInvocation {
  std::string args;
  std::string message_part;
};

// Each invocation exits 2 with a message naming the problem on stderr and nothing on stdout.
template <size_t N>
void expect_all_rejected(const BadInvocation (&cases)[N]) {
  for (const BadInvocation& c : cases) {
    SCOPED_TRACE(c.args);
    const RunResult r = run_kvlab(c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(contains(r.err, c.message_part)) << r.err;
  }
}

TEST(CliTest, BadInputExitsTwoWithAMessageAndNoOutput) {
  const BadInvocation cases[] = {
      {"", "subcommand"},
      {"cache --model llama-4", "unknown model preset 'llama-4'"},
      {"cache --attn gqa:5", "invalid --attn \"gqa:5\""},
      {"cache --attn gqa:5", "32 query heads cannot be split into 5 groups"},
      {"cache --attn mha --attn qk-v+", "non-causal models only"},
      {"cache --attn bogus", "unknown attention variant 'bogus'"},
      {"cache --dtype f64", "unknown dtype 'f64'"},
      {"cache --context abc", "'abc' is not a token count"},
      {"cache --batch 0", "batch: must be > 0"},
      {"cache --batch x", "--batch"},
      {"cache --format xml", "unknown format 'xml'"},
      {"cache --units bytes", "unknown units"},
      {"cache --frobnicate", "frobnicate"},
      {"cache --model llama-3-8b --hf-config x.json", "excludes"},
      {"cache --hf-config /nonexistent/config.json", "cannot open '/nonexistent/config.json'"},
      {"cache --layers 2 --d-model 8", "needs --layers, --d-model and --heads"},
      {"cache --layers 2 --d-model 9 --heads 2", "not a multiple of --heads"},
      {"cache --model paper-300m --pos drope", "unknown positional scheme 'drope'"},
      {"cache --model paper-300m --attn q-kv:knorm", "knorm"},
      {"cache --context 1m --batch 100000000 --attn mha --model llama-3-70b", "exceeds 2^63"},
      {"summary --model paper-300m --attn qk-v+", "non-causal models only"},
      {"summary --attn gqa:3", "cannot be split into 3 groups"},
      {"summary --format yaml", "unknown format 'yaml'"},
      {"summary --layers 2 --d-model 32 --heads 4 --model-kind vit --image-size 8", "patch_size"},
  };
  expect_all_rejected(cases);
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/kvlab_cli_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

using kvlab::test::slurp;

const std::string kTinyTrain =
    "train --task swap --seq-len 8 --layers 1 --d-model 16 --heads 2 --batch 8 --threads 1 "
    "--eval-sequences 64 --no-progress";

TEST(CliTrainTest, TrainThenEvalTheCheckpoint) {
  const std::string dir = fresh_dir("train");
  const RunResult r =
      run_kvlab(kTinyTrain + " --attn gva:2,dr=0 --steps 4 --format json --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["steps"], 4);
  EXPECT_EQ(doc["attn"], "gva:2,dr=0");
  const RunResult e = run_kvlab("eval --format json --checkpoint " + dir);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json ev = nlohmann::json::parse(e.out);
  EXPECT_DOUBLE_EQ(ev["accuracy"].get<double>(), doc["eval_accuracy"].get<double>());
  EXPECT_EQ(ev["positions"], 64 * 8);
  // the log has a record per step and the final evaluation
  EXPECT_TRUE(contains(slurp(dir + "/log.jsonl"), "\"final\":true"));
  // a second train into the same folder is refused, not overwritten
  const RunResult again = run_kvlab(kTinyTrain + " --steps 4 --out " + dir);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_TRUE(contains(again.err, "already holds a run"));
}

// SIGINT mid-run saves a checkpoint; resuming ends bitwise where an uninterrupted run ends.
TEST(CliTrainTest, SigintThenResumeEqualsUninterruptedBitwise) {
  const std::string straight = fresh_dir("straight"), cut = fresh_dir("cut");
  const std::string args = kTinyTrain + " --attn q-kv --steps 1500";
  ASSERT_EQ(run_kvlab(args + " --out " + straight).exit_code, 0);

  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string command =
        std::string(KVLAB_BIN) + " " + args + " --out " + cut + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // wait until training is under way, then interrupt it
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto lines_logged = [&] {
    const std::string log = slurp(cut + "/log.jsonl");
    return std::count(log.begin(), log.end(), '\n');
  };
  while (lines_logged() < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 130);
  ASSERT_TRUE(std::filesystem::exists(cut + "/checkpoint/trainer_state.json"));
  const RunResult resumed = run_kvlab("train --resume " + cut + " --threads 1 --no-progress");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(slurp(cut + "/checkpoint/model.safetensors"),
            slurp(straight + "/checkpoint/model.safetensors"));
  EXPECT_EQ(slurp(cut + "/checkpoint/optimizer.safetensors"),
            slurp(straight + "/checkpoint/optimizer.safetensors"));
}

TEST(CliTrainTest, BadInputIsAClearErrorAndWritesNothing) {
  const std::string dir = fresh_dir("bad");
  const std::string trained = fresh_dir("trained");
  ASSERT_EQ(run_kvlab(kTinyTrain + " --steps 2 --out " + trained).exit_code, 0);
  const std::string model = trained + "/checkpoint/model.safetensors";
  const std::string bytes = slurp(model);
  const BadInvocation cases[] = {
      {"train --task revers --out " + dir, "unknown task 'revers'"},
      {"train --task text --out " + dir, "needs --data FILE"},
      {"train --task text --data /nonexistent.txt --out " + dir, "cannot open '/nonexistent.txt'"},
      {"train --task swap --seq-len 7 --out " + dir, "length must be even"},
      {"train --task copy --steps 0 --out " + dir, "steps: must be > 0"},
      {"train --task copy --batch 6 --accum 4 --out " + dir, "equal micro-batches"},
      {"train --task copy --attn gqa:3 --out " + dir, "invalid --attn \"gqa:3\""},
      {"train --task copy", "give --out"},
      {"train --task copy --out " + dir + " --lr -1", "lr: must be a finite number > 0"},
      {"train --resume " + dir, "holds no resumable checkpoint"},
      {"train --resume " + trained + " --lr 0.1", "drop --lr"},
      {"eval --checkpoint " + dir, "holds no checkpoint"},
  };
  expect_all_rejected(cases);
  EXPECT_FALSE(std::filesystem::exists(dir)) << "a failed command left files behind";
  // a truncated weights file and a corrupted header
  std::ofstream(model, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  RunResult r = run_kvlab("eval --checkpoint " + trained);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "model.safetensors")) << r.err;
  std::string corrupt = bytes;
  corrupt[8] = '[';  // the header must open a JSON object
  std::ofstream(model, std::ios::binary) << corrupt;
  r = run_kvlab("eval --checkpoint " + trained);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "header does not start with '{'")) << r.err;
}

TEST(CliGenerateTest, CachedGreedyEqualsFullRecompute) {
  const std::string dir = fresh_dir("lm");
  const std::string corpus = fresh_dir("corpus.txt");
  {
    std::ofstream text(corpus);
    for (int i = 0; i < 400; ++i) text << "in the beginning god created the heaven and the earth. ";
  }
  // whether this CPU has AVX-512 BF16 (bench compute measures a bf16 peak only there)
  const RunResult peaks = run_kvlab("bench compute --repeats 1 --format json");
  ASSERT_EQ(peaks.exit_code, 0) << peaks.err;
  const bool bf16_cpu = !nlohmann::json::parse(peaks.out)["peaks"][1]["gmacs_median"].is_null();
  for (const char* attn : {"gva:2,dr=4", "q-gqa:2,knorm", "mla"}) {
    SCOPED_TRACE(attn);
    std::filesystem::remove_all(dir);
    const RunResult train = run_kvlab("train --task text --data " + corpus +
                                      " --seq-len 32 "
                                      "--layers 1 --d-model 16 --heads 4 --pos rope --steps 20 "
                                      "--batch 8 --threads 1 --no-progress --attn " +
                                      attn + " --out " + dir);
    ASSERT_EQ(train.exit_code, 0) << train.err;
    const std::string gen = "generate --checkpoint " + dir + " --prompt 'in the ' --max-tokens 24";
    const RunResult cached = run_kvlab(gen);
    const RunResult full = run_kvlab(gen + " --no-cache");
    ASSERT_EQ(cached.exit_code, 0) << cached.err;
    ASSERT_EQ(full.exit_code, 0) << full.err;
    EXPECT_EQ(cached.out, full.out);
    EXPECT_EQ(cached.out.size(), 25u);  // 24 bytes and a newline
    const RunResult sampled = run_kvlab(gen +
                                        " --temperature 0.9 --top-k 5 --top-p 0.9 --seed 4 "
                                        "--cache-dtype bf16");
    EXPECT_EQ(sampled.exit_code, 0) << sampled.err;
    EXPECT_EQ(sampled.out, run_kvlab(gen + " --temperature 0.9 --top-k 5 --top-p 0.9 --seed 4 "
                                           "--cache-dtype bf16")
                               .out);  // seeded
    // the held-out text through the decode path (f32 cache and arithmetic) scores what the
    // full forward scores; bf16 arithmetic moves it a little
    const RunResult forward = run_kvlab("eval --checkpoint " + dir + " --format json");
    const RunResult decoded = run_kvlab("eval --checkpoint " + dir +
                                        " --attn-precision f32 --cache-dtype f32 --format json");
    ASSERT_EQ(forward.exit_code, 0) << forward.err;
    ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
    const nlohmann::json fwd = nlohmann::json::parse(forward.out);
    const nlohmann::json rows = nlohmann::json::parse(decoded.out)["rows"];
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["attn_precision"], "f32");
    EXPECT_EQ(rows[0]["key_order"], "rows");  // one-stream caches keep key rows
    EXPECT_EQ(rows[0]["positions"], fwd["positions"]);
    EXPECT_NEAR(rows[0]["loss"].get<double>(), fwd["loss"].get<double>(),
                1e-5 * fwd["loss"].get<double>());
    EXPECT_DOUBLE_EQ(rows[0]["greedy_agreement"].get<double>(), 1.0);
    EXPECT_EQ(nlohmann::json::parse(decoded.out)["decode_batch"], 16);
    if (std::string(attn) == "mla") {  // the same windows, three a decode step
      const RunResult narrow = run_kvlab("eval --checkpoint " + dir +
                                         " --attn-precision f32 --cache-dtype f32 --decode-batch 3 "
                                         "--format json");
      ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
      const nlohmann::json three = nlohmann::json::parse(narrow.out);
      EXPECT_EQ(three["decode_batch"], 3);
      EXPECT_EQ(three["rows"][0]["positions"], fwd["positions"]);
      EXPECT_NEAR(three["rows"][0]["loss"].get<double>(), fwd["loss"].get<double>(),
                  1e-5 * fwd["loss"].get<double>());
    }
    // bf16 arithmetic where the CPU has it (q-gqa's keys, rotated on read, are rounded after
    // the rotation)
    const RunResult bf16 = run_kvlab("eval --checkpoint " + dir +
                                     " --attn-precision bf16 --cache-dtype bf16 --format json");
    if (!bf16_cpu) {
      EXPECT_EQ(bf16.exit_code, 2);
      EXPECT_TRUE(contains(bf16.err, "attn-precision")) << bf16.err;
    } else {
      ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
      const nlohmann::json both = nlohmann::json::parse(bf16.out)["rows"];
      ASSERT_EQ(both.size(), 2u);
      EXPECT_EQ(both[1]["attn_precision"], "bf16");
      EXPECT_NEAR(both[1]["perplexity_vs_reference"].get<double>(), 1.0, 0.01) << both[1];
      EXPECT_GT(both[1]["greedy_agreement"].get<double>(), 0.9) << both[1];
    }
    // int8 arithmetic on a q8_0 cache: where keys are cached rows (not q-gqa's, rotated on read)
    const RunResult int8 = run_kvlab("eval --checkpoint " + dir +
                                     " --attn-precision int8 --cache-dtype q8_0 --format json");
    if (std::string(attn) == "q-gqa:2,knorm") {
      EXPECT_EQ(int8.exit_code, 2);
      EXPECT_TRUE(contains(int8.err, "attn-precision")) << int8.err;
    } else {
      ASSERT_EQ(int8.exit_code, 0) << int8.err;
      const nlohmann::json pair = nlohmann::json::parse(int8.out)["rows"];
      ASSERT_EQ(pair.size(), 2u);
      EXPECT_EQ(pair[1]["attn_precision"], "int8");
      EXPECT_NEAR(pair[1]["perplexity_vs_reference"].get<double>(), 1.0, 0.01) << pair[1];
    }
    // quantized caches against the bf16 cache: close to it, q4_0 further than q8_0
    double kl_q8_0 = 0;
    int64_t bytes_q8_0 = 0;
    for (const std::string dtype : {"q8_0", "q4_0"}) {
      const RunResult quantized =
          run_kvlab("eval --checkpoint " + dir + " --cache-dtype " + dtype + " --format json");
      ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
      const nlohmann::json pair = nlohmann::json::parse(quantized.out)["rows"];
      ASSERT_EQ(pair.size(), 2u);
      EXPECT_EQ(pair[0]["cache_dtype"], "bf16");
      EXPECT_EQ(pair[1]["cache_dtype"], dtype);
      EXPECT_EQ(pair[0]["kl_from_reference"].get<double>(), 0.0);
      const double kl = pair[1]["kl_from_reference"].get<double>();
      EXPECT_GT(kl, 0.0) << pair[1];
      EXPECT_LT(kl, 0.05) << pair[1];
      EXPECT_NEAR(pair[1]["perplexity_vs_reference"].get<double>(), 1.0, 0.05) << pair[1];
      EXPECT_GT(pair[1]["greedy_agreement"].get<double>(), 0.8) << pair[1];
      const int64_t bytes = pair[1]["cache_bytes_per_token"].get<int64_t>();
      // the rope stream stays bf16 under a quantized cache; q-gqa keeps none
      EXPECT_EQ(pair[1]["rope_dtype"], std::string(attn) == "q-gqa:2,knorm"
                                           ? nlohmann::json(nullptr)
                                           : nlohmann::json("bf16"));
      if (dtype == "q8_0") {
        kl_q8_0 = kl;
        bytes_q8_0 = bytes;
      } else {
        EXPECT_GT(kl, kl_q8_0);
        EXPECT_LT(bytes, bytes_q8_0);
      }
    }
    // --rope-dtype: the q4_0 cache's rope stream in q4_0 too; refused where there is none
    const std::string rope_eval = "eval --checkpoint " + dir + " --cache-dtype q4_0 --format json";
    const RunResult rope = run_kvlab(rope_eval + " --rope-dtype q4_0");
    if (std::string(attn) == "q-gqa:2,knorm") {
      EXPECT_EQ(rope.exit_code, 2);
      EXPECT_TRUE(contains(rope.err, "rope-dtype") && contains(rope.err, "keeps no rope stream"))
          << rope.err;
    } else {
      ASSERT_EQ(rope.exit_code, 0) << rope.err;
      const nlohmann::json pair = nlohmann::json::parse(rope.out)["rows"];
      ASSERT_EQ(pair.size(), 2u);
      EXPECT_EQ(pair[0]["rope_dtype"], "bf16");  // the reference: the bf16 cache
      EXPECT_EQ(pair[1]["rope_dtype"], "q4_0");
      EXPECT_GT(pair[1]["kl_from_reference"].get<double>(), 0.0) << pair[1];
      if (std::string(attn) == "gva:2,dr=4") {  // a 4-wide rope row: 8 bytes in bf16, 18 in q4_0
        const RunResult plain = run_kvlab(rope_eval);
        ASSERT_EQ(plain.exit_code, 0) << plain.err;
        EXPECT_EQ(
            pair[1]["cache_bytes_per_token"].get<int64_t>(),
            nlohmann::json::parse(plain.out)["rows"][1]["cache_bytes_per_token"].get<int64_t>() +
                10);
      }
      const RunResult sampled_rope = run_kvlab(gen + " --cache-dtype q8_0 --rope-dtype q8_0");
      EXPECT_EQ(sampled_rope.exit_code, 0) << sampled_rope.err;
      EXPECT_EQ(sampled_rope.out.size(), 25u);
    }
  }
  const std::string synthetic = fresh_dir("synthetic");
  ASSERT_EQ(run_kvlab(kTinyTrain + " --steps 1 --out " + synthetic).exit_code, 0);
  const BadInvocation cases[] = {
      {"generate --checkpoint " + synthetic + " --prompt x",
       "not a language model with a tokenizer.json or a byte vocabulary"},
      {"generate --checkpoint " + dir + " --prompt x --top-p 0", "top_p"},
      {"generate --checkpoint " + dir + " --prompt x --cache-dtype q8", "cache_dtype"},
      // bf16 arithmetic needs a bf16 cache (or, elsewhere, a CPU with AVX-512 BF16)
      {"generate --checkpoint " + dir + " --prompt x --attn-precision bf16", "attn-precision"},
      {"generate --checkpoint " + dir + " --prompt x --attn-precision fp16", "attn-precision"},
      {"generate --checkpoint /nonexistent --prompt x", "holds no checkpoint"},
      {"generate --checkpoint " + dir + " --prompt x --cache-dtype q8_0 --rope-dtype q9",
       "rope-dtype"},
      // --rope-dtype: needs a quantized cache to set the rope stream of
      {"eval --checkpoint " + dir + " --rope-dtype q4_0", "needs --cache-dtype"},
      {"eval --checkpoint " + dir + " --cache-dtype bf16 --rope-dtype q8_0", "rope-dtype"},
      {"eval --checkpoint " + dir + " --cache-dtype q8_0 --rope-dtype q9", "rope-dtype"},
  };
  expect_all_rejected(cases);
}

TEST(CliCompareTest, SmokeRunWritesResults) {
  const std::string dir = fresh_dir("compare");
  const RunResult r = run_kvlab(
      "compare --suite synthetic --steps 3 --seeds 2 --tasks copy,swap "
      "--attn mha --attn qkv1+ --out " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "| mha "));
  EXPECT_TRUE(contains(r.out, " ± "));
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/results.json"));
  EXPECT_EQ(results["runs"].size(), 2u * 2u * 2u);
  ASSERT_EQ(results["aggregates"].size(), 4u);
  for (const auto& a : results["aggregates"]) {
    for (const char* key : {"attn", "task", "mean", "std", "n_seeds"}) {
      EXPECT_TRUE(a.contains(key)) << key;
    }
    EXPECT_EQ(a["n_seeds"], 2);
  }
  // one record per run in records.jsonl, each naming its cell, its spec, the build and the
  // machine, with the metrics results.json reports
  std::ifstream records_file(dir + "/records.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(records_file, line);) {
    records.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(records.size(), results["runs"].size());
  std::multiset<std::string> from_records, from_results;
  for (const auto& record : records) {
    EXPECT_EQ(record["suite"], "synthetic");
    EXPECT_EQ(record["model"]["attn"], record["attn"]);
    EXPECT_EQ(record["model"]["model"]["kind"], "encoder");
    EXPECT_EQ(record["train"]["steps"], 3);
    EXPECT_FALSE(record["build"]["commit"].get<std::string>().empty());
    EXPECT_EQ(record["build"]["version"].get<std::string>().find('.'), 1u);
    EXPECT_FALSE(record["machine"]["cpu"].get<std::string>().empty());
    EXPECT_GE(record["machine"]["cores"].get<int>(), 1);
    const std::string isa = record["machine"]["kernel_isa"];
    EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512" || isa == "avx512+amx") << isa;
    from_records.insert(record["attn"].get<std::string>() + " " +
                        record["task"].get<std::string>() + " " + record["seed"].dump() + " " +
                        record["accuracy"].dump());
  }
  for (const auto& run : results["runs"]) {
    from_results.insert(run["attn"].get<std::string>() + " " + run["task"].get<std::string>() +
                        " " + run["seed"].dump() + " " + run["accuracy"].dump());
  }
  EXPECT_EQ(from_records, from_results);
  const std::string md = slurp(dir + "/results.md");
  EXPECT_TRUE(contains(md, "| qkv1+ "));
  for (const char* plot : {"/loss_curves_copy.svg", "/loss_curves_swap.svg"}) {
    EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + plot)), "") << plot;
  }
  // report rebuilds the same tables from results.json alone
  std::filesystem::remove(dir + "/results.md");
  const RunResult report = run_kvlab("report " + dir);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(slurp(dir + "/results.md"), md);
  const RunResult bad = run_kvlab("compare --attn qk-v+:m=3 --out " + dir);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "m=3")) << bad.err;
}

// The lm suite end to end on two variants for two steps: training on the King James text,
// decode speed through the cache, results.json/md and the loss plot; then report, eval at
// several contexts and analyze on one of its checkpoints.
TEST(CliCompareTest, LanguageModelSuiteSmokeRun) {
  if (!std::filesystem::exists("/usr/bin/bible")) {
    GTEST_SKIP() << "bible-kjv is not installed (scripts/install-deps installs it)";
  }
  const std::string dir = fresh_dir("compare-lm");
  const RunResult r = run_kvlab(
      "compare --suite lm --steps 2 --seeds 2 --eval-windows 16 --attn mha "
      "--attn gva:2,dr=16 --cache-dtype q8_0 --out " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/results.json"));
  EXPECT_EQ(results["suite"], "lm");
  ASSERT_EQ(results["runs"].size(), 4u);
  ASSERT_EQ(results["variants"].size(), 2u);
  for (const auto& v : results["variants"]) {
    EXPECT_GT(v["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(v["params"].get<int64_t>(), 0);
  }
  // gva:2,dr=16 caches 2 groups × 32 + 16 bf16 scalars per layer and token; mha 2 × 4 × 32
  EXPECT_EQ(results["variants"][1]["cache_bytes_per_token"], 4 * (2 * 32 + 16) * 2);
  EXPECT_EQ(results["variants"][0]["cache_bytes_per_token"], 4 * 2 * 4 * 32 * 2);
  for (const auto& run : results["runs"]) {
    EXPECT_GT(run["eval_loss"].get<double>(), 0);
    EXPECT_FALSE(run["curve"].empty());
  }
  // the cache-dtype axis: every checkpoint decoded with bf16 (the reference) and q8_0 (q4_0's
  // rows are checked by CliGenerateTest); q8_0 rows of 32 are one 34-byte block: mha 4 layers ×
  // 8 rows, gva 2 rows + 16 bf16 scalars
  const nlohmann::json& quantized = results["cache_dtype_runs"];
  ASSERT_EQ(quantized.size(), 2u * 2u * 2u);
  for (const auto& q : quantized) {
    SCOPED_TRACE(q.dump());
    const std::string dtype = q["cache_dtype"];
    if (dtype == "bf16") {
      EXPECT_EQ(q["kl_from_reference"].get<double>(), 0.0);
      EXPECT_EQ(q["perplexity_vs_reference"].get<double>(), 1.0);
    } else {
      EXPECT_GT(q["kl_from_reference"].get<double>(), 0.0);
      EXPECT_NEAR(q["perplexity_vs_reference"].get<double>(), 1.0, 0.05);
    }
    if (dtype == "q8_0") {
      EXPECT_EQ(q["cache_bytes_per_token"], q["label"] == "mha" ? 4 * 8 * 34 : 4 * (2 * 34 + 32));
    }
  }
  const std::string md = slurp(dir + "/results.md");
  EXPECT_TRUE(contains(md, "| gva:2,dr=16 ")) << md;
  EXPECT_TRUE(contains(md, "## Cache dtypes")) << md;
  EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + "/loss_curves.svg")), "");
  EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + "/cache_pareto.svg")), "");
  std::filesystem::remove(dir + "/results.md");
  std::filesystem::remove(dir + "/loss_curves.svg");
  std::filesystem::remove(dir + "/cache_pareto.svg");
  ASSERT_EQ(run_kvlab("report " + dir).exit_code, 0);
  EXPECT_EQ(slurp(dir + "/results.md"), md);
  EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + "/loss_curves.svg")), "");
  EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + "/cache_pareto.svg")), "");

  const std::string run = dir + "/runs/gva_2_dr_16/seed0";
  const RunResult eval = run_kvlab("eval --checkpoint " + run + " --context 64,256 --format json");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const nlohmann::json rows = nlohmann::json::parse(eval.out)["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["positions"], rows[1]["positions"]);  // the same held-out bytes
  EXPECT_EQ(rows[1]["context"], 256);

  const std::string analysis = dir + "/analysis";
  const RunResult a = run_kvlab("analyze --checkpoint " + run +
                                " --input 'In the beginning' "
                                "--out " +
                                analysis);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const nlohmann::json doc = nlohmann::json::parse(slurp(analysis + "/analysis.json"));
  ASSERT_EQ(doc["layers"].size(), 4u);
  EXPECT_TRUE(doc["layers"][0]["cos_kv"].is_null());  // gva has no K projection
  EXPECT_GT(doc["layers"][0]["erank_v"].get<double>(), 1.0);
  ASSERT_EQ(doc["attention_maps"].size(), 4u * 5u);  // 4 heads + the mean, per layer
  for (const auto& name : doc["attention_maps"]) {
    const std::string svg = slurp(analysis + "/" + name.get<std::string>());
    EXPECT_EQ(kvlab::testing::svg_problem(svg), "") << name;
    EXPECT_TRUE(contains(svg, "height=\"")) << name;
  }

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"compare --suite lm --tasks copy --out " + dir, "tasks"},
           {"compare --suite lm --preset paper --out " + dir, "preset"},
           {"compare --suite lm --data /nonexistent/kjv.txt --out " + dir, "data"},
           {"compare --suite lm --attn mha --attn linear --out " + dir, "linear"},
           {"compare --suite lm --cache-dtype q5_1 --out " + dir, "cache-dtype"},
           {"compare --suite synthetic --cache-dtype q8_0 --out " + dir, "cache-dtype"},
           {"compare --suite vision --eval-windows 8 --out " + dir, "eval-windows"},
           {"compare --suite lm --eval-windows 0 --out " + dir, "eval-windows"},
           {"eval --checkpoint " + run + " --context 0", "context"},
           {"analyze --checkpoint /nonexistent/run --out " + analysis, "nonexistent"},
           {"report /nonexistent", "dir"}}) {
    const RunResult bad = run_kvlab(args);
    EXPECT_NE(bad.exit_code, 0) << args;
    EXPECT_TRUE(contains(bad.err, message)) << args << ": " << bad.err;
  }
}

// The convert suite on one target: two teachers, a scratch run, conversions, uptraining.
TEST(CliCompareTest, ConvertSuiteSmokeRun) {
  if (!std::filesystem::exists("/usr/bin/bible")) {
    GTEST_SKIP() << "bible-kjv is not installed (scripts/install-deps installs it)";
  }
  const std::string dir = fresh_dir("compare-convert");
  const RunResult r = run_kvlab(
      "compare --suite convert --steps 4 --seeds 1 --eval-windows 16 --attn gva:2,dr=16 "
      "--out " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/results.json"));
  EXPECT_EQ(results["suite"], "convert");
  EXPECT_EQ(results["config"]["uptrain_steps"], 1);  // 5% of 4 steps, at least one
  ASSERT_EQ(results["pairs"].size(), 2u);            // from gqa:2 and from mha
  EXPECT_EQ(results["pairs"][0]["label"], "gqa:2 → gva:2,dr=16,dn=16");
  // teachers 2, scratch 1, uptraining 2 pairs × 2 budgets
  ASSERT_EQ(results["runs"].size(), 7u);
  for (const auto& run : results["runs"]) EXPECT_GT(run["eval_loss"].get<double>(), 0);
  const std::string md = slurp(dir + "/results.md");
  EXPECT_TRUE(contains(md, "| gqa:2 → gva:2,dr=16,dn=16 ")) << md;
  EXPECT_TRUE(contains(md, "Ranking by perplexity after 0 tokens")) << md;
  EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + "/uptraining_curves.svg")), "");
  std::filesystem::remove(dir + "/results.md");
  ASSERT_EQ(run_kvlab("report " + dir).exit_code, 0);
  EXPECT_EQ(slurp(dir + "/results.md"), md);
  // a converted checkpoint and its uptrained run are ordinary checkpoints
  const RunResult eval =
      run_kvlab("eval --checkpoint " + dir +
                "/runs/uptrain-gqa_2-to-gva_2_dr_16_dn_16-4N/seed0 --format json");
  EXPECT_EQ(eval.exit_code, 0) << eval.err;
  // a two-stream teacher through the decode path: on a bf16 cache its keys are ordered by
  // element pairs except on AMX, whose tiles read key rows; an f32 cache keeps rows
  const RunResult teacher = run_kvlab("eval --checkpoint " + dir +
                                      "/runs/teacher-gqa_2/seed0 --cache-dtype bf16 --format json");
  ASSERT_EQ(teacher.exit_code, 0) << teacher.err;
  const nlohmann::json teacher_rows = nlohmann::json::parse(teacher.out)["rows"];
  ASSERT_EQ(teacher_rows.size(), 2u);  // the f32 cache (reference), then bf16
  EXPECT_EQ(teacher_rows[0]["key_order"], "rows");
  const RunResult isa = run_kvlab(
      "bench decode --attn mqa --heads 2 --head-dim 16 --context 16 --repeats 1 --rotate-mib 1 "
      "--format json");
  ASSERT_EQ(isa.exit_code, 0) << isa.err;
  const bool amx =
      nlohmann::json::parse(isa.out)["isa"] == "avx512+amx";  // cpu_isa_name(CpuIsa::kAmx)
  EXPECT_EQ(teacher_rows[1]["key_order"], amx ? "rows" : "pairs") << teacher_rows[1];
  const RunResult bad =
      run_kvlab("compare --suite convert --steps 4 --attn gla:hc=2 --out " + dir + "/bad");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "no teacher converts")) << bad.err;
}

// The vision suite on two variants: a ViT on Fashion-MNIST and the set-anomaly task.
TEST(CliCompareTest, VisionSuiteSmokeRun) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)";
  }
  const std::string dir = fresh_dir("compare-vision");
  const RunResult r =
      run_kvlab("compare --suite vision --steps 2 --seeds 1 --attn mha --attn qkv1+ --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/results.json"));
  ASSERT_EQ(results["runs"].size(), 4u);
  for (const auto& run : results["runs"]) {
    EXPECT_GE(run["accuracy"].get<double>(), 0.0);
    EXPECT_LE(run["accuracy"].get<double>(), 1.0);
  }
  EXPECT_TRUE(contains(slurp(dir + "/results.md"), "| qkv1+ "));
  for (const char* plot : {"/loss_curves_fashion-mnist.svg", "/loss_curves_set-anomaly.svg"}) {
    EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + plot)), "") << plot;
  }
  const RunResult bad = run_kvlab("compare --suite vision --data /nonexistent --out " + dir);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "dataset-fashion-mnist")) << bad.err;
  const RunResult text_input =
      run_kvlab("analyze --checkpoint " + dir + "/runs/fashion-mnist/mha/seed0 --input abc --out " +
                dir + "/analysis");
  EXPECT_EQ(text_input.exit_code, 2);
  EXPECT_TRUE(contains(text_input.err, "input")) << text_input.err;
}

TEST(CliCompareTest, ServeSuiteSmokeRun) {
  const std::string dir = fresh_dir("compare-serve");
  const RunResult r = run_kvlab(
      "compare --suite serve --attn gqa:2 --attn gva:2,dr=16 --cache-dtype q8_0 --requests 6 "
      "--out " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/results.json"));
  EXPECT_EQ(results["suite"], "serve");
  const nlohmann::json& c = results["config"];
  // the quick preset: 4 layers of 8 heads × 32, requests of 64 + 32 tokens, a budget of mha's
  // bf16 cache (8 heads × (32 + 32) × 2 bytes a layer) for 4 of them, pages of 16 tokens
  const int64_t layers = 4, model_len = 96, page = 16;
  const int64_t budget = 4 * model_len * layers * (8 * 64 * 2);
  EXPECT_EQ(c["budget_bytes"], budget);
  ASSERT_EQ(results["rows"].size(), 4u);  // two variants, then each with a q8_0 cache
  // the engine's default arithmetic: int8 on the q8_0 caches (their SIMD kernels), and the
  // report says so
  for (size_t v : {2u, 3u}) EXPECT_EQ(results["rows"][v]["attn_precision"], "int8");
  EXPECT_TRUE(contains(slurp(dir + "/results.md"), "int8 on q8_0 caches"));
  // bytes per token of every layer: gqa:2 2 × (32 + 32) bf16; gva:2,dr=16 2 × 32 + 16 bf16;
  // q8_0 blocks of 32 are 34 bytes (gqa:2's four rows of 32 a layer)
  const int64_t per_token[] = {layers * 2 * 64 * 2, layers * (2 * 32 + 16) * 2, layers * 4 * 34};
  for (size_t v = 0; v < 3; ++v) {
    const nlohmann::json& row = results["rows"][v];
    SCOPED_TRACE(row["label"].get<std::string>());
    EXPECT_EQ(row["cache_bytes_per_token"], per_token[v]);
    const int64_t pages = budget / (per_token[v] * page);
    EXPECT_DOUBLE_EQ(row["max_concurrency"].get<double>(),
                     static_cast<double>(pages * page) / static_cast<double>(model_len));
  }
  for (const auto& row : results["rows"]) {
    EXPECT_GE(row["peak_running"].get<int64_t>(), 1);
    EXPECT_LE(row["peak_running"].get<int64_t>(), 6);
    EXPECT_GT(row["output_throughput"].get<double>(), 0);
    EXPECT_NEAR(row["output_throughput"].get<double>(),
                32 * row["request_throughput"].get<double>(), 1e-6);
    EXPECT_GT(row["roofline_output_throughput"].get<double>(), 0);
    // the variant's own ceilings, sampled after its saturated run: the roofline is never past
    // its bytes at its bandwidth (per token: the weights ÷ the batch and the cache at the mean
    // context, so at least the cache's own bytes)
    const double gb_per_s = row["bandwidth_gb_per_s"].get<double>();
    EXPECT_GT(gb_per_s, 0);
    EXPECT_LE(row["roofline_output_throughput"].get<double>(),
              gb_per_s * 1e9 / (row["cache_bytes_per_token"].get<double>() * (64 + 32 / 2.0)) *
                  (1 + 1e-9));
    EXPECT_TRUE(row["peak_gmacs"].is_null() || row["peak_gmacs"].get<double>() > 0);
    // each request's first token comes from a step that ran its prompt; the other 31 from steps
    // of decode tokens alone or beside another request's prompt
    EXPECT_GT(row["prompt_steps_s"].get<double>(), 0);
    EXPECT_LE(row["mean_decode_batch"].get<double>() * row["decode_steps"].get<double>(),
              6.0 * 31 + 1e-9);
    EXPECT_LE(row["mean_decode_batch"].get<double>(), row["peak_running"].get<double>());
    EXPECT_GE(row["fixed_rate"]["ttft_ms"]["p99"].get<double>(),
              row["fixed_rate"]["ttft_ms"]["p50"].get<double>());
  }
  EXPECT_EQ(results["loads"].size(), 4u * 4u);  // four offered loads a variant
  const std::string md = slurp(dir + "/results.md");
  EXPECT_TRUE(contains(md, "| gva:2,dr=16 q8_0 ")) << md;
  EXPECT_TRUE(contains(md, "each variant's own, sampled just after its saturated run")) << md;
  for (const char* plot : {"/throughput_vs_load.svg", "/concurrency.svg"}) {
    EXPECT_EQ(kvlab::testing::svg_problem(slurp(dir + plot)), "") << plot;
  }
  std::filesystem::remove(dir + "/results.md");
  ASSERT_EQ(run_kvlab("report " + dir).exit_code, 0);
  EXPECT_EQ(slurp(dir + "/results.md"), md);
  const RunResult steps = run_kvlab("compare --suite serve --steps 2 --out " + dir);
  EXPECT_EQ(steps.exit_code, 2);
  EXPECT_TRUE(contains(steps.err, "steps")) << steps.err;
  const RunResult requests = run_kvlab("compare --suite lm --requests 4 --out " + dir);
  EXPECT_EQ(requests.exit_code, 2);
  EXPECT_TRUE(contains(requests.err, "requests")) << requests.err;
}

// Trained models instead of random weights: the budget is mha's cache of their shape.
TEST(CliCompareTest, ServeSuiteServesCheckpoints) {
  const std::string dir = fresh_dir("compare-serve-checkpoints");
  std::filesystem::create_directories(dir);
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 2000; ++i) corpus << "in the beginning was the word " << i % 17 << "\n";
  }
  const std::string train = "train --task text --data " + dir +
                            "/corpus.txt --seq-len 128 --layers 1 --heads 4 --steps 1 --pos rope "
                            "--no-progress --threads 1 ";
  for (const char* attn : {"gqa:2", "gva:2,dr=4"}) {
    const RunResult trained = run_kvlab(train + "--d-model 32 --attn " + attn + " --out " + dir +
                                        "/" + std::string(attn).substr(0, 3));
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
  }
  const RunResult r = run_kvlab("compare --suite serve --checkpoint " + dir + "/gqa --checkpoint " +
                                dir + "/gva --requests 4 --out " + dir + "/serve");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir + "/serve/results.json"));
  EXPECT_EQ(results["weights"], "the checkpoints' weights");
  // mha of 1 layer of 4 heads × 8: 4 × (8 + 8) bf16 a token, for 4 requests of 96 tokens
  EXPECT_EQ(results["config"]["budget_bytes"], 4 * 96 * (4 * 16 * 2));
  ASSERT_EQ(results["rows"].size(), 2u);
  EXPECT_EQ(results["rows"][0]["attn"], "gqa:2");
  EXPECT_EQ(results["rows"][0]["cache_bytes_per_token"], 2 * 16 * 2);
  EXPECT_EQ(results["rows"][1]["cache_bytes_per_token"], (2 * 8 + 4) * 2);
  EXPECT_TRUE(contains(slurp(dir + "/serve/results.md"), "The checkpoints' weights, 1 layers"));
  const RunResult both = run_kvlab("compare --suite serve --checkpoint " + dir +
                                   "/gqa --attn mha --out " + dir + "/serve");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(contains(both.err, "attn")) << both.err;
  const RunResult wide = run_kvlab(train + "--d-model 64 --attn mha --out " + dir + "/wide");
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  const RunResult shapes = run_kvlab("compare --suite serve --checkpoint " + dir +
                                     "/gqa --checkpoint " + dir + "/wide --out " + dir + "/serve");
  EXPECT_EQ(shapes.exit_code, 2);
  EXPECT_TRUE(contains(shapes.err, "another shape")) << shapes.err;
}

TEST(CliBenchTest, MemoryAndDecodeBenchmarksReportGigabytesPerSecond) {
  const RunResult memory = run_kvlab("bench memory --mib 16 --repeats 2 --format json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  EXPECT_GT(nlohmann::json::parse(memory.out)["gb_per_s_median"].get<double>(), 0);
  const int streams = nlohmann::json::parse(memory.out)["streams"].get<int>();
  const int64_t ahead = nlohmann::json::parse(memory.out)["prefetch_bytes"].get<int64_t>();
  // the fastest of the ceiling's patterns, named: one stream, four, four prefetched 1 KiB ahead
  EXPECT_TRUE((streams == 1 && ahead == 0) || (streams == 4 && (ahead == 0 || ahead == 1024)))
      << streams << " streams, " << ahead << " B ahead";
  // the probe checks its own sum: an odd buffer (words past the streams' whole lines) read fully,
  // by one pattern and by every pattern of the ceiling (the prefetching one's reads run past the
  // slices' ends)
  const RunResult one = run_kvlab("bench memory --mib 1 --repeats 1 --threads 3 --streams 8");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_TRUE(contains(one.out, "8 streams each")) << one.out;
  const RunResult every = run_kvlab("bench memory --mib 1 --repeats 1 --threads 3");
  ASSERT_EQ(every.exit_code, 0) << every.err;
  EXPECT_TRUE(contains(every.out, "the fastest of 1 stream, 4, and 4 prefetched 1024 B ahead"))
      << every.out;
  const RunResult three = run_kvlab("bench memory --streams 3");
  EXPECT_EQ(three.exit_code, 2);
  EXPECT_TRUE(contains(three.err, "streams")) << three.err;
  const RunResult decode = run_kvlab(
      "bench decode --attn gqa:2 --attn gva:2,dr=16 --attn q-gqa:2,knorm --attn gva:2,dr=0 "
      "--heads 4 --head-dim 32 "
      "--context 100,1k --repeats 2 --rotate-mib 1 --format json");
  ASSERT_EQ(decode.exit_code, 0) << decode.err;
  const nlohmann::json doc = nlohmann::json::parse(decode.out);
  ASSERT_EQ(doc["rows"].size(), 8u);
  // bytes read come from the spec's layout: gqa:2 caches 2·2·32 bf16 scalars per token
  EXPECT_EQ(doc["rows"][0]["cache_bytes_read"], 100 * 2 * 2 * 32 * 2);
  EXPECT_EQ(doc["rows"][2]["cache_bytes_read"], 100 * (2 * 32 + 16) * 2);
  EXPECT_EQ(doc["rows"][6]["cache_bytes_read"], 100 * 2 * 32 * 2);  // gva dr=0: values only
  for (const auto& row : doc["rows"]) {
    EXPECT_GT(row["gb_per_s"].get<double>(), 0);
    EXPECT_GT(row["bandwidth_fraction"].get<double>(), 0);
    // the compute estimate scales with the context; the row is bound by the larger part
    const double memory_us = row["memory_us"].get<double>();
    const double compute_us = row["compute_us"].get<double>();
    EXPECT_NEAR(
        memory_us,
        row["cache_bytes_read"].get<double>() / (doc["bandwidth_gb_per_s"].get<double>() * 1e3),
        1e-6 * memory_us);
    EXPECT_GE(row["compute_ns_per_token"].get<double>(), 0);
    EXPECT_GT(compute_us, 0);
    // the compute on the bench's threads against one thread's: a ratio where there are threads
    if (doc["threads"].get<int>() > 1) {
      EXPECT_GT(row["compute_threads_speedup"].get<double>(), 0);
    } else {
      EXPECT_TRUE(row["compute_threads_speedup"].is_null());
    }
    // the roofline: the larger of the reads and the multiply-adds at the precision's peak
    const double roof_compute_us = row["roofline_compute_us"].get<double>();
    EXPECT_EQ(row["bound"], roof_compute_us > memory_us ? "compute" : "memory");
    EXPECT_DOUBLE_EQ(row["roofline_us"].get<double>(), std::max(memory_us, roof_compute_us));
    EXPECT_NEAR(row["roofline_fraction"].get<double>(),
                row["roofline_us"].get<double>() / row["us_per_step"].get<double>(), 1e-9);
    // the untimed step before layer r's reads layer r-1, which must not be layer r+1
    EXPECT_GE(row["layers_rotated"].get<int64_t>(), 3);
  }
  // multiply-adds per step (the spec's decode_macs, counted here independently): H · tokens ·
  // (key + rope + value widths); gva dr=0 adds each head's rebuilt key, H · tokens · d_h · d_n
  // (d_n = d_h here); RoPE and norms on read are element-wise work, not counted
  EXPECT_DOUBLE_EQ(doc["rows"][0]["macs"].get<double>(), 100.0 * 4 * (32 + 32));
  EXPECT_DOUBLE_EQ(doc["rows"][2]["macs"].get<double>(), 100.0 * 4 * (32 + 16 + 32));
  EXPECT_DOUBLE_EQ(doc["rows"][4]["macs"].get<double>(), 100.0 * 4 * (32 + 32));
  EXPECT_DOUBLE_EQ(doc["rows"][6]["macs"].get<double>(), 100.0 * 4 * (32 + 32 + 32 * 32));
  // rebuilt keys compute in f32 whatever is asked
  EXPECT_EQ(doc["rows"][6]["precision"], "f32");
  EXPECT_NEAR(doc["rows"][1]["compute_us"].get<double>(),
              10.24 * doc["rows"][0]["compute_us"].get<double>(),
              1e-6 * doc["rows"][1]["compute_us"].get<double>());  // 1k vs 100 tokens
  const RunResult bad = run_kvlab("bench decode --attn qk-v+ --heads 4 --head-dim 32");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "qk-v+")) << bad.err;
  // both precisions: one row per precision where bf16 applies (gqa:2), one where not (gva
  // dr=0 rebuilds its keys in f32)
  const RunResult both = run_kvlab(
      "bench decode --attn gqa:2 --attn gva:2,dr=0 --heads 4 --head-dim 32 --context 100 "
      "--repeats 1 --rotate-mib 1 --format json --attn-precision f32,bf16");
  const RunResult peaks = run_kvlab("bench compute --repeats 1 --format json");
  ASSERT_EQ(peaks.exit_code, 0) << peaks.err;
  const nlohmann::json peak_doc = nlohmann::json::parse(peaks.out);
  // f32, bf16, int8, int8 blocks (null without AMX int8), bf16 tiles loaded (null without AMX)
  ASSERT_EQ(peak_doc["peaks"].size(), 5u);
  EXPECT_EQ(peak_doc["peaks"][3]["precision"], "int8 blocks");
  EXPECT_EQ(peak_doc["peaks"][4]["precision"], "bf16 tiles loaded");
  EXPECT_EQ(peak_doc["peaks"][4]["gmacs_median"].is_null(),
            peak_doc["peaks"][1]["instruction"] != "amx tdpbf16ps");  // loaded where AMX runs
  EXPECT_GT(peak_doc["peaks"][0]["gmacs_median"].get<double>(), 0);   // f32: AVX2 at least
  if (peak_doc["peaks"][1]["gmacs_median"].is_null()) {  // no AVX-512 BF16 here: refused
    EXPECT_EQ(both.exit_code, 2);
    EXPECT_TRUE(contains(both.err, "attn-precision")) << both.err;
  } else {
    ASSERT_EQ(both.exit_code, 0) << both.err;
    const nlohmann::json rows = nlohmann::json::parse(both.out)["rows"];
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0]["precision"], "f32");
    EXPECT_EQ(rows[1]["precision"], "bf16");
    EXPECT_EQ(rows[2]["precision"], "f32");
    EXPECT_EQ(rows[2]["attn"], "gva:2,dr=0");
    ::setenv("KVLAB_CPU_ISA", "avx2", 1);  // the AVX2 kernels have no bf16 precision
    const RunResult capped = run_kvlab(
        "bench decode --attn gqa:2 --heads 4 --head-dim 32 "
        "--attn-precision bf16");
    ::unsetenv("KVLAB_CPU_ISA");
    EXPECT_EQ(capped.exit_code, 2);
    EXPECT_TRUE(contains(capped.err, "attn-precision: bf16 needs AVX-512 BF16")) << capped.err;
  }
  // quantized caches: q8_0 and q4_0 rows run the int8 kernel beside the bf16 rows; their bytes
  // count whole blocks (a 32-wide head row is one block of 34 or 18 bytes)
  const RunResult quantized = run_kvlab(
      "bench decode --attn gqa:2 --attn gva:2,dr=16 --heads 4 --head-dim 32 --context 100 "
      "--repeats 1 --rotate-mib 1 --format json --dtype bf16,q8_0,q4_0");
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const nlohmann::json qrows = nlohmann::json::parse(quantized.out)["rows"];
  ASSERT_EQ(qrows.size(), 6u);  // attn × dtype
  const char* expected_dtypes[] = {"bf16", "q8_0", "q4_0"};
  for (size_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(qrows[i].dump());
    EXPECT_EQ(qrows[i]["dtype"], expected_dtypes[i % 3]);
    if (i % 3 != 0) {
      EXPECT_EQ(qrows[i]["precision"], "int8");
    }
    EXPECT_GT(qrows[i]["us_per_step"].get<double>(), 0);
  }
  EXPECT_DOUBLE_EQ(qrows[2]["time_vs_bf16_cache"].get<double>(),
                   qrows[2]["us_per_step"].get<double>() / qrows[0]["us_per_step"].get<double>());
  EXPECT_EQ(qrows[1]["cache_bytes_read"], 100 * 2 * 2 * 34);
  EXPECT_EQ(qrows[2]["cache_bytes_read"], 100 * 2 * 2 * 18);
  EXPECT_EQ(qrows[4]["cache_bytes_read"], 100 * (2 * 34 + 16 * 2));  // the rope key stays bf16
  EXPECT_EQ(qrows[5]["cache_bytes_read"], 100 * (2 * 18 + 16 * 2));
  // keys ordered by pairs: rows for the two-stream bf16 specs only, beside their key rows; the
  // same bytes
  const RunResult ordered = run_kvlab(
      "bench decode --attn gqa:2 --attn gva:2,dr=16 --heads 4 --head-dim 32 --context 100 "
      "--repeats 1 --rotate-mib 1 --format json --dtype bf16,q8_0 --key-order rows,pairs");
  ASSERT_EQ(ordered.exit_code, 0) << ordered.err;
  const nlohmann::json orows = nlohmann::json::parse(ordered.out)["rows"];
  std::vector<std::string> seen;
  for (const nlohmann::json& row : orows) {
    seen.push_back(row["attn"].get<std::string>() + " " + row["dtype"].get<std::string>() + " " +
                   row["key_order"].get<std::string>());
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"gqa:2 bf16 rows", "gqa:2 bf16 pairs", "gqa:2 q8_0 rows",
                                      "gva:2,dr=16 bf16 rows", "gva:2,dr=16 q8_0 rows"}));
  ASSERT_EQ(orows.size(), 5u);
  EXPECT_EQ(orows[1]["cache_bytes_read"], orows[0]["cache_bytes_read"]);
  EXPECT_GT(orows[1]["us_per_step"].get<double>(), 0);
  const RunResult only_pairs = run_kvlab(
      "bench decode --attn gqa:2 --attn gva:2,dr=16 --heads 4 --head-dim 32 --context 100 "
      "--repeats 1 --rotate-mib 1 --key-order pairs");
  ASSERT_EQ(only_pairs.exit_code, 0) << only_pairs.err;
  EXPECT_TRUE(contains(only_pairs.out, "| pairs ")) << only_pairs.out;
  EXPECT_FALSE(contains(only_pairs.out, "gva:2")) << only_pairs.out;
  for (const std::string args :
       {"--attn gva:2,dr=16 --key-order pairs", "--attn gqa:2 --dtype f32 --key-order pairs",
        "--attn gqa:2 --key-order columns"}) {
    const RunResult refused =
        run_kvlab("bench decode --heads 4 --head-dim 32 --context 100 --repeats 1 " + args);
    EXPECT_EQ(refused.exit_code, 2) << args;
    EXPECT_TRUE(contains(refused.err, "key-order")) << args << ": " << refused.err;
  }
  for (const auto& [args, field] : std::vector<std::pair<std::string, std::string>>{
           {"--attn gqa:2 --dtype q8_0 --attn-precision f32", "attn-precision"},
           {"--attn q-gqa:2 --dtype q8_0", "scalar reference"},  // keys rotated on read
           {"--attn gqa:2 --dtype fp8", "dtype"},
           {"--attn gqa:2 --dtype q5_1", "dtype"}}) {
    const RunResult refused =
        run_kvlab("bench decode --heads 4 --head-dim 32 --context 100 --repeats 1 " + args);
    EXPECT_EQ(refused.exit_code, 2) << args;
    EXPECT_TRUE(contains(refused.err, field)) << args << ": " << refused.err;
  }
  const RunResult typo = run_kvlab("bench decode --attn gqa:2 --attn-precision fp16");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(contains(typo.err, "attn-precision")) << typo.err;
  // caches that cannot fit in memory: refused before anything is allocated
  const RunResult huge = run_kvlab("bench decode --attn mha --context 1000000k");
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_TRUE(contains(huge.err, "context") && contains(huge.err, "GiB")) << huge.err;
  for (const std::string flag : {"repeats", "rotate-mib", "batch"}) {
    const RunResult zero =
        run_kvlab("bench decode --attn gqa:2 --heads 4 --head-dim 32 --" + flag + " 0");
    EXPECT_EQ(zero.exit_code, 2) << flag;
    EXPECT_TRUE(contains(zero.err, flag)) << zero.err;
  }
  for (const std::string flag : {"heads", "head-dim"}) {
    const RunResult zero = run_kvlab("bench decode --attn mha --" + flag + " 0");
    EXPECT_EQ(zero.exit_code, 2) << flag;
    EXPECT_TRUE(contains(zero.err, flag + ": must be > 0")) << zero.err;
  }
  // a negative thread count used to mean "all cores" silently, here and in every --threads
  const RunResult negative = run_kvlab("bench decode --attn mha --threads -1");
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_TRUE(contains(negative.err, "--threads")) << negative.err;
  // linear attention: its state (4 heads × (32·32 + 32) f32) whatever the context
  const RunResult linear = run_kvlab(
      "bench decode --attn linear --heads 4 --head-dim 32 --context 100,1k --repeats 2 "
      "--rotate-mib 1 --format json");
  ASSERT_EQ(linear.exit_code, 0) << linear.err;
  const nlohmann::json rows = nlohmann::json::parse(linear.out)["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["cache_bytes_read"], 4 * (32 * 32 + 32) * 4);
  EXPECT_EQ(rows[1]["cache_bytes_read"], rows[0]["cache_bytes_read"]);
  EXPECT_TRUE(rows[0]["compute_us"].is_null());  // no per-token compute in a constant state
  // per head: S·q and S += k vᵀ (2 d²) and the normaliser (d)
  EXPECT_DOUBLE_EQ(rows[0]["macs"].get<double>(), 4.0 * (2 * 32 * 32 + 32));
}

TEST(CliBenchTest, PrefillAndGenerateBenchmarks) {
  const std::string model = " --layers 1 --d-model 32 --heads 4 --format json";
  const RunResult prefill =
      run_kvlab("bench prefill --attn mha --attn q-kv --batch 1,2 --length 16" + model);
  ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
  EXPECT_EQ(nlohmann::json::parse(prefill.out)["rows"].size(), 4u);
  const RunResult bad = run_kvlab(
      "bench generate --attn gqa:2 --attn qk-v+ --prompt 8 --generate 4 --long-prompt 0" + model);
  EXPECT_EQ(bad.exit_code, 2);  // a non-causal variant cannot decode: a clear error
  EXPECT_TRUE(contains(bad.err, "qk-v+")) << bad.err;
  // linear attention decodes from its state (no positions): the same bytes at any length,
  // H · (d_h² + d_h) f32 per layer
  const RunResult linear = run_kvlab(
      "bench generate --attn linear --prompt 8 --generate 4 --long-prompt 20 --cache-dtype f16" +
      model);
  ASSERT_EQ(linear.exit_code, 0) << linear.err;
  const nlohmann::json rows = nlohmann::json::parse(linear.out)["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["cache_bytes"], 4 * (8 * 8 + 8) * 4);
  EXPECT_EQ(rows[1]["cache_bytes"], rows[0]["cache_bytes"]);
  const RunResult ok = run_kvlab(
      "bench generate --attn gqa:2 --attn gva:2,dr=0 --prompt 8 "
      "--generate 4 --long-prompt 20" +
      model);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const nlohmann::json doc = nlohmann::json::parse(ok.out);
  ASSERT_EQ(doc["rows"].size(), 4u);
  // gqa:2 at 4 heads of 8: 2·2·8 bf16 scalars per token, one layer, pages of 16 tokens
  EXPECT_EQ(doc["rows"][0]["cache_bytes"], 16 * 2 * 2 * 8 * 2);
  EXPECT_GT(doc["rows"][0]["decode_tokens_per_s"].get<double>(), 0);
  for (const auto& row : doc["rows"]) {
    // medians of the repeats within their range; the memory roofline from the weights a step
    // reads and the cache at the mean context, at the bandwidth measured beside the row; the
    // compute one at the peak measured beside it, of the kind its weights run (f32: one row of
    // x against bf16 or f32 weights); the roofline the longer of the two
    EXPECT_EQ(row["batch"], 1);
    EXPECT_LE(row["ms_per_step_min"].get<double>(), row["ms_per_step"].get<double>());
    EXPECT_LE(row["ms_per_step"].get<double>(), row["ms_per_step_max"].get<double>());
    const double bytes = row["weight_bytes"].get<double>() + row["mean_cache_bytes"].get<double>();
    EXPECT_GT(row["bandwidth_gb_per_s"].get<double>(), 0);
    EXPECT_NEAR(row["memory_roofline_ms"].get<double>(),
                bytes / (row["bandwidth_gb_per_s"].get<double>() * 1e6),
                1e-9 * row["memory_roofline_ms"].get<double>());
    EXPECT_EQ(row["peak_kind"], "f32");  // bf16 weights at one row widen to f32
    EXPECT_EQ(row["compute_roofline_ms"].is_null(), row["peak_gmacs"].is_null());
    const double compute =
        row["compute_roofline_ms"].is_null() ? 0.0 : row["compute_roofline_ms"].get<double>();
    EXPECT_DOUBLE_EQ(row["roofline_ms"].get<double>(),
                     std::max(row["memory_roofline_ms"].get<double>(), compute));
    EXPECT_NEAR(row["roofline_fraction"].get<double>(),
                row["roofline_ms"].get<double>() / row["ms_per_step"].get<double>(), 1e-9);
    EXPECT_GT(row["profile_dense_ms"].get<double>(), 0);  // every step runs the dense layers
    EXPECT_GT(row["profile_attention_ms"].get<double>(), 0);
    EXPECT_GE(row["profile_other_ms"].get<double>(), 0);
  }
  // --weight-dtype and --batch: a row each; the dense layers' bytes by dtype (bf16 half of f32's
  // matrices, q8_0 34 bytes a block of 32), every sequence of a batch decoded; --ragged: prompts
  // of 8, 7 and 6 tokens (one page each, as 8 would be)
  const RunResult dtypes = run_kvlab(
      "bench generate --attn gqa:2 --prompt 8 --generate 4 --long-prompt 0 --repeats 1 "
      "--weight-dtype f32,bf16,q8_0 --batch 1,3 --ragged" +
      model);
  ASSERT_EQ(dtypes.exit_code, 0) << dtypes.err;
  const nlohmann::json drows = nlohmann::json::parse(dtypes.out)["rows"];
  ASSERT_EQ(drows.size(), 6u);
  EXPECT_EQ(drows[0]["weight_dtype"], "f32");
  EXPECT_EQ(drows[1]["batch"], 3);
  EXPECT_EQ(drows[4]["weight_dtype"], "q8_0");
  EXPECT_EQ(drows[1]["cache_bytes"].get<int64_t>(), 3 * drows[0]["cache_bytes"].get<int64_t>());
  EXPECT_EQ(drows[1]["ragged"], true);
  EXPECT_DOUBLE_EQ(drows[0]["mean_prompt"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(drows[1]["mean_prompt"].get<double>(), 7.0);
  // each row's tokens/s against the first batch size's of its weight dtype, round by round (one
  // round here: the ratio of the two rows' tokens/s)
  for (size_t i = 0; i < drows.size(); ++i) {
    EXPECT_EQ(drows[i]["first_batch"], 1);
    const double first = drows[i - i % 2]["decode_tokens_per_s"].get<double>();
    EXPECT_NEAR(drows[i]["tokens_per_s_vs_first_batch"].get<double>(),
                drows[i]["decode_tokens_per_s"].get<double>() / first, 1e-9)
        << i;
  }
  EXPECT_EQ(drows[0]["tokens_per_s_vs_first_batch"].get<double>(), 1.0);
  // and the ratio the rooflines allow: batch × the first row's roofline ÷ its own
  for (size_t i = 0; i < drows.size(); ++i) {
    const nlohmann::json& first = drows[i - i % 2];
    EXPECT_NEAR(drows[i]["roofline_vs_first_batch"].get<double>(),
                drows[i]["batch"].get<double>() * first["roofline_ms"].get<double>() /
                    drows[i]["roofline_ms"].get<double>(),
                1e-9)
        << i;
  }
  // the matrices' elements, written out: q 32×32, k and v 16×32 (2 groups of 8), o 32×32, gate
  // and up 128×32, down 32×128, the tied LM head 256×32; norms and the embedding row stay f32
  const int64_t elements = 32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 128 * 32 + 256 * 32;
  const int64_t f32_bytes = drows[0]["weight_bytes"], bf16_bytes = drows[2]["weight_bytes"],
                q8_bytes = drows[4]["weight_bytes"];
  EXPECT_EQ(f32_bytes - bf16_bytes, 2 * elements);
  // q8_0 in ggml's blocks, 34 bytes a 32; stored as panels (matvec.h), a row of an odd count of
  // blocks (here one: the 32-input matrices) ends its panel's last line of scales with 32 zero
  // bytes: the panels of 16 rows of q 2, k 1, v 1, o 2, gate 8, up 8, the head 16
  const bool q8_panels =
      kvlab::fastest_weight_order(kvlab::DType::kQ8_0) == kvlab::WeightOrder::kPanels;
  EXPECT_EQ(bf16_bytes - q8_bytes, 2 * elements - elements / 32 * 34 -
                                       (q8_panels ? (2 + 1 + 1 + 2 + 8 + 8 + 16) * 32 : 0));
  // q8_0 at 1 and 3 rows: the int8 dot products' peak (VNNI's, or AVX2's), none on the scalar
  // reference; the f32 rows at f32's
  for (size_t i : {4u, 5u}) {
    EXPECT_TRUE(drows[i]["peak_kind"].is_null() || drows[i]["peak_kind"] == "int8")
        << drows[i]["peak_kind"];
  }
  EXPECT_EQ(drows[0]["peak_kind"], "f32");
  EXPECT_EQ(drows[1]["peak_kind"], "f32");
  // each row says whether its weights and cache fit in the last-level cache the CPU reports (the
  // roofline at the memory's bandwidth is then not their ceiling), and the table's text says so
  // under the table where any row does
  const int64_t llc_bytes = nlohmann::json::parse(dtypes.out)["last_level_cache_bytes"];
  EXPECT_GE(llc_bytes, 0);
  for (const nlohmann::json& row : drows) {
    const int64_t bytes = row["weight_bytes"].get<int64_t>() + row["cache_bytes"].get<int64_t>();
    EXPECT_EQ(row["fits_last_level_cache"], llc_bytes > 0 && bytes <= llc_bytes) << bytes;
  }
  // (this model's ~100 KB fit in any last-level cache a CPU reports)
  const RunResult text = run_kvlab(
      "bench generate --attn gqa:2 --prompt 8 --generate 4 --long-prompt 0 --repeats 1 --layers 1 "
      "--d-model 32 --heads 4");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(contains(text.out, "last-level cache this CPU reports"), llc_bytes > 0) << text.out;
  const RunResult fp8 = run_kvlab("bench generate --attn gqa:2 --weight-dtype fp8" + model);
  EXPECT_EQ(fp8.exit_code, 2);
  EXPECT_TRUE(contains(fp8.err, "weight-dtype")) << fp8.err;
  // --key-order pairs: the two-stream bf16 cache takes it, gva (one stream) keeps rows; a bad
  // value is refused naming the flag
  const RunResult ordered = run_kvlab(
      "bench generate --attn gqa:2 --attn gva:2,dr=4 --prompt 8 --generate 4 --long-prompt 0 "
      "--key-order pairs --repeats 1" +
      model);
  ASSERT_EQ(ordered.exit_code, 0) << ordered.err;
  const nlohmann::json orows = nlohmann::json::parse(ordered.out)["rows"];
  ASSERT_EQ(orows.size(), 2u);
  EXPECT_EQ(orows[0]["key_order"], "pairs");
  EXPECT_EQ(orows[1]["key_order"], "rows");
  const RunResult typo = run_kvlab("bench generate --attn gqa:2 --key-order diagonal" + model);
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(contains(typo.err, "key-order")) << typo.err;
}

TEST(CliBenchTest, TrainBenchmarkReportsTokensPerSecond) {
  const RunResult r = run_kvlab(
      "bench train --layers 1 --d-model 32 --heads 2 --seq-len 16 "
      "--batch 2 --steps 2 --warmup 1 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_GT(doc["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(doc["threads"], 1);
}

// --profile: one more step under libtorch's profiler; the fused attention shows as its own ops
// (one forward and one backward per layer), the composed reference as libtorch's softmax; self
// times add up to at most the profiled step.
// --compare-pytorch's plumbing, against a stand-in for bench/pytorch_train.py that prints what
// the twin prints (PyTorch itself is not a test dependency): kvlab ÷ PyTorch is computed per
// round from the two measurements, the twin's malloc is set as kvlab sets its own, a twin with
// another parameter count is refused, and so is a missing or failing twin.
TEST(CliBenchTest, TrainComparisonWithPytorchDividesTheTwoMeasurements) {
  if (std::system("test -x /usr/bin/python3") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 is not installed";
  }
  const std::string dir = fresh_dir("compare-pytorch");
  std::filesystem::create_directories(dir);
  const std::string small =
      "bench train --layers 1 --d-model 16 --heads 2 --seq-len 8 --batch 2 "
      "--steps 1 --warmup 0 --rounds 2 --compare-pytorch ";
  const auto twin = [&](const std::string& name, int64_t params, const std::string& extra) {
    std::ofstream(dir + "/" + name)
        << "import json, sys\n"
        << extra << "print('loading')\nprint(json.dumps({'threads': 1, 'params': " << params
        << ", 'tokens_per_s': 250.0, 'step_ms_median': 64.0, 'step_ms_min': 60.0, "
           "'step_ms_max': 70.0}))\n";
    return " --pytorch-script " + dir + "/" + name;
  };
  // 1 layer, D 16, byte vocabulary, context 8: 256·16 + 8·16 + (2·16 + 4·(16·16 + 16) +
  // 2·16 + 16·64 + 64 + 64·16 + 16) + 2·16 parameters, tied
  const int64_t params = 256 * 16 + 8 * 16 +
                         (2 * 16 + 4 * (16 * 16 + 16) + 2 * 16 + 16 * 64 + 64 + 64 * 16 + 16) +
                         2 * 16;
  RunResult r = run_kvlab(small + "--format json" +
                              twin("twin.py", params,
                                   "import os\nif 'glibc.malloc.mmap_threshold=33554432' not in "
                                   "os.environ.get('GLIBC_TUNABLES', ''): sys.exit('malloc not set "
                                   "as kvlab sets it')\n"),
                          "env -u GLIBC_TUNABLES");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["params"], params);
  ASSERT_EQ(doc["kvlab_over_pytorch"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(doc["pytorch_tokens_per_s"][i], 250.0);
    EXPECT_DOUBLE_EQ(doc["kvlab_over_pytorch"][i].get<double>(),
                     doc["kvlab_tokens_per_s"][i].get<double>() / 250.0);
  }
  r = run_kvlab(small + twin("twin.py", params, ""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "| median ")) << r.out;
  r = run_kvlab(small + twin("other.py", params + 1, ""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "compare-pytorch: the PyTorch twin has")) << r.err;
  r = run_kvlab(small + twin("broken.py", params, "sys.exit('no torch here')\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "no torch here")) << r.err;
  r = run_kvlab(small + " --pytorch-script " + dir + "/absent.py");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "is not there")) << r.err;
  r = run_kvlab(small + " --attn gqa:2" + twin("twin.py", params, ""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--compare-pytorch runs mha")) << r.err;
}

TEST(CliBenchTest, TrainBenchmarkProfilesOneStepPerOp) {
  for (const bool composed : {false, true}) {
    const RunResult r = run_kvlab(
        std::string("bench train --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 2 "
                    "--steps 1 --warmup 0 --profile --format json") +
        (composed ? " --composed-attention" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["attention"], composed ? "composed" : "fused");
    const nlohmann::json& profile = doc["profile"];
    std::map<std::string, int64_t> calls;
    double self_ms = 0;
    for (const auto& op : profile["ops"]) {
      calls[op["name"].get<std::string>()] = op["calls"].get<int64_t>();
      self_ms += op["self_ms"].get<double>();
      EXPECT_GE(op["total_ms"].get<double>() + 1e-9, op["self_ms"].get<double>()) << op;
    }
    EXPECT_EQ(calls["phase: backward"], 1);
    EXPECT_EQ(calls["phase: optimizer"], 1);
    EXPECT_EQ(calls.count("kvlab::fused_causal_attention"), composed ? 0u : 1u);
    if (!composed) {
      EXPECT_EQ(calls["kvlab::fused_causal_attention"], 2);
      EXPECT_EQ(calls["kvlab::fused_causal_attention_backward"], 2);
    } else {
      EXPECT_GE(calls["aten::_softmax"], 2);
    }
    EXPECT_GT(self_ms, 0);
    EXPECT_LE(self_ms, profile["step_ms"].get<double>() * 1.001);
    EXPECT_GE(profile["outside_ops_ms"].get<double>(), -1e-3);
  }
}

// The wait policy the OpenMP runtime itself reports: OMP_DISPLAY_ENV=verbose makes libgomp print
// its settings from its load-time constructor, the moment it has read them. GOMP_SPINCOUNT is
// what tells the policies apart (libgomp prints OMP_WAIT_POLICY = 'PASSIVE' when it is unset,
// too): 0 for passive, 300000 for unset, 3e10 for active.
TEST(CliTest, OpenMpWorkersSleepUnlessTheUserChoseOtherwise) {
  const RunResult unset = run_kvlab("--version", "env -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose");
  ASSERT_EQ(unset.exit_code, 0) << unset.err;
  ASSERT_TRUE(contains(unset.err, "GOMP_SPINCOUNT"))
      << "the OpenMP runtime printed no settings: " << unset.err;
  EXPECT_TRUE(contains(unset.err, "OMP_WAIT_POLICY = 'PASSIVE'")) << unset.err;
  EXPECT_TRUE(contains(unset.err, "GOMP_SPINCOUNT = '0'")) << unset.err;
  const RunResult chosen =
      run_kvlab("--version", "env OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose");
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_TRUE(contains(chosen.err, "OMP_WAIT_POLICY = 'ACTIVE'")) << chosen.err;
  EXPECT_FALSE(contains(chosen.err, "GOMP_SPINCOUNT = '0'")) << chosen.err;
}

}  // namespace
