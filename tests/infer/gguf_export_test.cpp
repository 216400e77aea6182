// GGUF export: the file read back by @huggingface/gguf (an independent parser, installed by
// the oracles fixture) has every metadata key, type and value kvlab wrote and every tensor
// info (name, ggml shape, type, offset); the bytes at the parser's offsets are the model's
// weights; and the reordering of q/k rows for llama.cpp's RoPE gives the same attention scores.
// llama.cpp runs the files and gives kvlab's probabilities: f32 files against kvlab's forward,
// q8_0 and q4_0 files against kvlab's decode step with weights of that dtype.
#include "nn/gguf_export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "infer/generator.h"
#include "kernels/convert.h"
#include "kernels/rope.h"
#include "nn/layers.h"
#include "nn/nn_test_util.h"
#include "spec/spec_error.h"

namespace kvlab::nn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Token ids as the llama.cpp oracle script takes them: "65,110,100".
std::string id_list_of(const std::vector<int64_t>& ids) {
  std::string list;
  for (const int64_t id : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(id);
  }
  return list;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Where the oracles fixture installed the npm packages (ctest sets KVLAB_ORACLES).
fs::path oracles_dir() {
  const char* dir = std::getenv("KVLAB_ORACLES");
  return dir == nullptr ? fs::path() : fs::path(dir);
}

// Why the oracles in `oracles`/`sub` cannot run, or "" when they can: install-oracles writes
// UNAVAILABLE with its reason where it could not install them.
std::string oracle_missing(const fs::path& oracles, const std::string& sub) {
  if (oracles.empty()) return "KVLAB_ORACLES is not set (ctest sets it)";
  for (const fs::path& marker : {oracles / "UNAVAILABLE", oracles / sub / "UNAVAILABLE"}) {
    if (fs::exists(marker)) return read_bytes(marker);
  }
  if (!sub.empty() && !fs::exists(oracles / sub / "node_modules")) {
    return "nothing is installed in " + (oracles / sub).string();
  }
  return "";
}

ModelShape byte_llama() {
  ModelShape s = testing::small_shape(PosScheme::kRope);
  testing::make_llama(s);
  s.vocab_size = 256;
  s.norm_eps = 1e-6;
  return s;
}

// Llama with Llama 3's RoPE scaling (written as rope_freqs), and Qwen2's q/k/v biases.
ModelShape llama3_scaled() {
  ModelShape s = byte_llama();
  s.rope_scaling.kind = RopeScalingKind::kLlama3;
  s.rope_scaling.factor = 8;
  s.rope_scaling.original_context = 8;
  return s;
}

ModelShape with_qkv_biases() {
  ModelShape s = byte_llama();
  s.bias = BiasKind::kQkv;
  return s;
}

// DeepSeek's mixture of experts after one dense layer: 4 routed experts (top 2), 2 shared;
// V2's router (softmax, scaled) or V3's (sigmoid, a correction bias, renormalised, scaled).
ModelShape deepseek_moe(bool v3, int64_t groups = 1) {
  ModelShape s = byte_llama();
  testing::add_moe(s, /*expert_width=*/8);
  s.moe.n_shared_experts = 2;
  s.moe.n_expert_groups = groups;  // each token's experts from groups_per_token (1) groups
  testing::set_deepseek_router(s.moe, v3, /*v2_scale=*/1.5);
  return s;
}

// GPT-2 blocks with GELU's tanh form (llama.cpp's gpt2).
ModelShape gpt2(bool tied) {
  ModelShape s = ModelShape::gpt_decoder(/*n_layers=*/2, /*d_model=*/16, /*n_heads=*/4,
                                         /*vocab_size=*/256, /*max_context=*/16);
  s.mlp_kind = MlpKind::kGeluTanh;
  s.mlp_width = 40;
  s.tied_embeddings = tied;
  return s;
}

json expected_value(const GgufValue& value) {
  return std::visit([](const auto& v) { return json(v); }, value);
}

TEST(GgufExportTest, TheHubParserReadsBackEveryKeyTensorInfoAndByte) {
  const fs::path oracles = oracles_dir();
  if (const std::string why = oracle_missing(oracles, ""); !why.empty()) {
    GTEST_SKIP() << "GGUF oracle unavailable: " << why;
  }
  // llama (plain and with llama3 scaling: rope_freqs), qwen2 (q/k/v biases), qwen3 (q/k norms)
  const ModelShape llama3 = llama3_scaled(), qwen2 = with_qkv_biases();
  const struct {
    ModelShape shape;
    const char* attn;
    const char* arch;
    GgmlType type;
  } cases[] = {
      {byte_llama(), "gqa:2", "llama", GgmlType::kF32},
      {byte_llama(), "gqa:2", "llama", GgmlType::kF16},
      {byte_llama(), "gqa:2", "llama", GgmlType::kBF16},
      {llama3, "gqa:2", "llama", GgmlType::kF16},
      {qwen2, "gqa:2", "qwen2", GgmlType::kBF16},
      {byte_llama(), "gqa:2,qknorm", "qwen3", GgmlType::kF32},
      {byte_llama(), "mla:dc=12,dr=4,dq=10", "deepseek2", GgmlType::kF16},
      {deepseek_moe(/*v3=*/true, /*groups=*/2), "mla:dc=12,dr=4,dq=6", "deepseek2",
       GgmlType::kBF16},
      {gpt2(/*tied=*/true), "mha", "gpt2", GgmlType::kF16},
      {byte_llama(), "gqa:2", "llama", GgmlType::kQ4_0},
  };
  const fs::path work = fs::temp_directory_path() / ("kvlab-gguf-" + std::to_string(::getpid()));
  fs::create_directories(work);
  for (const auto& c : cases) {
    const GgmlType type = c.type;
    SCOPED_TRACE(std::string(c.arch) + " " + c.attn + " " + std::to_string(static_cast<int>(type)));
    torch::manual_seed(5);
    TransformerModel model(ModelConfig::make(c.shape, c.attn, DType::kBf16), torch::kFloat32);
    const GgufWriter writer = gguf_for(*model, type);
    const fs::path file = work / "model.gguf";
    writer.write(file.string());
    const std::string command = "node '" + std::string(KVLAB_ORACLE_SCRIPTS) +
                                "/gguf_oracle.mjs' '" + oracles.string() + "' '" + file.string() +
                                "' '" + (work / "out.json").string() + "' 2> '" +
                                (work / "err").string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n"
                                               << read_bytes(work / "err").substr(0, 600);
    const json parsed = json::parse(read_bytes(work / "out.json"));

    const json& meta = parsed.at("typedMetadata");
    EXPECT_EQ(meta.at("version").at("value"), 3);
    EXPECT_EQ(meta.at("tensor_count").at("value"), writer.tensors().size());
    EXPECT_EQ(meta.at("kv_count").at("value"), writer.metadata().size());
    EXPECT_EQ(meta.size(), writer.metadata().size() + 3);  // nothing else was found
    for (const auto& [key, value] : writer.metadata()) {
      SCOPED_TRACE(key);
      ASSERT_TRUE(meta.contains(key));
      EXPECT_EQ(meta.at(key).at("type"), gguf_type_id(value));
      if (std::holds_alternative<float>(value)) {
        EXPECT_EQ(meta.at(key).at("value").get<float>(), std::get<float>(value));
      } else {
        EXPECT_EQ(meta.at(key).at("value"), expected_value(value));
      }
    }
    EXPECT_EQ(meta.at("general.architecture").at("value"), c.arch);
    EXPECT_EQ(meta.at("tokenizer.ggml.tokens").at("subType"), 8);
    EXPECT_EQ(meta.at("tokenizer.ggml.tokens").at("value")[32], "\xC4\xA0");  // "Ġ", the space

    const json& infos = parsed.at("tensorInfos");
    ASSERT_EQ(infos.size(), writer.tensors().size());
    const std::vector<uint64_t> offsets = writer.data_offsets();
    const std::string bytes = read_bytes(file);
    const auto data_start = parsed.at("tensorDataOffset").get<uint64_t>();
    EXPECT_EQ(data_start % GgufWriter::kAlignment, 0u);
    for (size_t i = 0; i < infos.size(); ++i) {
      const GgufTensor& t = writer.tensors()[i];
      SCOPED_TRACE(t.name);
      EXPECT_EQ(infos[i].at("name"), t.name);
      std::vector<int64_t> ggml_shape(t.shape.rbegin(), t.shape.rend());
      EXPECT_EQ(infos[i].at("shape").get<std::vector<int64_t>>(), ggml_shape);
      EXPECT_EQ(infos[i].at("dtype"), static_cast<uint32_t>(t.type));
      EXPECT_EQ(infos[i].at("offset"), offsets[i]);
      EXPECT_EQ(offsets[i] % GgufWriter::kAlignment, 0u);
      EXPECT_TRUE(bytes.compare(data_start + infos[i].at("offset").get<uint64_t>(), t.bytes.size(),
                                t.bytes) == 0);
    }
    const auto names = [&] {
      std::vector<std::string> out;
      for (const GgufTensor& t : writer.tensors()) out.push_back(t.name);
      return out;
    }();
    const auto has = [&](const std::string& name) {
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    EXPECT_EQ(has("rope_freqs.weight"), c.shape.rope_scaling.kind == RopeScalingKind::kLlama3);
    EXPECT_EQ(has("blk.1.attn_q.bias"), std::string(c.arch) == "qwen2");
    EXPECT_EQ(has("blk.1.attn_k_norm.weight"), std::string(c.arch) == "qwen3");
    if (type == GgmlType::kF32) {
      // blk.0.attn_k.weight's bytes are the model's k_proj exactly: reordered back for llama's
      // adjacent-pair RoPE, as they are for qwen3's rotate-half
      const size_t at = static_cast<size_t>(
          std::find(names.begin(), names.end(), "blk.0.attn_k.weight") - names.begin());
      ASSERT_LT(at, names.size());
      const GgufTensor& k = writer.tensors()[at];
      const torch::Tensor stored = torch::from_blob(
          const_cast<char*>(bytes.data() + data_start + offsets[at]), k.shape, torch::kFloat32);
      const auto params = model->named_parameters();
      const torch::Tensor expected = params["model.layers.0.self_attn.k_proj.weight"];
      EXPECT_TRUE((std::string(c.arch) == "llama" ? from_adjacent_rope_rows(stored, 2) : stored)
                      .equal(expected));
      EXPECT_EQ(writer.tensors().back().name, "output.weight");  // untied
    }
  }
  fs::remove_all(work);
}

// llama.cpp itself (node-llama-cpp's prebuilt CPU build, installed by the oracles fixture) runs
// the exported f32 files: for every position of a token sequence, its next-token probabilities
// must be kvlab's (llama.cpp's f32 path; measured differences 1e-6 to 3e-5). The weights are scaled
// up so that the distributions are far from uniform: a wrong RoPE row order, bias, norm or router
// moves them by much more than the tolerance.
TEST(GgufExportTest, LlamaCppComputesWhatKvlabComputes) {
  const fs::path oracles = oracles_dir();
  if (const std::string why = oracle_missing(oracles, "llama-cpp"); !why.empty()) {
    GTEST_SKIP() << "llama.cpp oracle unavailable: " << why;
  }
  const ModelShape llama3 = llama3_scaled(), qwen2 = with_qkv_biases();
  const struct {
    ModelShape shape;
    const char* attn;
    const char* arch;
  } cases[] = {
      {byte_llama(), "gqa:2", "llama"},
      {byte_llama(), "mha", "llama"},
      {llama3, "gqa:2", "llama"},
      {qwen2, "mqa", "qwen2"},
      {byte_llama(), "gqa:2,qknorm", "qwen3"},
      {byte_llama(), "mla:dc=12,dr=4,dq=10", "deepseek2"},
      {byte_llama(), "mla:dc=12,dr=6,dn=4,dv=5,dq=10", "deepseek2"},
      {deepseek_moe(/*v3=*/false), "mla:dc=12,dr=4,dq=8", "deepseek2"},
      {deepseek_moe(/*v3=*/true), "mla:dc=12,dr=4,dq=10", "deepseek2"},
      {deepseek_moe(/*v3=*/true, /*groups=*/2), "mla:dc=12,dr=4,dq=10", "deepseek2"},
      {gpt2(/*tied=*/true), "mha", "gpt2"},
      {gpt2(/*tied=*/false), "mha", "gpt2"},
  };
  const std::vector<int64_t> ids = {65, 110, 100, 32, 71, 111, 100, 32, 115, 97, 105, 100};
  const std::string id_list = id_list_of(ids);
  const fs::path work =
      fs::temp_directory_path() / ("kvlab-llama-cpp-" + std::to_string(::getpid()));
  fs::create_directories(work);
  // every model written first, then one llama.cpp process reads them all
  std::vector<TransformerModel> models;
  std::string files;
  for (size_t i = 0; i < std::size(cases); ++i) {
    torch::manual_seed(6);
    models.emplace_back(ModelConfig::make(cases[i].shape, cases[i].attn, DType::kBf16),
                        torch::kFloat32);
    torch::NoGradGuard no_grad;
    for (auto& p : models.back()->named_parameters()) {
      if (p.key().find("e_score_correction_bias") != std::string::npos) {
        p.value().uniform_(0, 1);  // V3's correction bias changes which experts are chosen
      } else if (p.key().find("norm") != std::string::npos && p.key().ends_with("weight")) {
        p.value().uniform_(1, 3);  // norm gains away from 1: a misplaced one shows
      } else if (p.key() == "model.embed_tokens") {
        p.value().mul_(10);  // the head too where it is tied
      } else {
        p.value().mul_(4);
      }
    }
    const fs::path file = work / ("model" + std::to_string(i) + ".gguf");
    gguf_for(*models.back(), GgmlType::kF32).write(file.string());
    files += " '" + file.string() + "' '" +
             (work / ("out" + std::to_string(i) + ".json")).string() + "'";
  }
  const std::string command = "node '" + std::string(KVLAB_ORACLE_SCRIPTS) +
                              "/llama_cpp_oracle.mjs' '" + oracles.string() + "' " + id_list +
                              files + " 2> '" + (work / "err").string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n"
                                             << read_bytes(work / "err").substr(0, 600);
  for (size_t i = 0; i < std::size(cases); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(std::string(c.arch) + " " + c.attn);
    const json rows = json::parse(read_bytes(work / ("out" + std::to_string(i) + ".json")));
    ASSERT_EQ(rows.size(), ids.size());
    torch::NoGradGuard no_grad;
    const torch::Tensor ours =
        torch::softmax(models[i]->forward(torch::tensor(ids).view({1, -1}))[0], -1);  // [T, 256]
    double worst = 0, peak = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t v = 0; v < 256; ++v) {
        const std::string key = std::to_string(v);
        const double theirs = rows[t].contains(key) ? rows[t].at(key).get<double>() : 0.0;
        const double mine = ours[static_cast<int64_t>(t)][v].item<double>();
        ASSERT_FALSE(std::isnan(theirs)) << "position " << t << " token " << v;
        worst = std::max(worst, std::abs(theirs - mine));
        peak = std::max(peak, mine);
      }
    }
    std::cout << c.arch << " " << c.attn << ": max |p_llama.cpp - p_kvlab| " << worst
              << ", peak probability " << peak << "\n";
    EXPECT_GT(peak, 0.2);  // far from uniform (1/256)
    // ggml's GELU reads a table of f16 values at the f16-rounded input (ggml_vec_gelu_f32), so
    // gpt2's activations carry f16 error; every other architecture here is f32 throughout
    const double tolerance = std::string(c.arch) == "gpt2" ? 3e-3 : 1e-4;
    EXPECT_LT(worst, tolerance) << "largest |p_llama.cpp − p_kvlab| over " << ids.size()
                                << " positions × 256 tokens";
  }
  fs::remove_all(work);
}

