#!/usr/bin/env python3
"""Writes a Hugging Face folder (config.json + bf16 model.safetensors) of a published model's
shape with constant weights, to time loading and decoding a model of that size without
downloading one. The weights carry no knowledge: use it for speed and memory, never quality.

usage: bench/synthetic_hf_llama.py OUT_DIR [--preset llama-3.2-1b|qwen3-0.6b|deepseek-v2-lite-3l|tiny]
"""
import json
import os
import struct
import sys

PRESETS = {
    # Llama 3.2 1B's config.json (meta-llama/Llama-3.2-1B), llama3 RoPE scaling included
    "llama-3.2-1b": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                         hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=128256, max_position_embeddings=131072,
                         tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0,
                                           original_max_position_embeddings=8192)),
    # Qwen3 0.6B's (Qwen/Qwen3-0.6B): per-head q_norm / k_norm, head_dim 128 > hidden / heads
    "qwen3-0.6b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                       hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, max_position_embeddings=40960,
                       tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       use_sliding_window=False, sliding_window=None),
    # DeepSeek-V2-Lite's widths (deepseek-ai/DeepSeek-V2-Lite) with 3 of its 27 layers: one
    # dense, two with 64 routed experts (6 per token) + 2 shared; MLA 512 + 64; yarn
    "deepseek-v2-lite-3l": dict(architectures=["DeepseekV2ForCausalLM"],
                                model_type="deepseek_v2", hidden_size=2048,
                                intermediate_size=10944, moe_intermediate_size=1408,
                                num_hidden_layers=3, num_attention_heads=16,
                                num_key_value_heads=16, n_shared_experts=2, n_routed_experts=64,
                                num_experts_per_tok=6, first_k_dense_replace=1,
                                moe_layer_freq=1, n_group=1, topk_group=1, topk_method="greedy",
                                scoring_func="softmax", norm_topk_prob=False,
                                routed_scaling_factor=1.0, kv_lora_rank=512, q_lora_rank=None,
                                qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                vocab_size=102400, max_position_embeddings=163840,
                                tie_word_embeddings=False, rope_theta=10000.0,
                                rms_norm_eps=1e-6,
                                rope_scaling=dict(type="yarn", factor=40, beta_fast=32,
                                                  beta_slow=1, mscale=0.707,
                                                  mscale_all_dim=0.707,
                                                  original_max_position_embeddings=4096)),
    "tiny": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
                 intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=256,
                 max_position_embeddings=256, tie_word_embeddings=False, rope_theta=10000.0,
                 rms_norm_eps=1e-5),
}


def mlp(p, d, f):
    yield p + "gate_proj.weight", [f, d]
    yield p + "up_proj.weight", [f, d]
    yield p + "down_proj.weight", [d, f]


def tensors(c):
    d, h = c["hidden_size"], c["num_attention_heads"]
    yield "model.embed_tokens.weight", [c["vocab_size"], d]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [d]
        yield p + "post_attention_layernorm.weight", [d]
        if c["model_type"] == "deepseek_v2":
            dc, dr, dn, dv = (c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"],
                              c["v_head_dim"])
            yield p + "self_attn.q_proj.weight", [h * (dn + dr), d]
            yield p + "self_attn.kv_a_proj_with_mqa.weight", [dc + dr, d]
            yield p + "self_attn.kv_a_layernorm.weight", [dc]
            yield p + "self_attn.kv_b_proj.weight", [h * (dn + dv), dc]
            yield p + "self_attn.o_proj.weight", [d, h * dv]
            if i < c["first_k_dense_replace"]:
                yield from mlp(p + "mlp.", d, c["intermediate_size"])
                continue
            f = c["moe_intermediate_size"]
            yield p + "mlp.gate.weight", [c["n_routed_experts"], d]
            for e in range(c["n_routed_experts"]):
                yield from mlp(p + f"mlp.experts.{e}.", d, f)
            yield from mlp(p + "mlp.shared_experts.", d, f * c["n_shared_experts"])
            continue
        kv, hd = c["num_key_value_heads"], c["head_dim"]
        yield p + "self_attn.q_proj.weight", [h * hd, d]
        yield p + "self_attn.k_proj.weight", [kv * hd, d]
        yield p + "self_attn.v_proj.weight", [kv * hd, d]
        yield p + "self_attn.o_proj.weight", [d, h * hd]
        if c["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", [hd]
            yield p + "self_attn.k_norm.weight", [hd]
        yield from mlp(p + "mlp.", d, c["intermediate_size"])
    yield "model.norm.weight", [d]
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", [c["vocab_size"], d]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    preset = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--preset" else "llama-3.2-1b"
    c = PRESETS[preset]
    os.makedirs(out, exist_ok=True)
    header, offset, entries = {}, 0, list(tensors(c))
    for name, shape in entries:
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in entries:
            n = 1
            for s in shape:
                n *= s
            # norms 1.0, everything else 2^-7 (bf16 0x3C00): finite activations at any depth
            value = b"\x80\x3f" if name.endswith(("norm.weight", "layernorm.weight")) \
                else b"\x00\x3c"
            chunk = value * min(n, 1 << 24)
            while n > 0:
                k = min(n, 1 << 24)
                f.write(chunk[: 2 * k])
                n -= k
    config = dict(hidden_act="silu", attention_bias=False, torch_dtype="bfloat16", **c)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {out} ({preset}, {offset / 2**30:.2f} GiB of bf16)")


if __name__ == "__main__":
    main()
