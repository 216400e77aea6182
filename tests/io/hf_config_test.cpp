#include "io/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "spec/model_config.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

json llama_config() {
  return {{"model_type", "llama"},      {"hidden_size", 4096},
          {"intermediate_size", 14336}, {"num_hidden_layers", 32},
          {"num_attention_heads", 32},  {"num_key_value_heads", 8},
          {"vocab_size", 128256},       {"max_position_embeddings", 8192},
          {"rope_theta", 500000.0},     {"tie_word_embeddings", false}};
}

std::string error_field(const json& config) {
  try {
    parse_hf_config(config.dump(), "test.json");
  } catch (const SpecError& e) {
    return e.field();
  }
  return "";
}

TEST(HfConfigTest, LlamaConfigEqualsThePreset) {
  const Preset p = parse_hf_config(llama_config().dump(), "config.json");
  EXPECT_EQ(p.attn, "gqa:8");
  EXPECT_EQ(p.shape, find_preset("llama-3-8b").shape);
}

TEST(HfConfigTest, QwenBiasesAndExplicitHeadDim) {
  json c = llama_config();
  c["model_type"] = "qwen2";
  c["num_key_value_heads"] = 32;
  c["head_dim"] = 96;
  const Preset p = parse_hf_config(c.dump(), "config.json");
  EXPECT_EQ(p.shape.bias, BiasKind::kQkv);
  EXPECT_EQ(p.shape.head_dim, 96);
  EXPECT_EQ(p.attn, "mha");
  c["num_key_value_heads"] = 1;
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json").attn, "mqa");
}

TEST(HfConfigTest, RopeThetaTopLevelOrNested) {
  json c = llama_config();
  c.erase("rope_theta");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  EXPECT_EQ(parse_hf_config(c.dump(), "x").shape.rope_theta, 250000.0);
  c["rope_theta"] = 250000.0;  // both, agreeing
  EXPECT_EQ(parse_hf_config(c.dump(), "x").shape.rope_theta, 250000.0);
  c["rope_theta"] = 10000.0;  // both, contradicting
  EXPECT_EQ(error_field(c), "rope_theta");
  c.erase("rope_theta");
  c.erase("rope_parameters");
  EXPECT_EQ(parse_hf_config(c.dump(), "x").shape.rope_theta, 10000.0);
}

TEST(HfConfigTest, DeepseekMlaAndMoe) {
  json c = {{"model_type", "deepseek_v2"}, {"hidden_size", 2048},
            {"intermediate_size", 10944},  {"num_hidden_layers", 27},
            {"num_attention_heads", 16},   {"num_key_value_heads", 16},
            {"vocab_size", 102400},        {"kv_lora_rank", 512},
            {"q_lora_rank", nullptr},      {"qk_rope_head_dim", 64},
            {"qk_nope_head_dim", 128},     {"v_head_dim", 128},
            {"n_routed_experts", 64},      {"n_shared_experts", 2},
            {"num_experts_per_tok", 6},    {"moe_intermediate_size", 1408},
            {"first_k_dense_replace", 1},  {"max_position_embeddings", 163840}};
  const Preset p = parse_hf_config(c.dump(), "x");
  const Preset& lite = find_preset("deepseek-v2-lite");
  EXPECT_EQ(p.shape, lite.shape);
  const ModelConfig from_config = ModelConfig::make(p.shape, p.attn, DType::kBf16);
  EXPECT_EQ(from_config.attn.to_string(), lite.attn);
  c["q_lora_rank"] = 1536;
  EXPECT_EQ(ModelConfig::make(p.shape, parse_hf_config(c.dump(), "x").attn, DType::kBf16)
                .attn.q_latent_dim,
            1536);
  c.erase("qk_rope_head_dim");
  EXPECT_EQ(error_field(c), "qk_rope_head_dim");
}

// openai-community/gpt2's config.json as published (GPT-2 small).
json gpt2_config() {
  return json::parse(R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024,
    "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})");
}

// GPT-2 small has 124,439,808 parameters (the sum transformers reports for GPT2LMHeadModel,
// the lm_head tied to wte) and caches 2 · 12 layers · 768 values a token.
TEST(HfConfigTest, Gpt2SmallCountsItsPublishedParameters) {
  const Preset p = parse_hf_config(gpt2_config().dump(), "config.json");
  EXPECT_EQ(p.attn, "mha");
  EXPECT_EQ(p.shape.mlp_kind, MlpKind::kGeluTanh);
  EXPECT_EQ(p.shape.norm, NormKind::kLayerNorm);
  EXPECT_EQ(p.shape.pos, PosScheme::kLearned);
  EXPECT_EQ(p.shape.mlp_width, 3072);
  EXPECT_TRUE(p.shape.tied_embeddings);
  const ModelConfig m = ModelConfig::make(p.shape, p.attn, DType::kF16);
  EXPECT_EQ(m.param_count().value(), 124439808);
  EXPECT_EQ(m.cache_bytes_per_token().value(), 2 * 12 * 768 * 2);
  json c = gpt2_config();
  c["activation_function"] = "relu";
  EXPECT_EQ(error_field(c), "activation_function");
  c = gpt2_config();
  c["n_head"] = 7;
  EXPECT_EQ(error_field(c), "n_head");
  c = gpt2_config();
  c.erase("n_embd");
  EXPECT_EQ(error_field(c), "n_embd");
}

TEST(HfConfigTest, ErrorsNameTheField) {
  json c = llama_config();
  c.erase("hidden_size");
  EXPECT_EQ(error_field(c), "hidden_size");
  c = llama_config();
  c["num_key_value_heads"] = 5;
  EXPECT_EQ(error_field(c), "num_key_value_heads");
  c["num_key_value_heads"] = 64;
  EXPECT_EQ(error_field(c), "num_key_value_heads");
  c = llama_config();
  c["num_attention_heads"] = "32";
  EXPECT_EQ(error_field(c), "num_attention_heads");
  c = llama_config();
  c["vocab_size"] = -1;
  EXPECT_EQ(error_field(c), "vocab_size");
  c = llama_config();
  c["hidden_size"] = 4000;
  c["num_attention_heads"] = 48;
  c["num_key_value_heads"] = 8;
  EXPECT_EQ(error_field(c), "head_dim");
  c = llama_config();
  c["tie_word_embeddings"] = "yes";
  EXPECT_EQ(error_field(c), "tie_word_embeddings");
  c = llama_config();
  c["attention_bias"] = true;
  EXPECT_EQ(error_field(c), "attention_bias");
  c["mlp_bias"] = true;
  EXPECT_EQ(parse_hf_config(c.dump(), "x").shape.bias, BiasKind::kAll);
}

TEST(HfConfigTest, BadFilesAreErrors) {
  for (const char* text : {"", "{", "[1, 2]", "null", "{\"hidden_size\": 1"}) {
    EXPECT_THROW(parse_hf_config(text, "x"), SpecError) << text;
  }
  EXPECT_THROW(read_hf_config("/nonexistent/config.json"), SpecError);
}

}  // namespace
}  // namespace kvlab
