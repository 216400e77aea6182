// Hostile input, table-driven: every case runs the program on one malformed input and
// checks what a user sees — the exit code, a first stderr line that names the field or file,
// nothing on stdout, and no crash (no signal, no sanitizer report: CI runs this suite against
// an ASan/UBSan build too). Placeholders in a case's arguments: {d} its own scratch folder,
// {ckpt} a tiny trained text checkpoint, {syn} a tiny trained synthetic run (both read-only).
// The program is kvlab-asan's run_kvlab() linked into this binary, each case in a forked child
// (tests/harness/process.h): the same process isolation as starting kvlab-asan, without loading
// its libraries ~330 times. The signal tests below start kvlab-asan itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/run_kvlab.h"
#include "harness/process.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using kvlab::test::first_line;
using kvlab::test::ProcessResult;
using kvlab::test::slurp;
using RunResult = ProcessResult;

void write(const std::string& path, const std::string& text) {
  kvlab::test::write_file(path, text);
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// The program under test: this build's kvlab-asan — its run_kvlab(), linked into this test and
// run in a forked child (the sanitized program's libraries load once, in this process) —, or
// KVLAB_HOSTILE_BIN, started by exec (to run the table against another build, e.g. an older
// one for a before/after comparison).
std::string other_bin() {
  const char* other = std::getenv("KVLAB_HOSTILE_BIN");
  return other != nullptr && *other != '\0' ? other : "";
}

std::string kvlab_bin() {
  const std::string other = other_bin();
  return other.empty() ? KVLAB_BIN : other;
}

int kvlab_main(int argc, char** argv) {
  return kvlab::run_kvlab(argc, argv, std::cin, std::cout, std::cerr);
}

// `args` as a shell would split them, run in the folder `cwd` (stdin /dev/null).
RunResult run_line(const std::string& args, const std::string& cwd) {
  kvlab::test::Invocation invocation = kvlab::test::parse_command_line(args);
  invocation.cwd = cwd;
  if (!other_bin().empty()) return kvlab::test::run_exec(other_bin(), invocation);
  return kvlab::test::run_forked(kvlab_main, "kvlab", invocation);
}

// A shared, tiny, trained checkpoint of each kind the cases read.
class Fixtures {
 public:
  static Fixtures& get() {
    static Fixtures f;
    return f;
  }
  std::string root, text_run, synthetic_run, corpus, hf_export;

 private:
  Fixtures() {
    root = fs::temp_directory_path() / ("kvlab_hostile_" + std::to_string(::getpid()));
    fs::create_directories(root);
    corpus = root + "/corpus.txt";
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "In the beginning was the word, line " + std::to_string(i) + ".\n";
    write(corpus, text);
    text_run = root + "/text";
    synthetic_run = root + "/syn";
    const RunResult a = run_line(
        "train --task text --data " + corpus +
            " --seq-len 16 --layers 1 --d-model 16 --heads 2 "
            "--pos rope --steps 2 --batch 4 --eval-sequences 4 --threads 1 --no-progress --out " +
            text_run,
        root);
    const RunResult b = run_line(
        "train --task reverse --seq-len 8 --layers 1 --d-model 16 --heads 2 --steps 2 --batch 4 "
        "--eval-sequences 4 --threads 1 --no-progress --out " +
            synthetic_run,
        root);
    if (a.exit_code != 0 || b.exit_code != 0) {
      throw std::runtime_error("fixture training failed: " + a.err + b.err);
    }
    hf_export = root + "/hf";
    const RunResult c = run_line("export --checkpoint " + text_run + " --out " + hf_export, root);
    if (c.exit_code != 0) throw std::runtime_error("fixture export failed: " + c.err);
  }
  ~Fixtures() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};

// Files a case lays into its scratch folder first.
using Setup = std::function<void(const std::string& dir)>;

std::string deep_json(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A copy of the text checkpoint whose config.json has `edit` applied (a JSON patch on the
// parsed document), or is replaced by `raw` when given.
Setup checkpoint_with(std::function<void(json&)> edit, std::string raw = "") {
  return [edit, raw](const std::string& dir) {
    fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt", fs::copy_options::recursive);
    if (!raw.empty()) {
      write(dir + "/ckpt/config.json", raw);
      return;
    }
    json config = json::parse(slurp(dir + "/ckpt/config.json"));
    edit(config);
    write(dir + "/ckpt/config.json", config.dump());
  };
}

Setup checkpoint_raw_config(const std::string& raw) {
  return checkpoint_with([](json&) {}, raw);
}

Setup checkpoint_field(const std::string& pointer, json value) {
  return checkpoint_with([pointer, value](json& c) { c[json::json_pointer(pointer)] = value; });
}

Setup file(const std::string& name, std::string content) {
  return [name, content](const std::string& dir) { write(dir + "/" + name, content); };
}

Setup link_to(const std::string& name, const std::string& target) {
  return [name, target](const std::string& dir) { fs::create_symlink(target, dir + "/" + name); };
}

Setup folder(const std::string& name) {
  return [name](const std::string& dir) { fs::create_directories(dir + "/" + name); };
}

// A copy of the exported Hugging Face folder ({d}/hf) with `name` replaced by `content` (or
// removed when content is empty).
Setup hf_folder_with(const std::string& name, std::string content) {
  return [name, content](const std::string& dir) {
    fs::copy(Fixtures::get().hf_export, dir + "/hf", fs::copy_options::recursive);
    if (content.empty()) {
      fs::remove(dir + "/hf/" + name);
    } else {
      write(dir + "/hf/" + name, content);
    }
  };
}

// A valid Hugging Face config with one field replaced (null removes it).
Setup hf_config_with(const std::string& key, json value) {
  return [key, value](const std::string& dir) {
    json config = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"hidden_size", 256},
                   {"intermediate_size", 688},
                   {"num_attention_heads", 8},
                   {"num_key_value_heads", 2},
                   {"num_hidden_layers", 2},
                   {"vocab_size", 1000},
                   {"rope_theta", 10000.0}};
    if (value.is_null()) {
      config.erase(key);
    } else {
      config[key] = value;
    }
    write(dir + "/config.json", config.dump());
  };
}

Setup deepseek_config_with(const std::string& key, json value) {
  return [key, value](const std::string& dir) {
    json config = {{"model_type", "deepseek_v2"},  {"hidden_size", 256},
                   {"intermediate_size", 688},     {"num_attention_heads", 8},
                   {"num_hidden_layers", 2},       {"vocab_size", 1000},
                   {"kv_lora_rank", 64},           {"qk_rope_head_dim", 16},
                   {"qk_nope_head_dim", 32},       {"v_head_dim", 32},
                   {"n_routed_experts", 8},        {"num_experts_per_tok", 2},
                   {"moe_intermediate_size", 128}, {"n_shared_experts", 1},
                   {"first_k_dense_replace", 1}};
    config[key] = value;
    write(dir + "/config.json", config.dump());
  };
}

// A results.json of the synthetic suite with `edit` applied.
Setup results_with(std::function<void(json&)> edit) {
  return [edit](const std::string& dir) {
    json r = {{"suite", "synthetic"},
              {"preset", "quick"},
              {"seeds", 1},
              {"tasks", {"reverse"}},
              {"configs",
               {{{"d_model", 64},
                 {"layers", 2},
                 {"heads", 4},
                 {"seq_len", 16},
                 {"steps", 10},
                 {"batch", 8},
                 {"lr", 0.001}}}},
              {"variants",
               {{{"attn", "mha"},
                 {"average", 0.5},
                 {"average_std", 0.0},
                 {"paper_average", 0.758},
                 {"params", 1000},
                 {"cached_scalars_per_token", 128}}}},
              {"aggregates", {{{"attn", "mha"}, {"task", "reverse"}, {"mean", 0.5}, {"std", 0.0}}}},
              {"runs",
               {{{"attn", "mha"},
                 {"task", "reverse"},
                 {"seed", 0},
                 {"label", "mha"},
                 {"curve", {{1, 2.0}, {2, 1.5}}}}}}};
    edit(r);
    write(dir + "/results.json", r.dump());
  };
}

struct HostileCase {
  std::string name;
  std::string args;
  std::string names;  // the first stderr line must contain this (a field or a file)
  Setup setup = nullptr;
  int exit_code = 2;
};

std::vector<HostileCase> cases() {
  std::vector<HostileCase> c;
  auto add = [&](std::string name, std::string args, std::string names, Setup setup = nullptr,
                 int exit_code = 2) {
    c.push_back({std::move(name), std::move(args), std::move(names), std::move(setup), exit_code});
  };
  const std::string big(1 << 20, 'x');  // a 1 MB string: must not be echoed whole
  const std::string train = "train --task reverse --out {d}/run ";

  // --- the command line itself
  add("NoSubcommand", "", "subcommand");
  add("UnknownSubcommand", "frobnicate", "unknown subcommand 'frobnicate'");
  add("UnknownSubcommandHuge", big.substr(0, 5000), "unknown subcommand");
  add("UnknownFlag", "cache --bogus", "--bogus");
  add("BenchWithoutKind", "bench", "subcommand");

  // --- train: every float flag refuses NaN, infinities and out-of-range values
  for (const char* flag :
       {"--lr", "--lr-floor", "--weight-decay", "--beta1", "--beta2", "--clip", "--rope-theta"}) {
    const std::string f = std::string(flag).substr(2);
    for (const char* value : {"nan", "inf", "-inf", "1e999"}) {
      add("Train_" + f + "_" + value, train + flag + " " + value, flag);
    }
  }
  add("Train_lr_negative", train + "--lr -1", "lr");
  add("Train_lr_floor_above_one", train + "--lr-floor 2", "lr_floor");
  add("Train_weight_decay_negative", train + "--weight-decay -0.5", "weight_decay");
  add("Train_beta1_one", train + "--beta1 1", "beta1");
  add("Train_beta2_above_one", train + "--beta2 1.5", "beta2");
  add("Train_clip_negative", train + "--clip -1", "clip");
  add("Train_matmul_precision_unknown", train + "--matmul-precision fp8", "matmul-precision");
  add("BenchTrain_matmul_precision_unknown", "bench train --matmul-precision half",
      "matmul-precision");
  add("Train_rope_theta_zero", train + "--pos rope --rope-theta 0", "rope_theta");
  // integer flags: what does not fit, what is not a number, what is out of range
  for (const char* flag :
       {"--steps", "--batch", "--accum", "--warmup", "--eval-every", "--checkpoint-every",
        "--seq-len", "--eval-sequences", "--layers", "--d-model", "--heads", "--mlp"}) {
    const std::string f = std::string(flag).substr(2);
    add("Train_" + f + "_overflow", train + flag + " 99999999999999999999", flag);
    add("Train_" + f + "_text", train + flag + " twelve", flag);
  }
  add("Train_seed_overflow", train + "--seed 99999999999999999999", "--seed");
  add("Train_seed_negative", train + "--seed -1", "--seed");
  add("Train_steps_zero", train + "--steps 0", "steps");
  add("Train_batch_zero", train + "--batch 0", "batch");
  add("Train_accum_uneven", train + "--batch 10 --accum 3", "accumulation");
  add("Train_warmup_negative", train + "--warmup -1", "warmup");
  add("Train_eval_sequences_zero", train + "--eval-sequences 0", "eval_sequences");
  add("Train_seq_len_zero", train + "--seq-len 0", "seq_len");
  add("Train_seq_len_huge", "train --task reverse --seq-len 100000000 --out {d}/run", "seq_len");
  add("Train_batch_huge", "train --task reverse --batch 4000000000000 --out {d}/run", "batch");
  add("Train_layers_huge", train + "--layers 100000000", "layers");
  add("Train_mlp_max", train + "--mlp 9223372036854775807", "mlp");
  add("Train_heads_not_dividing", train + "--heads 3", "head_dim");
  add("Train_threads_negative", train + "--threads -1", "--threads");
  add("Train_threads_huge", train + "--threads 100000", "--threads");
  add("Train_unknown_task", "train --task frobnicate --out {d}/run", "task");
  add("Train_no_task", "train --out {d}/run", "task");
  add("Train_no_out", "train --task reverse", "out");
  add("Train_bad_attn", train + "--attn gva:3", "groups");
  add("Train_unknown_attn", train + "--attn frobnicate", "attn");
  add("Train_huge_attn", train + "--attn " + big.substr(0, 100000), "attn");
  add("Train_bad_norm", train + "--norm frobnicate", "norm");
  add("Train_bad_pos", train + "--pos frobnicate", "pos");
  add("Train_bad_bias", train + "--bias frobnicate", "bias");
  add("Train_bad_mlp_kind", train + "--mlp-kind frobnicate", "mlp_kind");
  add("Train_bad_format", train + "--format xml", "format");
  add("Train_out_is_a_file", "train --task reverse --out {d}/file", "out", file("file", "x"));
  add("Train_text_without_data", "train --task text --out {d}/run", "data");
  add("Train_data_missing", "train --task text --data {d}/none.txt --out {d}/run", "data");
  add("Train_data_is_a_folder", "train --task text --data {d}/sub --out {d}/run", "data",
      folder("sub"));
  add("Train_data_dev_zero", "train --task text --data {d}/zero --out {d}/run", "data",
      link_to("zero", "/dev/zero"));
  add("Train_data_too_short", "train --task text --data {d}/t.txt --out {d}/run", "data",
      file("t.txt", "tiny"));
  add("Train_data_for_synthetic", "train --task reverse --data {d}/t.txt --out {d}/run", "data",
      file("t.txt", "tiny"));
  add("Train_swap_odd", "train --task swap --seq-len 7 --out {d}/run", "seq_len");
  add("Train_out_holds_a_run", "train --task reverse --out {syn}", "out");
  add("Train_resume_missing", "train --resume {d}/none", "resume");
  add("Train_resume_a_file", "train --resume {d}/file", "resume", file("file", "x"));
  add("Train_resume_empty_folder", "train --resume {d}/empty", "resume", folder("empty"));
  add("Train_resume_with_steps", "train --resume {syn} --steps 5", "resume");
  add("Train_resume_broken_state", "train --resume {d}/run", "resume", [](const std::string& dir) {
    fs::copy(Fixtures::get().synthetic_run, dir + "/run", fs::copy_options::recursive);
    write(dir + "/run/checkpoint/trainer_state.json", "{\"step\": ");
  });

  // --- eval
  add("Eval_missing", "eval --checkpoint {d}/none", "checkpoint");
  add("Eval_file", "eval --checkpoint {d}/file", "checkpoint", file("file", "x"));
  add("Eval_context_zero", "eval --checkpoint {ckpt} --context 0", "context");
  add("Eval_context_negative", "eval --checkpoint {ckpt} --context -5", "context");
  add("Eval_context_huge", "eval --checkpoint {ckpt} --context 100000000", "data");
  add("Eval_context_overflow", "eval --checkpoint {ckpt} --context 99999999999999999999",
      "--context");
  add("Eval_context_on_synthetic", "eval --checkpoint {syn} --context 8", "context");
  add("Eval_bad_format", "eval --checkpoint {ckpt} --format xml", "format");
  add("Eval_cache_dtype_unknown", "eval --checkpoint {ckpt} --cache-dtype q5_1", "cache-dtype");
  add("Eval_cache_dtype_with_context", "eval --checkpoint {ckpt} --cache-dtype q8_0 --context 8",
      "context");
  add("Eval_cache_dtype_on_synthetic", "eval --checkpoint {syn} --cache-dtype q4_0", "cache-dtype");
  add("Eval_weight_dtype_fp8", "eval --checkpoint {ckpt} --weight-dtype fp8", "weight-dtype");
  add("Eval_weight_dtype_with_precision",
      "eval --checkpoint {ckpt} --weight-dtype q8_0 --attn-precision bf16", "weight-dtype");
  add("Eval_weight_dtype_on_synthetic", "eval --checkpoint {syn} --weight-dtype bf16",
      "weight-dtype");
  add("Eval_decode_batch_zero", "eval --checkpoint {ckpt} --weight-dtype q8_0 --decode-batch 0",
      "decode-batch");
  add("Eval_decode_batch_huge", "eval --checkpoint {ckpt} --weight-dtype q8_0 --decode-batch 257",
      "decode-batch");
  add("Eval_decode_batch_without_the_decode_path", "eval --checkpoint {ckpt} --decode-batch 8",
      "decode-batch");
  add("Eval_data_missing", "eval --checkpoint {ckpt} --data {d}/none.txt", "data");
  add("Eval_data_differs", "eval --checkpoint {ckpt} --data {d}/other.txt", "data",
      file("other.txt", std::string(4000, 'z')));
  add("Eval_data_on_synthetic", "eval --checkpoint {syn} --data {d}/other.txt", "data",
      file("other.txt", "x"));
  // a checkpoint's config.json, broken every way
  add("Ckpt_config_deep_layers", "eval --checkpoint {d}/ckpt", "checkpoint",
      checkpoint_raw_config("{\"model\": {\"layers\": " + deep_json(100000) + "}}"));
  add("Ckpt_config_not_json", "eval --checkpoint {d}/ckpt", "checkpoint",
      checkpoint_raw_config("{\"model\": "));
  add("Ckpt_config_empty", "eval --checkpoint {d}/ckpt", "checkpoint", checkpoint_raw_config(" "));
  add("Ckpt_config_array", "eval --checkpoint {d}/ckpt", "config.json",
      checkpoint_raw_config("[1, 2]"));
  add("Ckpt_config_number_overflow", "eval --checkpoint {d}/ckpt", "checkpoint",
      checkpoint_raw_config("{\"model\": {\"layers\": 1e999}}"));
  add("Ckpt_config_is_a_folder", "eval --checkpoint {d}/ckpt", "config.json",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        fs::remove(dir + "/ckpt/config.json");
        fs::create_directories(dir + "/ckpt/config.json");
      });
  add("Ckpt_config_dev_zero", "eval --checkpoint {d}/ckpt", "config.json",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        fs::remove(dir + "/ckpt/config.json");
        fs::create_symlink("/dev/zero", dir + "/ckpt/config.json");
      });
  add("Ckpt_layers_huge", "eval --checkpoint {d}/ckpt", "layers",
      checkpoint_field("/model/layers", 100000000));
  add("Ckpt_layers_zero", "eval --checkpoint {d}/ckpt", "layers",
      checkpoint_field("/model/layers", 0));
  add("Ckpt_layers_string", "eval --checkpoint {d}/ckpt", "model.layers",
      checkpoint_field("/model/layers", "two"));
  add("Ckpt_layers_float", "eval --checkpoint {d}/ckpt", "model.layers",
      checkpoint_field("/model/layers", 1.5));
  add("Ckpt_mlp_huge", "eval --checkpoint {d}/ckpt", "mlp",
      checkpoint_field("/model/mlp", int64_t{9223372036854775807}));
  add("Ckpt_d_model_big", "eval --checkpoint {d}/ckpt", "checkpoint",
      checkpoint_field("/model/d_model", 16000000));
  add("Ckpt_heads_negative", "eval --checkpoint {d}/ckpt", "heads",
      checkpoint_field("/model/heads", -2));
  add("Ckpt_vocab_big_string", "eval --checkpoint {d}/ckpt", "model.vocab",
      checkpoint_field("/model/vocab", big));
  add("Ckpt_kind_unknown", "eval --checkpoint {d}/ckpt", "model_kind",
      checkpoint_field("/model/kind", "frobnicate"));
  add("Ckpt_attn_unknown", "eval --checkpoint {d}/ckpt", "attn", checkpoint_field("/attn", "frob"));
  add("Ckpt_attn_huge", "eval --checkpoint {d}/ckpt", "attn", checkpoint_field("/attn", big));
  add("Ckpt_cache_dtype_unknown", "eval --checkpoint {d}/ckpt", "dtype",
      checkpoint_field("/cache_dtype", "q3"));
  add("Ckpt_rope_theta_string", "eval --checkpoint {d}/ckpt", "model.rope_theta",
      checkpoint_field("/model/rope_theta", "x"));
  add("Ckpt_model_missing", "eval --checkpoint {d}/ckpt", "model",
      checkpoint_with([](json& config) { config.erase("model"); }));
  add("Ckpt_task_missing", "eval --checkpoint {d}/ckpt", "checkpoint",
      checkpoint_with([](json& config) { config.erase("task"); }));
  add("Ckpt_task_malformed", "eval --checkpoint {d}/ckpt", "task",
      checkpoint_field("/task/seq_len", "long"));
  add("Ckpt_task_unknown", "eval --checkpoint {d}/ckpt", "task",
      checkpoint_field("/task/name", "frobnicate"));
  add("Ckpt_weights_missing", "eval --checkpoint {d}/ckpt", "model.safetensors",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        fs::remove(dir + "/ckpt/model.safetensors");
      });
  add("Ckpt_weights_truncated", "eval --checkpoint {d}/ckpt", "model.safetensors",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        const std::string bytes = slurp(dir + "/ckpt/model.safetensors");
        write(dir + "/ckpt/model.safetensors", bytes.substr(0, bytes.size() / 2));
      });
  add("Ckpt_weights_garbage", "eval --checkpoint {d}/ckpt", "model.safetensors",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        write(dir + "/ckpt/model.safetensors", std::string(64, '\xff'));
      });
  add("Ckpt_weights_wrong_shape", "eval --checkpoint {d}/ckpt", "model.safetensors",
      checkpoint_field("/model/mlp", 32));
  add("Ckpt_weights_dev_zero", "eval --checkpoint {d}/ckpt", "model.safetensors",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().text_run + "/checkpoint", dir + "/ckpt",
                 fs::copy_options::recursive);
        fs::remove(dir + "/ckpt/model.safetensors");
        fs::create_symlink("/dev/zero", dir + "/ckpt/model.safetensors");
      });

  // --- generate
  const std::string gen = "generate --checkpoint {ckpt} --prompt In ";
  for (const char* value : {"nan", "inf", "-1", "1e999"}) {
    add(std::string("Generate_temperature_") + value, gen + "--temperature " + value,
        "--temperature");
  }
  for (const char* value : {"nan", "0", "1.5", "-0.1"}) {
    add(std::string("Generate_top_p_") + value, gen + "--top-p " + value, "top");
  }
  add("Generate_top_k_negative", gen + "--top-k -1", "top_k");
  add("Generate_max_tokens_negative", gen + "--max-tokens -1", "max_tokens");
  add("Generate_max_tokens_overflow", gen + "--max-tokens 99999999999999999999", "--max-tokens");
  add("Generate_max_tokens_huge", gen + "--max-tokens 4000000000", "max_tokens");
  add("Generate_seed_overflow", gen + "--seed 99999999999999999999", "--seed");
  add("Generate_seed_negative", gen + "--seed -3", "--seed");
  add("Generate_cache_dtype_unknown", gen + "--cache-dtype q3", "dtype");
  add("Generate_cache_dtype_near_miss", gen + "--cache-dtype q8", "cache_dtype");
  add("Generate_weight_dtype_unknown", gen + "--weight-dtype int4", "weight-dtype");
  add("Generate_weight_dtype_fp8", gen + "--weight-dtype fp8", "weight-dtype");
  add("Generate_empty_prompt", "generate --checkpoint {ckpt} --prompt ''", "prompt");
  add("Generate_no_prompt", "generate --checkpoint {ckpt}", "--prompt");
  add("Generate_synthetic_checkpoint", "generate --checkpoint {syn} --prompt x", "checkpoint");
  add("Generate_missing_checkpoint", "generate --checkpoint {d}/none --prompt x", "checkpoint");
  add("Generate_threads_negative", gen + "--threads -2", "--threads");

  // --- serve: every case fails before the server listens
  const std::string serve = "serve --checkpoint {ckpt} --port 0 ";
  add("Serve_missing_checkpoint", "serve --checkpoint {d}/none", "checkpoint");
  add("Serve_synthetic_checkpoint", "serve --checkpoint {syn} --port 0", "checkpoint");
  add("Serve_kv_memory_zero", serve + "--kv-cache-memory 0", "kv-cache-memory");
  add("Serve_kv_memory_words", serve + "--kv-cache-memory lots", "kv-cache-memory");
  add("Serve_kv_memory_huge", serve + "--kv-cache-memory 100TiB", "kv-cache-memory");
  add("Serve_kv_memory_too_small", serve + "--kv-cache-memory 1", "kv-cache-memory");
  add("Serve_kv_memory_nan", serve + "--kv-cache-memory nan", "kv-cache-memory");
  add("Serve_port_out_of_range", serve + "--port 70000", "--port");
  add("Serve_host_not_here",
      "serve --checkpoint {ckpt} --port 0 --kv-cache-memory 1MiB --host 203.0.113.9", "port");
  add("Serve_cache_dtype", serve + "--cache-dtype q3", "cache-dtype");
  add("Serve_weight_dtype", serve + "--weight-dtype f8", "weight-dtype");
  add("Serve_attn_precision", serve + "--attn-precision f64", "attn-precision");
  add("Serve_attn_precision_int8_bf16_cache", serve + "--attn-precision int8", "attn-precision");
  add("Serve_chat_template", serve + "--chat-template vicuna", "chat-template");
  add("Serve_max_body_tiny", serve + "--max-body 10", "max-body");
  add("Serve_max_model_len_negative", serve + "--max-model-len -5", "--max-model-len");
  add("Serve_max_num_seqs_zero", serve + "--max-num-seqs 0", "--max-num-seqs");
  add("Serve_read_timeout_nan", serve + "--read-timeout nan", "--read-timeout");
  add("Serve_http_threads_zero", serve + "--http-threads 0", "--http-threads");
  const std::string bench_serve = "bench serve --url http://127.0.0.1:1 ";
  add("BenchServe_url_scheme", "bench serve --url ftp://example", "url");
  add("BenchServe_unreachable", bench_serve + "--num-prompts 2", "url");
  for (const char* value : {"-1", "0", "nan", "fast"}) {
    add(std::string("BenchServe_request_rate_") + value, bench_serve + "--request-rate " + value,
        "request-rate");
  }
  add("BenchServe_num_prompts_zero", bench_serve + "--num-prompts 0", "--num-prompts");
  add("BenchServe_prefix_longer_than_input", bench_serve + "--input-len 8 --prefix-len 9",
      "prefix-len");
  add("BenchServe_format", bench_serve + "--format xml", "format");
  add("BenchServe_dataset_missing", bench_serve + "--dataset {d}/none.jsonl", "dataset");
  add("BenchServe_dataset_not_json", bench_serve + "--dataset {d}/d.jsonl", "dataset",
      file("d.jsonl", "{\"prompt\": \"a\"}\nnot json\n"));
  add("BenchServe_dataset_max_tokens", bench_serve + "--dataset {d}/d.jsonl", "dataset",
      file("d.jsonl", "{\"prompt\": \"a\", \"max_tokens\": -4}\n"));

  // --- cache and summary with a Hugging Face config
  add("HfConfig_deep", "cache --hf-config {d}/config.json", "hf-config",
      file("config.json", "{\"hidden_size\": " + deep_json(100000) + "}"));
  add("HfConfig_deep_in_string_is_fine_but_invalid", "cache --hf-config {d}/config.json",
      "hidden_size", file("config.json", "{\"hidden_size\": \"" + deep_json(100000) + "\"}"));
  add("HfConfig_dev_zero", "cache --hf-config {d}/zero", "hf-config", link_to("zero", "/dev/zero"));
  add("HfConfig_folder", "cache --hf-config {d}/sub", "hf-config", folder("sub"));
  add("HfConfig_missing", "cache --hf-config {d}/none.json", "hf-config");
  add("HfConfig_not_json", "cache --hf-config {d}/config.json", "hf-config",
      file("config.json", "{hidden_size: 1}"));
  add("HfConfig_empty", "cache --hf-config {d}/config.json", "hf-config", file("config.json", ""));
  add("HfConfig_array", "cache --hf-config {d}/config.json", "hf-config",
      file("config.json", "[]"));
  add("HfConfig_number_overflow", "cache --hf-config {d}/config.json", "hf-config",
      file("config.json", "{\"hidden_size\": 1e999}"));
  add("HfConfig_binary", "cache --hf-config {d}/config.json", "hf-config",
      file("config.json", std::string("\x00\x01\xff\xfe", 4)));
  add("HfConfig_hidden_size_string", "cache --hf-config {d}/config.json", "hidden_size",
      hf_config_with("hidden_size", "256"));
  add("HfConfig_hidden_size_big_string", "cache --hf-config {d}/config.json", "hidden_size",
      hf_config_with("hidden_size", big));
  add("HfConfig_hidden_size_negative", "cache --hf-config {d}/config.json", "hidden_size",
      hf_config_with("hidden_size", -256));
  add("HfConfig_hidden_size_float", "cache --hf-config {d}/config.json", "hidden_size",
      hf_config_with("hidden_size", 256.5));
  add("HfConfig_hidden_size_huge", "cache --hf-config {d}/config.json", "d_model",
      hf_config_with("hidden_size", int64_t{1} << 40));
  add("HfConfig_layers_missing", "cache --hf-config {d}/config.json", "num_hidden_layers",
      hf_config_with("num_hidden_layers", nullptr));
  add("HfConfig_layers_huge", "cache --hf-config {d}/config.json", "layers",
      hf_config_with("num_hidden_layers", 100000000));
  add("HfConfig_kv_heads_not_dividing", "cache --hf-config {d}/config.json", "num_key_value_heads",
      hf_config_with("num_key_value_heads", 3));
  add("HfConfig_kv_heads_zero", "cache --hf-config {d}/config.json", "num_key_value_heads",
      hf_config_with("num_key_value_heads", 0));
  add("HfConfig_head_dim_string", "cache --hf-config {d}/config.json", "head_dim",
      hf_config_with("head_dim", "x"));
  add("HfConfig_rope_theta_negative", "cache --hf-config {d}/config.json", "rope_theta",
      hf_config_with("rope_theta", -1));
  add("HfConfig_rope_theta_string", "cache --hf-config {d}/config.json", "rope_theta",
      hf_config_with("rope_theta", "big"));
  add("HfConfig_rope_theta_contradiction", "cache --hf-config {d}/config.json", "rope_theta",
      hf_config_with("rope_parameters", {{"rope_theta", 500000.0}}));
  add("HfConfig_tie_string", "cache --hf-config {d}/config.json", "tie_word_embeddings",
      hf_config_with("tie_word_embeddings", "yes"));
  add("HfConfig_model_type_number", "cache --hf-config {d}/config.json", "model_type",
      hf_config_with("model_type", 5));
  add("HfConfig_attention_bias_string", "cache --hf-config {d}/config.json", "attention_bias",
      hf_config_with("attention_bias", "no"));
  add("HfConfig_vocab_zero", "cache --hf-config {d}/config.json", "vocab_size",
      hf_config_with("vocab_size", 0));
  add("Deepseek_rope_odd", "cache --hf-config {d}/config.json", "the attention",
      deepseek_config_with("qk_rope_head_dim", 7));
  add("Deepseek_latent_string", "cache --hf-config {d}/config.json", "kv_lora_rank",
      deepseek_config_with("kv_lora_rank", "64"));
  add("Deepseek_experts_per_token_too_many", "cache --hf-config {d}/config.json",
      "experts_per_token", deepseek_config_with("num_experts_per_tok", 99));
  add("Deepseek_moe_layer_freq", "cache --hf-config {d}/config.json", "moe_layer_freq",
      deepseek_config_with("moe_layer_freq", 2));
  add("Deepseek_dense_layers_too_many", "cache --hf-config {d}/config.json", "n_dense_layers",
      deepseek_config_with("first_k_dense_replace", 9));
  add("Summary_hf_config_deep", "summary --hf-config {d}/config.json", "hf-config",
      file("config.json", deep_json(100000)));
  // cache flags
  add("Cache_context_negative", "cache --context -1", "context");
  add("Cache_context_text", "cache --context lots", "context");
  add("Cache_context_overflow", "cache --context 99999999999999999999k", "context");
  add("Cache_batch_zero", "cache --batch 0", "batch");
  add("Cache_batch_overflow", "cache --batch 99999999999999999999", "--batch");
  add("Cache_dtype_unknown", "cache --dtype q3", "dtype");
  add("Cache_units_unknown", "cache --units furlongs", "units");
  add("Cache_format_unknown", "cache --format xml", "format");
  add("Cache_attn_groups_zero", "cache --attn gqa:0", "groups");
  add("Cache_attn_option_unknown", "cache --attn mla:frob=1", "attn");
  add("Cache_attn_latent_negative", "cache --attn mla:dc=-1", "dc");
  add("Cache_attn_huge", "cache --attn " + big.substr(0, 100000), "attn");
  add("Cache_model_unknown", "cache --model frobnicate", "model");
  add("Cache_model_and_hf_config", "cache --model llama-3-8b --hf-config x", "--model");
  add("Cache_custom_partial", "cache --layers 2", "model");
  add("Cache_macs_zero_context", "cache --macs --context 0", "context");
  // summary flags
  add("Summary_layers_huge", "summary --layers 100000000 --d-model 64 --heads 4", "layers");
  add("Summary_mlp_max", "summary --mlp 9223372036854775807", "mlp");
  add("Summary_mlp_overflow", "summary --mlp 99999999999999999999", "--mlp");
  add("Summary_rope_theta_nan", "summary --rope-theta nan", "--rope-theta");
  add("Summary_heads_zero", "summary --layers 2 --d-model 64 --heads 0", "heads");
  add("Summary_d_model_not_dividing", "summary --layers 2 --d-model 65 --heads 4", "head_dim");
  add("Summary_kind_unknown", "summary --model-kind frobnicate", "model_kind");
  add("Summary_vit_patch",
      "summary --layers 2 --d-model 64 --heads 4 --model-kind vit "
      "--image-size 28 --patch-size 5 --channels 1 --classes 10",
      "patch_size");
  add("Summary_format_unknown", "summary --format xml", "format");
  add("Summary_attn_unknown", "summary --attn frobnicate", "attn");
  // every width of a spec under the model's bounds, before a module is built (on the meta
  // device its storage size overflowed)
  const std::string huge = "1000000000000000000";
  add("Summary_attn_latent_huge", "summary --attn mla:dc=" + huge, "dc");
  add("Summary_attn_mla_rope_huge", "summary --attn mla:dc=512,dr=" + huge, "dr");
  add("Summary_attn_value_huge", "summary --attn mla:dc=512,dr=64,dv=" + huge, "dv");
  add("Summary_attn_query_latent_huge", "summary --attn mla:dc=512,dr=64,dq=" + huge, "dq");
  add("Summary_attn_gva_rope_huge", "summary --attn gva:8,dr=" + huge, "dr");
  add("Summary_attn_gla_latent_huge", "summary --attn gla:hc=2,dc=" + huge, "dc");
  add("Summary_attn_bias_channels_huge",
      "summary --model-kind vit --layers 2 --d-model 64 --heads 4 --image-size 28 "
      "--patch-size 4 --channels 1 --classes 10 --attn qk-v+:m=" +
          huge,
      "m");
  add("Cache_attn_latent_above_bound", "cache --attn mla:dc=16777217", "dc");

  // --- report on damaged results.json
  add("Report_missing_folder", "report {d}/none", "results");
  add("Report_results_is_folder", "report {d}", "results", folder("results.json"));
  add("Report_results_dev_zero", "report {d}", "results", link_to("results.json", "/dev/zero"));
  add("Report_not_json", "report {d}", "results", file("results.json", "{\"suite\": "));
  add("Report_deep", "report {d}", "results", file("results.json", deep_json(100000)));
  add("Report_not_object", "report {d}", "results", file("results.json", "[1]"));
  add("Report_serve_config_empty", "report {d}", "config.prompt_len",
      file("results.json", R"({"suite": "serve", "config": {}, "rows": [], "loads": []})"));
  add("Report_suite_missing", "report {d}", "suite",
      results_with([](json& r) { r.erase("suite"); }));
  add("Report_suite_unknown", "report {d}", "suite",
      results_with([](json& r) { r["suite"] = "x"; }));
  add("Report_suite_number", "report {d}", "suite", results_with([](json& r) { r["suite"] = 3; }));
  add("Report_curve_empty_point", "report {d}", "runs[0].curve[0]",
      results_with([](json& r) { r["runs"][0]["curve"] = json::array({json::array()}); }));
  add("Report_curve_short_point", "report {d}", "runs[0].curve[0]",
      results_with([](json& r) { r["runs"][0]["curve"] = {{1}}; }));
  add("Report_curve_string", "report {d}", "runs[0].curve",
      results_with([](json& r) { r["runs"][0]["curve"] = "down"; }));
  add("Report_curve_float_step", "report {d}", "runs[0].curve[1]",
      results_with([](json& r) { r["runs"][0]["curve"][1][0] = 1e300; }));
  add("Report_runs_not_array", "report {d}", "runs", results_with([](json& r) { r["runs"] = 5; }));
  add("Report_configs_empty", "report {d}", "configs",
      results_with([](json& r) { r["configs"] = json::array(); }));
  add("Report_params_float", "report {d}", "variants[0].params",
      results_with([](json& r) { r["variants"][0]["params"] = 1e300; }));
  add("Report_seeds_string", "report {d}", "seeds",
      results_with([](json& r) { r["seeds"] = "three"; }));
  add("Report_tasks_number", "report {d}", "tasks[0]",
      results_with([](json& r) { r["tasks"] = {1}; }));
  add("Report_lm_config_missing", "report {d}", "config",
      results_with([](json& r) { r["suite"] = "lm"; }));
  add("Report_vision_config_missing", "report {d}", "config",
      results_with([](json& r) { r["suite"] = "vision"; }));
  add("Report_number_overflow", "report {d}", "results",
      file("results.json", "{\"suite\": \"synthetic\", \"seeds\": 1e999}"));

  // --- compare
  add("Compare_seeds_zero", "compare --seeds 0 --out {d}/c", "--seeds");
  add("Compare_seeds_negative", "compare --seeds -1 --out {d}/c", "--seeds");
  add("Compare_seeds_overflow", "compare --seeds 99999999999999999999 --out {d}/c", "--seeds");
  add("Compare_tasks_empty", "compare --tasks '' --out {d}/c", "--tasks");
  add("Compare_matmul_precision_unknown", "compare --suite lm --matmul-precision fp8 --out {d}/c",
      "matmul-precision");
  add("Compare_matmul_precision_not_lm", "compare --matmul-precision bf16 --out {d}/c",
      "matmul-precision");
  add("Compare_tasks_commas", "compare --tasks ,, --out {d}/c", "--tasks");
  add("Compare_tasks_unknown", "compare --tasks frobnicate --out {d}/c", "task");
  add("Compare_suite_unknown", "compare --suite frobnicate --out {d}/c", "suite");
  add("Compare_preset_unknown", "compare --preset frobnicate --out {d}/c", "preset");
  add("Compare_steps_zero", "compare --steps 0 --out {d}/c", "steps");
  add("Compare_jobs_negative", "compare --jobs -1 --out {d}/c", "jobs");
  add("Compare_attn_unknown", "compare --attn frobnicate --out {d}/c", "attn");
  add("Compare_data_for_synthetic", "compare --data x --out {d}/c", "data");
  add("Compare_tasks_for_lm", "compare --suite lm --tasks reverse --out {d}/c", "tasks");
  add("Compare_no_out", "compare", "--out");
  add("Compare_serve_requests_zero", "compare --suite serve --requests 0 --out {d}/c",
      "--requests");
  add("Compare_serve_requests_text", "compare --suite serve --requests many --out {d}/c",
      "--requests");
  add("Compare_requests_not_serve", "compare --suite vision --requests 4 --out {d}/c", "requests");
  add("Compare_serve_cache_dtype_unknown", "compare --suite serve --cache-dtype fp9 --out {d}/c",
      "cache-dtype");
  add("Compare_serve_preset_unknown", "compare --suite serve --preset paper --out {d}/c", "preset");
  add("Compare_serve_attn_unknown", "compare --suite serve --attn frobnicate --out {d}/c", "attn");
  add("Compare_serve_attn_heads", "compare --suite serve --attn gqa:3 --out {d}/c", "attn");
  add("Compare_serve_steps", "compare --suite serve --steps 3 --out {d}/c", "steps");
  add("Compare_serve_checkpoint_missing", "compare --suite serve --checkpoint {d}/none --out {d}/c",
      "checkpoint");
  add("Compare_checkpoint_not_serve", "compare --suite lm --checkpoint {ckpt} --out {d}/c",
      "checkpoint");
  add("Compare_serve_url_unreachable", "compare --suite serve --url http://127.0.0.1:1 --out {d}/c",
      "url");
  add("Compare_url_not_serve", "compare --suite lm --url http://127.0.0.1:1 --out {d}/c", "url");
  add("Compare_serve_checkpoint_and_attn",
      "compare --suite serve --checkpoint {ckpt} --attn mha --out {d}/c", "attn");

  // --- analyze
  add("Analyze_missing", "analyze --checkpoint {d}/none --out {d}/a", "checkpoint");
  add("Analyze_input_too_long",
      "analyze --checkpoint {ckpt} --out {d}/a --input " + std::string(1000, 'a'), "input");
  add("Analyze_input_on_synthetic", "analyze --checkpoint {syn} --out {d}/a --input abc", "input");

  // --- launch
  add("Launch_nproc_zero", "launch --nproc 0 -- true", "nproc");
  add("Launch_nproc_overflow", "launch --nproc 99999999999999999999 -- true", "--nproc");
  add("Launch_port_zero", "launch --master-port 0 -- true", "master_port");
  add("Launch_no_command", "launch --nproc 1", "command");

  // --- bench
  add("BenchDecode_heads_zero", "bench decode --attn gqa:8 --heads 0", "heads");
  add("BenchDecode_head_dim_zero", "bench decode --attn gqa:8 --head-dim 0", "head-dim");
  add("BenchDecode_width_overflow",
      "bench decode --attn mha --heads 4294967296 --head-dim 4294967296", "heads");
  add("BenchDecode_context_text", "bench decode --attn gqa:8 --context lots", "context");
  add("BenchDecode_context_huge", "bench decode --attn gqa:8 --context 1000000k", "context");
  add("BenchDecode_batch_zero", "bench decode --attn gqa:8 --batch 0", "batch");
  add("BenchDecode_dtype_fp8", "bench decode --attn gqa:8 --dtype fp8", "dtype");
  add("BenchDecode_q8_0_rotated_keys", "bench decode --attn q-gqa:8 --dtype q8_0",
      "scalar reference");
  add("BenchDecode_q8_0_in_f32", "bench decode --attn gqa:8 --dtype q8_0 --attn-precision f32",
      "attn-precision");
  add("BenchDecode_repeats_zero", "bench decode --attn gqa:8 --repeats 0", "repeats");
  add("BenchDecode_rotate_zero", "bench decode --attn gqa:8 --rotate-mib 0", "rotate-mib");
  add("BenchDecode_attn_unknown", "bench decode --attn frobnicate", "attn");
  add("BenchDecode_no_attn", "bench decode", "--attn");
  add("BenchMemory_mib_zero", "bench memory --mib 0", "mib");
  add("BenchMemory_repeats_zero", "bench memory --repeats 0", "repeats");
  add("BenchTrain_batch_zero", "bench train --batch 0", "batch");
  // the memory check of train before libtorch's allocator
  add("BenchTrain_seq_len_huge", "bench train --seq-len 100000000", "seq_len");
  add("BenchTrain_batch_huge", "bench train --batch 4000000000000", "batch");
  add("BenchTrain_steps_zero", "bench train --steps 0", "steps");
  add("BenchPrefill_huge", "bench prefill --attn mha --length 100000000 --batch 1000", "length");
  add("BenchPrefill_batch_zero", "bench prefill --attn mha --batch 0", "batch");
  add("BenchPrefill_layers_zero", "bench prefill --attn mha --layers 0", "layers");
  add("BenchPrefill_heads_not_dividing", "bench prefill --attn mha --heads 3", "heads");
  add("BenchGenerate_generate_negative", "bench generate --attn mha --generate -1", "generate");
  add("BenchGenerate_prompt_zero", "bench generate --attn mha --prompt 0", "prompt");
  add("BenchGenerate_cache_dtype", "bench generate --attn mha --cache-dtype q3", "dtype");
  add("BenchGenerate_weight_dtype", "bench generate --attn mha --weight-dtype q4_1",
      "weight-dtype");
  add("BenchGenerate_batch_zero", "bench generate --attn mha --batch 0", "batch");
  add("BenchGenerate_batch_huge", "bench generate --attn mha --batch 1,100000", "batch");
  add("BenchGenerate_huge", "bench generate --attn mha --prompt 100000000 --generate 100000000",
      "prompt");
  // --- tokenizer.json (kvlab tokenize, and every model folder that has one)
  const std::string tokenize = "tokenize --tokenizer {d}/t.json";
  add("Tokenize_missing", "tokenize --tokenizer {d}/none.json", "none.json");
  add("Tokenize_folder_without_one", "tokenize --tokenizer {d}/sub", "tokenizer.json",
      folder("sub"));
  add("Tokenize_dev_zero", tokenize, "tokenizer", link_to("t.json", "/dev/zero"));
  add("Tokenize_not_json", tokenize, "tokenizer", file("t.json", "{\"model\": "));
  add("Tokenize_binary", tokenize, "tokenizer", file("t.json", std::string("\x00\xff\xfe{", 4)));
  add("Tokenize_deep", tokenize, "tokenizer", file("t.json", std::string(100000, '[')));
  add("Tokenize_array", tokenize, "tokenizer", file("t.json", "[]"));
  add("Tokenize_no_model", tokenize, "model", file("t.json", "{}"));
  add("Tokenize_wordpiece", tokenize, "model.type",
      file("t.json", R"({"model": {"type": "WordPiece", "vocab": {}}})"));
  add("Tokenize_vocab_not_object", tokenize, "model.vocab",
      file("t.json", R"({"model": {"type": "BPE", "vocab": [], "merges": []}})"));
  add("Tokenize_id_negative", tokenize, "model.vocab",
      file("t.json", R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})"));
  add("Tokenize_id_huge", tokenize, "model.vocab",
      file("t.json", R"({"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}})"));
  add("Tokenize_id_float", tokenize, "model.vocab",
      file("t.json", R"({"model": {"type": "BPE", "vocab": {"a": 1.5}, "merges": []}})"));
  add("Tokenize_merge_unknown", tokenize, "model.merges[0]",
      file("t.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"));
  add("Tokenize_merge_shape", tokenize, "model.merges[0]",
      file("t.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[1, 2, 3]]}})"));
  add("Tokenize_bad_regex", tokenize, "pre_tokenizer.pattern",
      file("t.json",
           R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<"}, )"
           R"("behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"));
  add("Tokenize_unknown_normalizer", tokenize, "normalizer.type",
      file(
          "t.json",
          R"({"normalizer": {"type": "NFKD"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"));
  add("Tokenize_added_token_empty", tokenize, "added_tokens[0].content",
      file("t.json", R"({"added_tokens": [{"id": 0, "content": ""}], )"
                     R"("model": {"type": "BPE", "vocab": {}, "merges": []}})"));
  add("Tokenize_char_not_in_vocab", "tokenize --tokenizer {d}/t.json --input {d}/in.txt", "text",
      [](const std::string& dir) {
        write(dir + "/t.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
        write(dir + "/in.txt", "ab");
      });
  add("Tokenize_latin1_input", "tokenize --tokenizer {d}/hf --input {d}/in.txt", "UTF-8",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().hf_export, dir + "/hf", fs::copy_options::recursive);
        write(dir + "/in.txt", "caf\xe9");
      });
  add("Tokenize_decode_garbage", "tokenize --tokenizer {d}/hf --decode --input {d}/in.txt", "ids",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().hf_export, dir + "/hf", fs::copy_options::recursive);
        write(dir + "/in.txt", "1 2 99999999999999999999");
      });
  add("Tokenize_input_missing", "tokenize --tokenizer {d}/hf --input {d}/none.txt", "none.txt",
      [](const std::string& dir) {
        fs::copy(Fixtures::get().hf_export, dir + "/hf", fs::copy_options::recursive);
      });
  add("Tokenize_decode_out_of_vocab", "tokenize --tokenizer {d}/hf --decode --input {d}/in.txt",
      "ids", [](const std::string& dir) {
        fs::copy(Fixtures::get().hf_export, dir + "/hf", fs::copy_options::recursive);
        write(dir + "/in.txt", "1 256");
      });

  // --- Hugging Face model folders (eval, generate, export read them)
  const std::string hf_eval = "eval --checkpoint {d}/hf --data {d}/hf/config.json";
  add("HfFolder_truncated_weights", hf_eval, "model.safetensors",
      hf_folder_with("model.safetensors", "\x08\x00\x00\x00\x00\x00\x00\x00{}"));
  add("HfFolder_no_weights", hf_eval, "model.safetensors.index.json",
      hf_folder_with("model.safetensors", ""));
  add("HfFolder_index_escapes", hf_eval, "weight_map", [](const std::string& dir) {
    hf_folder_with("model.safetensors", "")(dir);
    write(dir + "/hf/model.safetensors.index.json",
          R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  });
  add("HfFolder_index_missing_shard", hf_eval, "shard.safetensors", [](const std::string& dir) {
    hf_folder_with("model.safetensors", "")(dir);
    write(dir + "/hf/model.safetensors.index.json",
          R"({"weight_map": {"model.norm.weight": "shard.safetensors"}})");
  });
  add("HfFolder_index_not_json", hf_eval, "model.safetensors.index.json",
      [](const std::string& dir) {
        hf_folder_with("model.safetensors", "")(dir);
        write(dir + "/hf/model.safetensors.index.json", "{");
      });
  add("HfFolder_bad_tokenizer", hf_eval, "tokenizer", hf_folder_with("tokenizer.json", "{}"));
  add("HfFolder_architecture_list", hf_eval, "architectures",
      hf_folder_with("config.json", R"({"architectures": "LlamaForCausalLM"})"));
  add("HfFolder_architecture_unknown", hf_eval, "architectures",
      hf_folder_with("config.json", R"({"architectures": ["BertForMaskedLM"]})"));
  add("HfFolder_kvlab_block_missing", hf_eval, "kvlab.config",
      hf_folder_with("config.json", R"({"architectures": ["KvlabForCausalLM"]})"));
  add("HfFolder_eval_stride_zero", "eval --checkpoint {d}/hf --data {d}/hf/config.json --stride -1",
      "stride", hf_folder_with("generation_config.json", "{}"));
  add("HfFolder_eval_batch_zero", "eval --checkpoint {d}/hf --data {d}/hf/config.json --batch 0",
      "batch", hf_folder_with("generation_config.json", "{}"));
  add("HfFolder_eval_no_data", "eval --checkpoint {d}/hf", "data",
      hf_folder_with("generation_config.json", "{}"));
  add("HfFolder_generate_bad_tokenizer", "generate --checkpoint {d}/hf --prompt x", "tokenizer",
      hf_folder_with("tokenizer.json", "[1, 2"));
  // config.json errors come before any weight is read: the fixture's weights stay as they are
  const auto llama_folder = [](json edit) {
    json config = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"hidden_size", 64},
                   {"intermediate_size", 96},
                   {"num_attention_heads", 4},
                   {"num_hidden_layers", 2},
                   {"vocab_size", 256},
                   {"max_position_embeddings", 128}};
    config.update(edit);
    return hf_folder_with("config.json", config.dump());
  };
  const auto deepseek_folder = [](json edit) {
    json config = {{"architectures", {"DeepseekV2ForCausalLM"}},
                   {"model_type", "deepseek_v2"},
                   {"hidden_size", 64},
                   {"intermediate_size", 96},
                   {"num_attention_heads", 4},
                   {"num_hidden_layers", 2},
                   {"vocab_size", 256},
                   {"max_position_embeddings", 128},
                   {"kv_lora_rank", 16},
                   {"qk_rope_head_dim", 8},
                   {"qk_nope_head_dim", 8},
                   {"v_head_dim", 8},
                   {"n_routed_experts", 4},
                   {"num_experts_per_tok", 2},
                   {"moe_intermediate_size", 16},
                   {"n_shared_experts", 1},
                   {"first_k_dense_replace", 1}};
    config.update(edit);
    return hf_folder_with("config.json", config.dump());
  };
  add("HfFolder_rope_dynamic", hf_eval, "rope_scaling",
      llama_folder({{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}));
  add("HfFolder_rope_llama3_incomplete", hf_eval, "low_freq_factor",
      llama_folder({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}));
  add("HfFolder_rope_factor_below_one", hf_eval, "factor",
      llama_folder({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.25}}}}));
  add("HfFolder_rope_yarn_unknown_key", hf_eval, "rope_scaling.low_freq_factor",
      llama_folder(
          {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1}}}}));
  add("HfFolder_qwen3_sliding_window_on", hf_eval, "use_sliding_window",
      llama_folder({{"architectures", {"Qwen3ForCausalLM"}},
                    {"model_type", "qwen3"},
                    {"use_sliding_window", true}}));
  add("HfFolder_deepseek_norm_and_scale", hf_eval, "routed_scaling_factor",
      deepseek_folder({{"norm_topk_prob", true}, {"routed_scaling_factor", 16.0}}));
  add("HfFolder_deepseek_v3_softmax", hf_eval, "scoring_func",
      deepseek_folder({{"architectures", {"DeepseekV3ForCausalLM"}},
                       {"model_type", "deepseek_v3"},
                       {"scoring_func", "softmax"}}));
  add("HfFolder_deepseek_topk_method", hf_eval, "topk_method",
      deepseek_folder({{"topk_method", "random"}}));
  add("HfFolder_deepseek_groups", hf_eval, "n_group",
      deepseek_folder({{"topk_method", "group_limited_greedy"}, {"n_group", 3}}));
  add("HfFolder_deepseek_fp8", hf_eval, "quantization_config",
      deepseek_folder({{"quantization_config", {{"quant_method", "fp8"}}}}));
  add("HfFolder_deepseek_biases", hf_eval, "attention_bias",
      deepseek_folder({{"attention_bias", true}}));
  add("HfFolder_deepseek_rope_layout", hf_eval, "rope_interleave",
      deepseek_folder({{"rope_interleave", false}}));
  add("Export_out_exists", "export --checkpoint {ckpt} --out {d}/file", "out", file("file", "x"));
  add("Export_gguf_of_gpt2_blocks", "export --checkpoint {ckpt} --format gguf --out {d}/m.gguf",
      "format");
  add("Export_unknown_format", "export --checkpoint {ckpt} --format onnx --out {d}/x", "--format");
  add("Export_synthetic", "export --checkpoint {syn} --out {d}/x", "checkpoint");
  add("Convert_to_gla", "convert --checkpoint {ckpt} --attn gla:hc=2 --out {d}/c", "attn");
  add("Convert_groups_split", "convert --checkpoint {ckpt} --attn gqa:4 --out {d}/c", "groups");
  add("Convert_odd_rope_width", "convert --checkpoint {ckpt} --attn gva:1,dr=3 --out {d}/c", "dr");
  add("Convert_calibration_missing",
      "convert --checkpoint {ckpt} --attn gqa:1 --calibration {d}/none.txt --out {d}/c",
      "calibration");
  add("Convert_calibration_short",
      "convert --checkpoint {ckpt} --attn gqa:1 --calibration {d}/short.txt --out {d}/c",
      "calibration", file("short.txt", "In the beginning"));
  add("Convert_calibration_tokens_zero",
      "convert --checkpoint {ckpt} --attn gqa:1 --calibration-tokens 0 --out {d}/c",
      "calibration-tokens");
  add("Convert_encoder", "convert --checkpoint {syn} --attn gqa:1 --out {d}/c", "checkpoint");
  add("Convert_out_exists", "convert --checkpoint {ckpt} --attn gqa:1 --out {d}/file", "out",
      file("file", "x"));
  add("Train_init_from_with_model_flags", "train --init-from {ckpt} --attn mha --out {d}/r",
      "init-from");
  add("Train_init_from_missing", "train --init-from {d}/none --out {d}/r", "checkpoint");
  add("Train_init_from_seq_len_without_task", "train --init-from {ckpt} --seq-len 8 --out {d}/r",
      "--seq-len");
  add("Train_distill_from_other_vocabulary",
      "train --init-from {ckpt} --distill-from {syn} --steps 1 --out {d}/r", "distill-from");
  add("Train_kd_alpha_without_teacher", "train --task reverse --kd-alpha 0.3 --out {d}/r",
      "kd_alpha");
  add("Train_kd_alpha_out_of_range",
      "train --init-from {ckpt} --distill-from {ckpt} --kd-alpha 2 --out {d}/r", "kd_alpha");
  add("Train_kd_temperature_zero",
      "train --init-from {ckpt} --distill-from {ckpt} --kd-temperature 0 --out {d}/r",
      "kd_temperature");
  add("Compare_convert_no_target", "compare --suite convert --attn gla:hc=2 --out {d}/c", "attn");
  return c;
}

