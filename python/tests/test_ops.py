"""torch.ops.kvlab: the fused causal attention against attention written out in plain torch (and
its gradients against finite differences), the paged decode attention and cache appends against
the same formula over rows rounded as each cache dtype rounds them, and bad input refused."""

import math

import pytest
import torch

import kvlab
from kvlab import ops


def composed_attention(q, k, v, scale):
    """softmax(q·kᵀ·scale, causal)·v with head h reading group h // (H // G), in f64."""
    B, T, H, _ = q.shape
    G = k.shape[2]
    k = k.repeat_interleave(H // G, dim=2)
    v = v.repeat_interleave(H // G, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q.double(), k.double()) * scale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
    return torch.einsum("bhts,bshd->bthd", probs, v.double())


@pytest.mark.parametrize("B, T, H, G, dk, dv", [(1, 1, 1, 1, 1, 1), (2, 7, 6, 3, 5, 3),
                                                (3, 33, 8, 2, 16, 24), (1, 70, 4, 4, 9, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_attention_matches_the_formula(B, T, H, G, dk, dv, dtype):
    g = torch.Generator().manual_seed(B * 1000 + T)
    q = torch.randn(B, T, H, dk, generator=g, dtype=dtype)
    k = torch.randn(B, T, G, dk, generator=g, dtype=dtype)
    v = torch.randn(B, T, G, dv, generator=g, dtype=dtype)
    out = ops.causal_attention(q, k, v)
    assert out.shape == (B, T, H, dv) and out.dtype == dtype
    assert not torch.isnan(out).any()
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out.double(), composed_attention(q, k, v, 1 / math.sqrt(dk)),
                               atol=tolerance, rtol=tolerance)


def test_causal_attention_gradients_against_finite_differences():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 5, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: ops.causal_attention(*t, scale=0.7), (q, k, v))


def test_causal_attention_gradients_match_the_formula_in_f32():
    g = torch.Generator().manual_seed(8)
    tensors = [torch.randn(2, 9, 4, 6, generator=g), torch.randn(2, 9, 2, 6, generator=g),
               torch.randn(2, 9, 2, 5, generator=g)]
    fused = [t.clone().requires_grad_() for t in tensors]
    plain = [t.double().requires_grad_() for t in tensors]
    weights = torch.randn(2, 9, 4, 5, generator=g)
    (ops.causal_attention(*fused) * weights).sum().backward()
    (composed_attention(*plain, 1 / math.sqrt(6)) * weights.double()).sum().backward()
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a.grad.double(), b.grad, atol=1e-5, rtol=1e-5)


def test_the_op_has_a_schema():
    schema = str(torch.ops.kvlab.causal_attention.default._schema)
    assert schema == "kvlab::causal_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor"
    assert "Tensor(a!) pool" in str(torch.ops.kvlab.cache_append.default._schema)


@pytest.mark.parametrize("q, k, v, error, words", [
    ((2, 3, 4), (2, 3, 2, 8), (2, 3, 2, 8), ValueError, "[B, T, heads, width]"),
    ((2, 3, 4, 8), (2, 4, 2, 8), (2, 4, 2, 8), ValueError, "tokens"),
    ((2, 3, 4, 8), (2, 3, 3, 8), (2, 3, 3, 8), ValueError, "divide"),
    ((2, 3, 4, 8), (2, 3, 2, 7), (2, 3, 2, 8), ValueError, "key width"),
])
def test_causal_attention_refuses_bad_shapes(q, k, v, error, words):
    with pytest.raises(error) as raised:
        ops.causal_attention(torch.zeros(q), torch.zeros(k), torch.zeros(v), scale=1.0)
    assert words in str(raised.value)


def test_causal_attention_refuses_bad_dtypes_and_scales():
    half = torch.zeros(1, 2, 2, 4, dtype=torch.float16)
    with pytest.raises(TypeError, match="float32 or float64"):
        ops.causal_attention(half, half, half)
    with pytest.raises(TypeError, match="share a dtype"):
        ops.causal_attention(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4, dtype=torch.float64),
                             torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match="scale"):
        ops.causal_attention(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4),
                             torch.zeros(1, 2, 2, 4), scale=float("nan"))