// llama.cpp multiplies q8_0 and q4_0 weights by activations it rounds to q8_0 per block of 32, as
// kvlab's decode step does with --weight-dtype q8_0 / q4_0: the same file decoded by both gives
// the same next-byte probabilities, far closer than kvlab's f32 weights come to them. The token
// embedding is rounded through the file's dtype first (llama.cpp reads its rows from that table;
// kvlab keeps embeddings in f32), and the norms' gains are drawn in [1, 3]: with unit gains a
// q4_0-rounded embedding's blocks hold values in exact ratios (1 : 2 among them), which put
// elements of x exactly at q8_0's rounding ties, where ggml's reference quantizer (kvlab's: 1 / d,
// halves away from zero) and llama.cpp's AVX2 one (127 / amax, halves to even) part: up to 0.041
// for q4_0 with unit gains, 7e-7 with drawn ones.
TEST(GgufExportTest, LlamaCppBlockWeightsAreKvlabsDecodeStep) {
  const fs::path oracles = oracles_dir();
  if (const std::string why = oracle_missing(oracles, "llama-cpp"); !why.empty()) {
    GTEST_SKIP() << "llama.cpp oracle unavailable: " << why;
  }
  ModelShape shape = byte_llama();  // every matrix's rows whole blocks of 32
  shape.d_model = 64;
  shape.head_dim = 16;
  shape.mlp_width = 96;
  shape.max_context = 32;
  const fs::path work = fs::temp_directory_path() / ("kvlab-q8-" + std::to_string(::getpid()));
  fs::create_directories(work);
  for (const GgmlType element : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    EXPECT_EQ(ggml_block_dtype(element), std::nullopt);
  }
  for (const auto& [type, dtype] :
       {std::pair{GgmlType::kQ8_0, DType::kQ8_0}, std::pair{GgmlType::kQ4_0, DType::kQ4_0}}) {
    SCOPED_TRACE(dtype_name(dtype));
    ASSERT_EQ(ggml_block_dtype(type), dtype);  // the export's mapping, against the pairs here
    torch::manual_seed(7);
    TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kBf16), torch::kFloat32);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters()) {
        if (p.key().find("norm") == std::string::npos) {
          p.value().mul_(6);  // peaked outputs
        } else {
          p.value().uniform_(1.0, 3.0);
        }
      }
      torch::Tensor embed = model->model->embed_tokens;
      const torch::Tensor f = embed.contiguous();
      std::vector<std::byte> rows(static_cast<size_t>(f.size(0) * row_bytes(dtype, f.size(1))));
      store_rows(f.data_ptr<float>(), f.size(0), f.size(1), dtype, rows.data());
      load_rows(rows.data(), f.size(0), f.size(1), dtype, embed.data_ptr<float>());
    }
    const GgufWriter writer = gguf_for(*model, type);
    for (const GgufTensor& t : writer.tensors()) {  // the matrices really are of that dtype
      if (t.shape.size() == 2) {
        EXPECT_EQ(t.type, type) << t.name;
      }
    }
    writer.write((work / "model.gguf").string());
    const std::vector<int64_t> ids = {73,  110, 32,  116, 104, 101, 32,  98,
                                      101, 103, 105, 110, 110, 105, 110, 103};
    const std::string id_list = id_list_of(ids);
    const std::string command =
        "node '" + std::string(KVLAB_ORACLE_SCRIPTS) + "/llama_cpp_oracle.mjs' '" +
        oracles.string() + "' " + id_list + " '" + (work / "model.gguf").string() + "' '" +
        (work / "out.json").string() + "' 2> '" + (work / "err").string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n"
                                               << read_bytes(work / "err").substr(0, 600);
    const json rows = json::parse(read_bytes(work / "out.json"));
    ASSERT_EQ(rows.size(), ids.size());
    // kvlab's decode step, token by token over an f32 cache (the oracle's cache is f32 too)
    auto decode = [&](DType weights) {
      infer::Generator gen(model, DType::kF32, static_cast<int64_t>(ids.size()), 1, 1, std::nullopt,
                           std::nullopt, 0, weights);
      const int32_t seq = gen.add_sequence();
      std::vector<std::vector<double>> probs;
      std::vector<float> logits(256);
      for (const int64_t id : ids) {
        gen.step(&seq, &id, 1, logits.data());
        const float peak = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        std::vector<double> p(256);
        for (size_t v = 0; v < 256; ++v)
          sum += p[v] = std::exp(static_cast<double>(logits[v]) - peak);
        for (double& x : p) x /= sum;
        probs.push_back(p);
      }
      return probs;
    };
    auto worst_gap = [&](const std::vector<std::vector<double>>& ours) {
      double worst = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        for (int v = 0; v < 256; ++v) {
          const std::string key = std::to_string(v);
          const double theirs = rows[t].contains(key) ? rows[t].at(key).get<double>() : 0.0;
          EXPECT_FALSE(std::isnan(ours[t][static_cast<size_t>(v)]));
          worst = std::max(worst, std::abs(theirs - ours[t][static_cast<size_t>(v)]));
        }
      }
      return worst;
    };
    const double same = worst_gap(decode(dtype)), f32 = worst_gap(decode(DType::kF32));
    std::cout << "max |p_llama.cpp − p_kvlab| over " << ids.size()
              << " positions × 256 bytes: " << dtype_name(dtype) << " weights " << same
              << ", f32 weights " << f32 << "\n";
    EXPECT_LT(same, 1e-5);  // measured: q8_0 7.6e-7 (f32 weights 0.14), q4_0 7.0e-7 (0.69)
    EXPECT_LT(same, f32 / 4) << "kvlab's step with the file's dtype is no closer to llama.cpp's "
                                "than its f32 step";
  }
  fs::remove_all(work);
}