// gtest prints a case by its name, not its bytes
void PrintTo(const HostileCase& hc, std::ostream* os) {
  *os << hc.name << ": kvlab " << hc.args.substr(0, 200);
}

class Hostile : public testing::TestWithParam<HostileCase> {};

TEST_P(Hostile, FailsCleanly) {
  const HostileCase& hc = GetParam();
  Fixtures& fixtures = Fixtures::get();
  const std::string dir = fixtures.root + "/case_" + hc.name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (hc.setup) hc.setup(dir);
  std::string args = replace_all(hc.args, "{d}", dir);
  args = replace_all(args, "{ckpt}", fixtures.text_run);
  args = replace_all(args, "{syn}", fixtures.synthetic_run);
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_line(args, dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string line = first_line(r.err);
  EXPECT_EQ(r.exit_code, hc.exit_code) << "stderr: " << r.err.substr(0, 2000);
  EXPECT_NE(line.find(hc.names), std::string::npos)
      << "first stderr line should name '" << hc.names << "': " << line.substr(0, 500);
  EXPECT_TRUE(r.out.empty()) << "stdout on error: " << r.out.substr(0, 500);
  EXPECT_LE(line.size(), 1000u) << "an error line a person cannot read";
  for (const char* crash : {"Sanitizer", "runtime error:", "Segmentation", "terminate called",
                            "Exception raised from"}) {
    EXPECT_EQ(r.err.find(crash), std::string::npos) << crash << " in: " << r.err.substr(0, 3000);
  }
  EXPECT_LT(seconds, 120.0);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Cases, Hostile, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<HostileCase>& param) {
                           std::string name = param.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(HostileCases, AtLeast150) { EXPECT_GE(cases().size(), 150u); }

// The cases were written for a shell: each command line splits into the words sh makes of it.
// One sh reads them all (a fork of this process a case cost ~35 ms): each case's words end in
// NUL, each case in \001.
TEST(HostileCases, WordsAreTheShellsWords) {
  std::vector<kvlab::test::Invocation> ours;
  std::string script;
  for (const HostileCase& hc : cases()) {
    std::string args = replace_all(hc.args, "{d}", "/tmp/d");
    args = replace_all(replace_all(args, "{ckpt}", "/tmp/c"), "{syn}", "/tmp/s");
    ours.push_back(kvlab::test::parse_command_line(args));
    script +=
        "set -- " + args + "\nfor w in \"$@\"; do printf '%s\\0' \"$w\"; done; printf '\\001'\n";
  }
  // a file: the script is longer than one argument may be
  const std::string script_path = testing::TempDir() + "hostile_words.sh";
  std::ofstream(script_path, std::ios::binary) << script;
  kvlab::test::Invocation sh;
  sh.args = {script_path};
  const ProcessResult words = kvlab::test::run_exec("/bin/sh", sh);
  fs::remove(script_path);
  ASSERT_EQ(words.exit_code, 0) << words.err;
  std::vector<std::vector<std::string>> expected(1);
  for (size_t at = 0; at < words.out.size();) {
    if (words.out[at] == '\001') {
      expected.emplace_back();
      ++at;
      continue;
    }
    const size_t end = words.out.find('\0', at);
    ASSERT_NE(end, std::string::npos) << "sh's output ends inside a word";
    expected.back().push_back(words.out.substr(at, end - at));
    at = end + 1;
  }
  expected.pop_back();  // after the last case's \001
  ASSERT_EQ(expected.size(), ours.size()) << "sh split the script into another number of cases";
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].args, expected[i]) << cases()[i].name;
  }
}

