"""torch.ops.kvlab with defaults: the fused causal attention (differentiable), cache pools the
caller owns, appends with quantization, and the paged decode attention."""

import math

import torch

from . import _kvlab  # noqa: F401  (loading it registers torch.ops.kvlab)

__all__ = ["cache_append", "cache_pool", "causal_attention", "decode_attention"]


def causal_attention(q, k, v, scale=None):
    """softmax(q·kᵀ·scale, causal)·v over grouped heads: q [B, T, H, d_k], k [B, T, G, d_k],
    v [B, T, G, d_v] -> [B, T, H, d_v] (head h reads group h // (H // G)); float32 or float64 on
    the CPU, with its backward. scale defaults to 1/sqrt(d_k)."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return torch.ops.kvlab.causal_attention(q, k, v, float(scale))


def cache_pool(n_pages, n_heads, page_size, width, dtype="bf16"):
    """An empty pool of head rows: [n_pages, n_heads, page_size, row bytes] uint8, in the layout
    the decode kernels read (a page's rows of one head consecutive)."""
    row_bytes = torch.ops.kvlab.cache_row_bytes(dtype, width)
    return torch.zeros(n_pages, n_heads, page_size, row_bytes, dtype=torch.uint8)


def cache_append(pool, rows, slots, dtype="bf16"):
    """Writes rows [n, n_heads, width] (float32) at slots [n] (page id · page_size + place in
    the page) of pool, each head row stored as `dtype` (q8_0/q4_0: ggml's blocks of 32)."""
    torch.ops.kvlab.cache_append(pool, rows, slots, dtype)


def decode_attention(q, key_pool, value_pool, indptr, page_ids, last_page_len, value_width,
                     dtype="bf16", scale=None, q_rope=None, rope_pool=None, rope_dtype=None,
                     precision="f32"):
    """One decode step's attention over paged pools for n sequences: q [n, H, d_k] float32
    -> [n, H, value_width]. Pages are a CSR table of int32 (FlashInfer's indptr [n + 1],
    page_ids, last_page_len [n]). Pass the same pool as keys and values for one-stream layouts
    (gva, mla: queries absorbed), with q_rope [n, H, d_r] and rope_pool for the shared rope key."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1] + (q_rope.shape[-1] if q_rope is not None else 0))
    return torch.ops.kvlab.decode_attention(q, key_pool, value_pool, indptr, page_ids,
                                            last_page_len, int(value_width), dtype, float(scale),
                                            q_rope, rope_pool, rope_dtype, precision)