// llama.cpp's RoPE (LLAMA_ROPE_TYPE_NORM) turns adjacent channels (2i, 2i+1) by p·θ^(−2i/d);
// kvlab's turns (i, i + d/2). With the rows reordered, the scores are the same.
TEST(GgufExportTest, ReorderedRowsUnderAdjacentRopeGiveTheSameScores) {
  torch::manual_seed(9);
  const int64_t heads = 3, d = 8, in = 5, p_q = 7, p_k = 3;
  const torch::Tensor wq = torch::randn({heads * d, in}, torch::kFloat64);
  const torch::Tensor wk = torch::randn({heads * d, in}, torch::kFloat64);
  const torch::Tensor x = torch::randn({in}, torch::kFloat64);
  const auto adjacent_rope = [&](torch::Tensor v, int64_t pos) {  // [heads·d]
    v = v.view({heads, d / 2, 2}).clone();
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(pos) * rope_frequency(i, d, 10000.0, RopeScaling{});
      const torch::Tensor a = v.select(2, 0).select(1, i).clone(),
                          b = v.select(2, 1).select(1, i).clone();
      v.select(2, 0).select(1, i).copy_(a * std::cos(angle) - b * std::sin(angle));
      v.select(2, 1).select(1, i).copy_(a * std::sin(angle) + b * std::cos(angle));
    }
    return v.view({heads, d});
  };
  const auto kvlab_scores = [&] {
    const torch::Tensor q =
        apply_rope(torch::mv(wq, x).view({1, 1, heads, d}), p_q, 10000.0, RopeScaling{});
    const torch::Tensor k =
        apply_rope(torch::mv(wk, x).view({1, 1, heads, d}), p_k, 10000.0, RopeScaling{});
    return (q * k).sum(-1).view({heads});
  }();
  const torch::Tensor q2 = adjacent_rope(torch::mv(to_adjacent_rope_rows(wq, heads), x), p_q);
  const torch::Tensor k2 = adjacent_rope(torch::mv(to_adjacent_rope_rows(wk, heads), x), p_k);
  EXPECT_LT((kvlab_scores - (q2 * k2).sum(-1)).abs().max().item<double>(), 1e-12);
  EXPECT_TRUE(from_adjacent_rope_rows(to_adjacent_rope_rows(wq, heads), heads).equal(wq));
}