// Starts kvlab with `args` (split on spaces), sends `signal` after `delay_s`, and returns the
// exit status and the seconds from the signal to the exit (-1 if it did not exit in 10 s).
struct Interrupted {
  int exit_code = -1;
  double seconds_to_exit = -1;
};

// True once `pid` waits for the other end of a FIFO (its kernel wait channel).
bool blocked_in_open(pid_t pid) {
  return slurp("/proc/" + std::to_string(pid) + "/wchan") == "wait_for_partner";
}

// Whether the process catches `signal` (its handler installed: /proc/PID/status's SigCgt mask).
bool catches(pid_t pid, int signal) {
  std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigCgt:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return (mask >> (signal - 1)) & 1;
    }
  }
  return false;
}

// The signal delay_s after the program has installed its handler for it (a loaded machine can
// take seconds to load libtorch under the sanitizers first; sent earlier, the default action
// ends the process); delay_s < 0: once the process blocks in open() (at most 60 s).
Interrupted interrupt_after(const std::string& args, int signal, double delay_s) {
  std::vector<std::string> words;
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  std::string bin = kvlab_bin();
  argv.push_back(bin.data());
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(null_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (delay_s >= 0) {
    const auto start = std::chrono::steady_clock::now();
    while (!catches(pid, signal) &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  } else {
    const auto start = std::chrono::steady_clock::now();
    while (!blocked_in_open(pid) &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  Interrupted r;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) {  // ended before the signal: not a test
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return r;
  }
  ::kill(pid, signal);
  const auto sent = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - sent < std::chrono::seconds(10)) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      r.seconds_to_exit =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return r;
}

TEST(HostileSignals, CtrlCEndsALongGenerationWithin1Second) {
  const Interrupted r =
      interrupt_after("generate --no-cache --max-tokens 1000000 --prompt In --checkpoint " +
                          Fixtures::get().text_run,
                      SIGINT, 3.0);
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_GE(r.seconds_to_exit, 0);
  EXPECT_LT(r.seconds_to_exit, 3.0);  // a 1 s alarm, with room for a loaded machine
}

TEST(HostileSignals, SigtermEndsABlockedReadOfAFifo) {
  const std::string dir = Fixtures::get().root + "/fifo";
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/config.json").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir + "/corpus.txt").c_str(), 0600), 0);
  for (const std::string& args :
       {"cache --hf-config " + dir + "/config.json",
        "train --task text --data " + dir + "/corpus.txt --out " + dir + "/run"}) {
    SCOPED_TRACE(args);
    for (int signal : {SIGINT, SIGTERM}) {
      const Interrupted r = interrupt_after(args, signal, /*delay_s=*/-1);
      EXPECT_EQ(r.exit_code, 130);
      EXPECT_GE(r.seconds_to_exit, 0);
      EXPECT_LT(r.seconds_to_exit, 3.0);  // a 1 s alarm, with room for a loaded machine
    }
  }
  fs::remove_all(dir);
}

TEST(HostileSignals, CtrlCDuringTrainingSavesThenExits130) {
  const std::string dir = Fixtures::get().root + "/interrupted";
  const Interrupted r = interrupt_after(
      "train --task reverse --seq-len 8 --layers 1 --d-model 16 --heads 2 --steps 100000 "
      "--batch 4 --threads 1 --no-progress --out " +
          dir,
      SIGINT, 3.0);
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_TRUE(fs::exists(dir + "/checkpoint/trainer_state.json"));
  const RunResult resumed = run_line("eval --checkpoint " + dir, Fixtures::get().root);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  fs::remove_all(dir);
}

}  // namespace

namespace {

// A positive temperature too small to divide the logits by (1e-320: logits ÷ T overflow)
// generates greedily, as 0 does.
TEST(HostileRuns, TinyTemperatureGeneratesGreedily) {
  Fixtures& f = Fixtures::get();
  const std::string generate = "generate --max-tokens 12 --prompt In --checkpoint " + f.text_run;
  const RunResult greedy = run_line(generate + " --temperature 0", f.root);
  const RunResult tiny = run_line(generate + " --temperature 1e-320", f.root);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  ASSERT_EQ(tiny.exit_code, 0) << tiny.err;
  EXPECT_FALSE(greedy.out.empty());
  EXPECT_EQ(tiny.out, greedy.out);
}

// A text run moved away from its corpus: eval and resume read the recorded absolute path,
// take --data for a moved copy, and refuse a file of other content unless told.
TEST(HostileRuns, MovedCorpusIsFoundOrRefusedByContent) {
  Fixtures& f = Fixtures::get();
  const std::string dir = f.root + "/moved";
  fs::create_directories(dir);
  write(dir + "/corpus.txt", slurp(f.corpus));
  const RunResult trained = run_line(
      "train --task text --data " + dir +
          "/corpus.txt --seq-len 16 --layers 1 --d-model 16 "
          "--heads 2 --pos rope --steps 2 --batch 4 --eval-sequences 4 --threads 1 --no-progress "
          "--out " +
          dir + "/run",
      dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const json config = json::parse(slurp(dir + "/run/checkpoint/config.json"));
  EXPECT_TRUE(fs::path(config["task"]["data"].get<std::string>()).is_absolute());
  EXPECT_EQ(config["train"]["threads"], 1);
  // from another folder, with the corpus where it was
  EXPECT_EQ(run_line("eval --checkpoint " + dir + "/run", "/tmp").exit_code, 0);
  fs::rename(dir + "/corpus.txt", dir + "/elsewhere.txt");
  const RunResult missing = run_line("eval --checkpoint " + dir + "/run", dir);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(first_line(missing.err).find("data"), std::string::npos) << missing.err;
  const RunResult moved =
      run_line("eval --checkpoint " + dir + "/run --data " + dir + "/elsewhere.txt", dir);
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
  write(dir + "/other.txt", std::string(5000, 'q'));
  const RunResult other =
      run_line("eval --checkpoint " + dir + "/run --data " + dir + "/other.txt", dir);
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(first_line(other.err).find("is not the text this checkpoint was trained on"),
            std::string::npos)
      << other.err;
  EXPECT_EQ(run_line("eval --checkpoint " + dir + "/run --data " + dir +
                         "/other.txt --allow-different-data",
                     dir)
                .exit_code,
            0);
  // resume: the recorded thread count, silently; another one, with a note
  const RunResult resumed =
      run_line("train --resume " + dir + "/run --data " + dir + "/elsewhere.txt", dir);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find(", 1 threads,"), std::string::npos) << resumed.err;
  EXPECT_EQ(resumed.err.find("not be bit for bit"), std::string::npos) << resumed.err;
  const RunResult other_threads =
      run_line("train --resume " + dir + "/run --data " + dir + "/elsewhere.txt --threads 2", dir);
  EXPECT_EQ(other_threads.exit_code, 0) << other_threads.err;
  EXPECT_NE(other_threads.err.find("not be bit for bit"), std::string::npos) << other_threads.err;
  fs::remove_all(dir);
}

}  // namespace
