#!/usr/bin/env python3
"""Writes a Llama-shaped Hugging Face folder (config.json + bf16 model.safetensors) with
constant weights, to time loading and decoding a model of a published size without
downloading one. The weights carry no knowledge: use it for speed and memory, never quality.

usage: bench/synthetic_hf_llama.py OUT_DIR [--preset llama-3.2-1b|tiny]
"""
import json
import os
import struct
import sys

PRESETS = {
    # Llama 3.2 1B's shape (config.json of meta-llama/Llama-3.2-1B, rope_scaling left out:
    # kvlab refuses llama3 scaling, and it does not change the step's cost)
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=128256, max_position_embeddings=131072,
                         tie_word_embeddings=True, rope_theta=500000.0),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                 max_position_embeddings=256, tie_word_embeddings=False, rope_theta=10000.0),
}


def tensors(c):
    d, f, h, kv, hd = (c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                       c["num_key_value_heads"], c["head_dim"])
    yield "model.embed_tokens.weight", [c["vocab_size"], d]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [d]
        yield p + "self_attn.q_proj.weight", [h * hd, d]
        yield p + "self_attn.k_proj.weight", [kv * hd, d]
        yield p + "self_attn.v_proj.weight", [kv * hd, d]
        yield p + "self_attn.o_proj.weight", [d, h * hd]
        yield p + "post_attention_layernorm.weight", [d]
        yield p + "mlp.gate_proj.weight", [f, d]
        yield p + "mlp.up_proj.weight", [f, d]
        yield p + "mlp.down_proj.weight", [d, f]
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
            value = b"\x80\x3f" if name.endswith("norm.weight") else b"\x00\x3c"
            chunk = value * min(n, 1 << 24)
            while n > 0:
                k = min(n, 1 << 24)
                f.write(chunk[: 2 * k])
                n -= k
    config = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                  rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False, torch_dtype="bfloat16",
                  **c)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {out} ({preset}, {offset / 2**30:.2f} GiB of bf16)")


if __name__ == "__main__":
    main()