TEST(GgufExportTest, RefusesWhatLlamaCppCannotRunSayingWhy) {
  const auto refusal = [](const ModelShape& shape, const char* attn) {
    TransformerModel model(ModelConfig::make(shape, attn, DType::kBf16), torch::kFloat32);
    try {
      gguf_for(*model, GgmlType::kF16);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(written)");
  };
  EXPECT_NE(refusal(byte_llama(), "gva:2,dr=2").find("'gva:2,dr=2' with these blocks is not one"),
            std::string::npos);
  EXPECT_EQ(refusal(byte_llama(), "mla:dc=12,dr=4,dq=10"), "(written)");  // deepseek2
  EXPECT_NE(refusal(byte_llama(), "mla:dc=12,dr=4").find("2 layers and no q LoRA (dq)"),
            std::string::npos);
  ModelShape grouped = byte_llama();
  testing::add_moe(grouped, /*expert_width=*/8);
  grouped.moe.n_expert_groups = 2;
  EXPECT_NE(refusal(grouped, "mla:dc=12,dr=4,dq=10").find("ranks them by their best one"),
            std::string::npos);
  EXPECT_NE(refusal(byte_llama(), "mla:dc=12,dr=4,dq=10,plainlatent")
                .find("this mla model is not one DeepseekV2ForCausalLM describes"),
            std::string::npos);
  ModelShape yarn = byte_llama();
  yarn.rope_scaling.kind = RopeScalingKind::kYarn;
  yarn.rope_scaling.factor = 4;
  yarn.rope_scaling.original_context = 8;
  EXPECT_NE(refusal(yarn, "gqa:2").find("does not write yarn RoPE scaling"), std::string::npos);
  EXPECT_NE(refusal(llama3_scaled(), "gqa:2,qknorm")
                .find("llama3 RoPE scaling (rope_freqs) for llama only"),
            std::string::npos);
  ModelShape gelu = byte_llama();
  gelu.mlp_kind = MlpKind::kGelu;
  EXPECT_NE(refusal(gelu, "gqa:2").find("'gqa:2' with these blocks is not one"), std::string::npos);
  ModelShape exact_gelu = gpt2(/*tied=*/true);
  exact_gelu.mlp_kind = MlpKind::kGelu;
  EXPECT_NE(refusal(exact_gelu, "mha").find("llama.cpp's gpt2 computes GELU's tanh form"),
            std::string::npos);
  ModelShape small_vocab = byte_llama();
  small_vocab.vocab_size = 11;
  EXPECT_NE(refusal(small_vocab, "gqa:2").find("this model has 11 tokens"), std::string::npos);
}

}  // namespace
}  // namespace kvlab::nn
