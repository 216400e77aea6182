// GGUF export: the file read back by @huggingface/gguf (an independent parser, installed by
// the oracles fixture) has every metadata key, type and value kvlab wrote and every tensor
// info (name, ggml shape, type, offset); the bytes at the parser's offsets are the model's
// weights; and the reordering of q/k rows for llama.cpp's RoPE gives the same attention scores.
#include "nn/gguf_export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/rope.h"
#include "nn/layers.h"
#include "nn/nn_test_util.h"
#include "spec/spec_error.h"

namespace kvlab::nn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ModelShape byte_llama() {
  ModelShape s = testing::small_shape(PosScheme::kRope);
  testing::make_llama(s);
  s.vocab_size = 256;
  s.norm_eps = 1e-6;
  return s;
}

json expected_value(const GgufValue& value) {
  return std::visit([](const auto& v) { return json(v); }, value);
}

TEST(GgufExportTest, TheHubParserReadsBackEveryKeyTensorInfoAndByte) {
  const char* dir_env = std::getenv("KVLAB_ORACLES");
  if (dir_env == nullptr) GTEST_SKIP() << "KVLAB_ORACLES is not set (ctest sets it)";
  const fs::path oracles(dir_env);
  if (fs::exists(oracles / "UNAVAILABLE")) {
    GTEST_SKIP() << "GGUF oracle unavailable: " << read_bytes(oracles / "UNAVAILABLE");
  }
  // llama (plain and with llama3 scaling: rope_freqs), qwen2 (q/k/v biases), qwen3 (q/k norms)
  ModelShape llama3 = byte_llama(), qwen2 = byte_llama();
  llama3.rope_scaling.kind = RopeScalingKind::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.original_context = 8;
  qwen2.bias = BiasKind::kQkv;
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
  EXPECT_NE(
      refusal(byte_llama(), "mla:dc=12,dr=4").find("deepseek2, which kvlab does not write yet"),
      std::string::npos);
  ModelShape yarn = byte_llama();
  yarn.rope_scaling.kind = RopeScalingKind::kYarn;
  yarn.rope_scaling.factor = 4;
  yarn.rope_scaling.original_context = 8;
  EXPECT_NE(refusal(yarn, "gqa:2").find("does not write yarn RoPE scaling"), std::string::npos);
  ModelShape llama3 = byte_llama();
  llama3.rope_scaling.kind = RopeScalingKind::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.original_context = 8;
  EXPECT_NE(refusal(llama3, "gqa:2,qknorm").find("llama3 RoPE scaling (rope_freqs) for llama only"),
            std::string::npos);
  ModelShape gelu = byte_llama();
  gelu.mlp_kind = MlpKind::kGelu;
  EXPECT_NE(refusal(gelu, "gqa:2").find("'gqa:2' with these blocks is not one"), std::string::npos);
  ModelShape small_vocab = byte_llama();
  small_vocab.vocab_size = 11;
  EXPECT_NE(refusal(small_vocab, "gqa:2").find("this model has 11 tokens"), std::string::npos);
}

}  // namespace
}  // namespace kvlab::nn