def rounded_like_the_cache(rows, dtype):
    """rows [..., width] as a cache of `dtype` reads them back, computed here: bf16/f16 by torch's
    rounding; q8_0 as ggml's blocks of 32: d = max |x| / 127, q = x · (1/d) rounded half away
    from zero, read back as q · d with d stored as f16."""
    if dtype == "f32":
        return rows
    if dtype == "bf16":
        return rows.to(torch.bfloat16).float()
    if dtype == "f16":
        return rows.to(torch.float16).float()
    assert dtype == "q8_0"
    blocks = rows.reshape(*rows.shape[:-1], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    t = blocks * torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = t.sign() * (t.abs() + 0.5).floor()
    return (q * d.to(torch.float16).float()).reshape(rows.shape)


def paged_case(lengths, page_size, n_pages, seed):
    """A shuffled page table for sequences of these lengths: (indptr, page_ids, last_page_len,
    slots of each sequence's tokens)."""
    g = torch.Generator().manual_seed(seed)
    free = torch.randperm(n_pages, generator=g).tolist()
    indptr, page_ids, last, slots = [0], [], [], []
    for n in lengths:
        pages = [free.pop() for _ in range((n + page_size - 1) // page_size)]
        page_ids += pages
        indptr.append(len(page_ids))
        last.append(n - (len(pages) - 1) * page_size)
        slots.append([pages[j // page_size] * page_size + j % page_size for j in range(n)])
    as_int = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    return as_int(indptr), as_int(page_ids), as_int(last), slots


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "q8_0"])
def test_two_stream_decode_matches_the_formula(dtype):
    H, G, dk, dv, page, n_pages = 6, 3, 32, 64, 16, 12
    lengths = [1, 17, 40]
    indptr, page_ids, last, slots = paged_case(lengths, page, n_pages, seed=3)
    g = torch.Generator().manual_seed(11)
    keys = ops.cache_pool(n_pages, G, page, dk, dtype)
    values = ops.cache_pool(n_pages, G, page, dv, dtype)
    written = []
    for seq_slots in slots:
        k = torch.randn(len(seq_slots), G, dk, generator=g)
        v = torch.randn(len(seq_slots), G, dv, generator=g)
        ops.cache_append(keys, k, torch.tensor(seq_slots), dtype)
        ops.cache_append(values, v, torch.tensor(seq_slots), dtype)
        written.append((rounded_like_the_cache(k, dtype), rounded_like_the_cache(v, dtype)))
    q = torch.randn(len(lengths), H, dk, generator=g)
    out = ops.decode_attention(q, keys, values, indptr, page_ids, last, dv, dtype=dtype)
    assert out.shape == (len(lengths), H, dv) and not torch.isnan(out).any()
    for s, (k, v) in enumerate(written):
        k = k.repeat_interleave(H // G, dim=1).double()  # [n, H, dk]
        v = v.repeat_interleave(H // G, dim=1).double()
        probs = (torch.einsum("hd,nhd->hn", q[s].double(), k) / math.sqrt(dk)).softmax(-1)
        expected = torch.einsum("hn,nhd->hd", probs, v)
        torch.testing.assert_close(out[s].double(), expected, atol=2e-5, rtol=2e-5)


def test_one_stream_decode_with_a_rope_key():
    H, G, dc, dr, page, n_pages = 4, 1, 32, 8, 16, 6
    lengths = [5, 30]
    indptr, page_ids, last, slots = paged_case(lengths, page, n_pages, seed=4)
    g = torch.Generator().manual_seed(12)
    content = ops.cache_pool(n_pages, G, page, dc, "bf16")
    rope = ops.cache_pool(n_pages, 1, page, dr, "bf16")
    written = []
    for seq_slots in slots:
        c = torch.randn(len(seq_slots), G, dc, generator=g)
        r = torch.randn(len(seq_slots), 1, dr, generator=g)
        ops.cache_append(content, c, torch.tensor(seq_slots), "bf16")
        ops.cache_append(rope, r, torch.tensor(seq_slots), "bf16")
        written.append((rounded_like_the_cache(c, "bf16"), rounded_like_the_cache(r, "bf16")))
    q = torch.randn(2, H, dc, generator=g)
    q_rope = torch.randn(2, H, dr, generator=g)
    out = ops.decode_attention(q, content, content, indptr, page_ids, last, dc, dtype="bf16",
                               scale=0.25, q_rope=q_rope, rope_pool=rope)
    for s, (c, r) in enumerate(written):
        scores = (torch.einsum("hd,nd->hn", q[s].double(), c[:, 0].double()) +
                  torch.einsum("hd,nd->hn", q_rope[s].double(), r[:, 0].double())) * 0.25
        expected = scores.softmax(-1) @ c[:, 0].double()
        torch.testing.assert_close(out[s].double(), expected, atol=2e-5, rtol=2e-5)


def test_decode_attention_refuses_what_would_read_outside_the_pool():
    keys = ops.cache_pool(2, 1, 16, 8, "f32")
    q = torch.zeros(1, 2, 8)
    table = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    with pytest.raises(ValueError, match="page_ids"):
        ops.decode_attention(q, keys, keys, table(0, 1), table(5), table(3), 8, dtype="f32")
    with pytest.raises(ValueError, match="last_page_len"):
        ops.decode_attention(q, keys, keys, table(0, 1), table(1), table(17), 8, dtype="f32")
    with pytest.raises(ValueError, match="indptr"):
        ops.decode_attention(q, keys, keys, table(0, 2), table(1), table(3), 8, dtype="f32")
    with pytest.raises(ValueError, match="key_pool"):
        ops.decode_attention(q, keys, keys, table(0, 1), table(1), table(3), 8, dtype="bf16")
    with pytest.raises(TypeError, match="int32"):
        ops.decode_attention(q, keys, keys, torch.tensor([0, 1]), table(1), table(3), 8,
                             dtype="f32")
    with pytest.raises(ValueError, match="dtype"):
        ops.decode_attention(q, keys, keys, table(0, 1), table(1), table(3), 8, dtype="f12")
    with pytest.raises(ValueError, match="slots"):
        ops.cache_append(keys, torch.zeros(1, 1, 8), torch.tensor([32]), "f32")
    with pytest.raises(TypeError, match="uint8"):
        ops.cache_append(torch.zeros(2, 1, 16, 32), torch.zeros(1, 1, 8), torch.tensor([0]), "f32")
