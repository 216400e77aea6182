#include "nn/hf_tensor_layout.h"

#include <array>
#include <stdexcept>
#include <vector>

namespace kvlab::nn {
namespace {

bool starts_with(const std::string& text, const std::string& head) {
  return text.compare(0, head.size(), head) == 0;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// DeepSeek stores each RoPE slice with pair i in rows (2i, 2i+1); kvlab with pair i in rows
// (i, i + d_r/2). The rows [offset, offset + d_r) of every `block` rows of `weight` are
// reordered from the first layout to the second (to_kvlab) or back.
torch::Tensor reorder_rope_rows(const torch::Tensor& weight, int64_t block, int64_t offset,
                                int64_t rope_dim, bool to_kvlab) {
  if (weight.is_meta()) return weight;  // a permutation of rows: the shape is unchanged
  std::vector<int64_t> order(static_cast<size_t>(rope_dim));
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    if (to_kvlab) {
      order[static_cast<size_t>(i)] = 2 * i;
      order[static_cast<size_t>(rope_dim / 2 + i)] = 2 * i + 1;
    } else {
      order[static_cast<size_t>(2 * i)] = i;
      order[static_cast<size_t>(2 * i + 1)] = rope_dim / 2 + i;
    }
  }
  const torch::Tensor blocks = weight.reshape({-1, block, weight.size(-1)});  // [n, block, in]
  torch::Tensor out = blocks.clone();
  out.narrow(1, offset, rope_dim)
      .copy_(blocks.narrow(1, offset, rope_dim).index_select(1, torch::tensor(order)));
  return out.view_as(weight);
}

// The MLA tensors whose rows hold RoPE slices, by their name's ending: the query (per head,
// after the d_n content rows) and kv_a_proj_with_mqa (after the d_c latent rows).
torch::Tensor reorder_mla_rope(const std::string& name, const torch::Tensor& t,
                               const AttentionSpec& spec, bool to_kvlab) {
  if (ends_with(name, "self_attn.q_proj.weight") || ends_with(name, "self_attn.q_b_proj.weight")) {
    return reorder_rope_rows(t, spec.nope_dim + spec.rope_dim, spec.nope_dim, spec.rope_dim,
                             to_kvlab);
  }
  if (ends_with(name, "self_attn.kv_a_proj_with_mqa.weight")) {
    return reorder_rope_rows(t, spec.latent_dim + spec.rope_dim, spec.latent_dim, spec.rope_dim,
                             to_kvlab);
  }
  return t;
}

// GPT-2's names for kvlab's. Linear weights are Conv1D in GPT-2: stored [in, out].
struct Rename {
  const char* kvlab;
  const char* gpt2;
  bool transposed;
};
constexpr std::array<Rename, 5> kGpt2Model = {{
    {"model.embed_tokens.weight", "transformer.wte.weight", false},
    {"model.embed_positions.weight", "transformer.wpe.weight", false},
    {"model.norm.weight", "transformer.ln_f.weight", false},
    {"model.norm.bias", "transformer.ln_f.bias", false},
    {"lm_head.weight", "lm_head.weight", false},
}};
constexpr std::array<Rename, 10> kGpt2LayerNames = {{
    {"input_layernorm.weight", "ln_1.weight", false},
    {"input_layernorm.bias", "ln_1.bias", false},
    {"post_attention_layernorm.weight", "ln_2.weight", false},
    {"post_attention_layernorm.bias", "ln_2.bias", false},
    {"self_attn.o_proj.weight", "attn.c_proj.weight", true},
    {"self_attn.o_proj.bias", "attn.c_proj.bias", false},
    {"mlp.up_proj.weight", "mlp.c_fc.weight", true},
    {"mlp.up_proj.bias", "mlp.c_fc.bias", false},
    {"mlp.down_proj.weight", "mlp.c_proj.weight", true},
    {"mlp.down_proj.bias", "mlp.c_proj.bias", false},
}};
constexpr std::array<const char*, 3> kQkv = {"q_proj", "k_proj", "v_proj"};
const std::string kKvlabLayerPrefix = "model.layers.";
const std::string kGpt2LayerPrefix = "transformer.h.";

// "<prefix>{i}.<rest>" → (i, rest); false when the name has another form.
bool split_layer(const std::string& name, const std::string& prefix, std::string& layer,
                 std::string& rest) {
  if (!starts_with(name, prefix)) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  layer = name.substr(prefix.size(), dot - prefix.size());
  rest = name.substr(dot + 1);
  return true;
}

NamedTensors to_gpt2(const NamedTensors& in) {
  NamedTensors out;
  // per layer: q, k, v weights and biases, fused into c_attn once all three are seen
  std::map<std::string, std::array<torch::Tensor, 6>> qkv;
  for (const auto& [name, t] : in) {
    bool done = false;
    for (const Rename& r : kGpt2Model) {
      if (name == r.kvlab) out.emplace(r.gpt2, t.contiguous()), done = true;
    }
    std::string layer, rest;
    if (!done && split_layer(name, kKvlabLayerPrefix, layer, rest)) {
      for (const Rename& r : kGpt2LayerNames) {
        if (rest != r.kvlab) continue;
        out.emplace(kGpt2LayerPrefix + layer + "." + r.gpt2,
                    (r.transposed ? t.t() : t).contiguous());
        done = true;
      }
      for (size_t p = 0; p < kQkv.size() && !done; ++p) {
        const std::string base = std::string("self_attn.") + kQkv[p];
        if (rest == base + ".weight") qkv[layer][p] = t, done = true;
        if (rest == base + ".bias") qkv[layer][3 + p] = t, done = true;
      }
    }
    if (!done) throw std::invalid_argument("GPT-2 has no tensor for kvlab's '" + name + "'");
  }
  for (const auto& [layer, parts] : qkv) {
    for (const torch::Tensor& part : parts) {
      if (!part.defined()) {
        throw std::invalid_argument("layer " + layer + " lacks one of q/k/v's weights or biases");
      }
    }
    const std::string prefix = kGpt2LayerPrefix + layer + ".attn.c_attn.";
    out.emplace(prefix + "weight",  // [d, 3d]: Conv1D
                torch::cat({parts[0], parts[1], parts[2]}, 0).t().contiguous());
    out.emplace(prefix + "bias", torch::cat({parts[3], parts[4], parts[5]}, 0));
  }
  return out;
}

NamedTensors from_gpt2(const NamedTensors& in) {
  NamedTensors out;
  for (const auto& [name, t] : in) {
    bool done = false;
    for (const Rename& r : kGpt2Model) {
      if (name == r.gpt2) out.emplace(r.kvlab, t), done = true;
    }
    std::string layer, rest;
    if (!done && split_layer(name, kGpt2LayerPrefix, layer, rest)) {
      const std::string prefix = kKvlabLayerPrefix + layer + ".self_attn.";
      for (const Rename& r : kGpt2LayerNames) {
        if (rest != r.gpt2) continue;
        out.emplace(kKvlabLayerPrefix + layer + "." + r.kvlab, r.transposed ? t.t() : t);
        done = true;
      }
      if (rest == "attn.c_attn.weight" && t.dim() == 2 && t.size(1) % 3 == 0) {
        const std::vector<torch::Tensor> parts = t.t().chunk(3, 0);  // [3d, d] → 3 × [d, d]
        for (size_t p = 0; p < kQkv.size(); ++p)
          out.emplace(prefix + kQkv[p] + ".weight", parts[p]);
        done = true;
      }
      if (rest == "attn.c_attn.bias" && t.dim() == 1 && t.size(0) % 3 == 0) {
        const std::vector<torch::Tensor> parts = t.chunk(3, 0);
        for (size_t p = 0; p < kQkv.size(); ++p) out.emplace(prefix + kQkv[p] + ".bias", parts[p]);
        done = true;
      }
    }
    if (!done) throw std::invalid_argument("'" + name + "' is not a GPT-2 parameter kvlab reads");
  }
  return out;
}

}  // namespace

NamedTensors to_hf_layout(const NamedTensors& kvlab_tensors, const ModelConfig& config,
                          HfTensorLayout layout) {
  switch (layout) {
    case HfTensorLayout::kKvlabNames:
      return kvlab_tensors;
    case HfTensorLayout::kDeepseekRope: {
      NamedTensors out;
      for (const auto& [name, t] : kvlab_tensors)
        out.emplace(name, reorder_mla_rope(name, t, config.attn, /*to_kvlab=*/false));
      return out;
    }
    case HfTensorLayout::kGpt2:
      return to_gpt2(kvlab_tensors);
  }
  throw std::logic_error("unknown tensor layout");
}

NamedTensors from_hf_layout(const NamedTensors& hf_tensors, const ModelConfig& config,
                            HfTensorLayout layout) {
  switch (layout) {
    case HfTensorLayout::kKvlabNames:
      return hf_tensors;
    case HfTensorLayout::kDeepseekRope: {
      NamedTensors out;
      for (const auto& [name, t] : hf_tensors)
        out.emplace(name, reorder_mla_rope(name, t, config.attn, /*to_kvlab=*/true));
      return out;
    }
    case HfTensorLayout::kGpt2:
      return from_gpt2(hf_tensors);
  }
  throw std::logic_error("unknown tensor layout");
}

std::string canonical_hf_name(const std::string& name, HfTensorLayout layout) {
  if (layout != HfTensorLayout::kGpt2 || starts_with(name, "transformer.") ||
      name == "lm_head.weight")
    return name;
  return "transformer." + name;
}

bool is_hf_buffer(const std::string& canonical_name, HfTensorLayout layout) {
  if (layout != HfTensorLayout::kGpt2) return false;
  std::string layer, rest;
  return split_layer(canonical_name, kGpt2LayerPrefix, layer, rest) &&
         (rest == "attn.bias" || rest == "attn.masked_bias");
}

}  // namespace kvlab::nn
