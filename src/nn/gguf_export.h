#pragma once

#include <string>

#include "io/gguf_writer.h"
#include "nn/transformer.h"

namespace kvlab::nn {

// The GGUF file llama.cpp runs for a kvlab model, as its converter (convert_hf_to_gguf.py)
// would write it from the Hugging Face export: architecture "llama" for Llama-style decoders
// with mha/gqa/mqa, "qwen2" with q/k/v biases, "qwen3" with qknorm, "deepseek2" for
// DeepSeek-style mla (q LoRA, dense or MoE), "gpt2" for GPT-2 blocks, and a byte vocabulary (a
// "gpt2" BPE tokenizer over the 256 byte tokens, no merges). For llama, q and k rows are
// reordered for llama.cpp's RoPE, which rotates adjacent pairs where Hugging Face's (and
// kvlab's, and llama.cpp's for qwen2/qwen3) rotates the two halves of a head. Matrices in `type`,
// norms in f32 (ggml's norm kernels read f32). Throws SpecError saying why for any other model.
GgufWriter gguf_for(const TransformerModelImpl& model, GgmlType type);

// Rows of a q or k projection [n_heads · head_dim, in] from rotate-half pairing (channel i
// with i + head_dim/2) to adjacent pairing (2i with 2i + 1), per head; and back.
torch::Tensor to_adjacent_rope_rows(const torch::Tensor& weight, int64_t n_heads);
torch::Tensor from_adjacent_rope_rows(const torch::Tensor& weight, int64_t n_heads);

}  // namespace kvlab::nn
