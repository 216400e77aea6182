"""kvlab.nn: every family as a torch.nn.Module (parameters, autograd, an optimizer step), the
standard family against attention written out here in plain torch, gradients against finite
differences in f64, and whole models against `kvlab eval`'s loss."""

import json
import math

import pytest
import torch

import kvlab
from conftest import TINY_SHAPE, run_kvlab

FAMILIES = ["mha", "gqa:2", "mqa", "q-gqa:2", "qk-v", "gva:2,dr=8", "gva:2,dr=0", "gta:2,dr=4",
            "mla:dc=16,dr=8", "gla:hc=2,dc=16", "linear"]


@pytest.mark.parametrize("spec", FAMILIES)
def test_every_family_is_a_trainable_module(spec):
    torch.manual_seed(0)
    # linear attention keeps a running state without RoPE
    attn = kvlab.nn.Attention(spec, d_model=32, n_heads=4, pos="none" if spec == "linear" else "rope")
    assert isinstance(attn, torch.nn.Module)
    assert set(attn.state_dict()) == {name for name, _ in attn.named_parameters()}
    names = [name for name, _ in attn.named_parameters()]
    assert names and all(p.requires_grad for p in attn.parameters())
    x = torch.randn(2, 6, 32)
    target = torch.randn(2, 6, 32)
    optimizer = torch.optim.Adam(attn.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = (attn(x) - target).pow(2).mean()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in attn.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert attn(x).shape == (2, 6, 32)


def rope(x, theta=10000.0):
    """GPT-NeoX / Hugging Face RoPE over the last dimension of x [B, T, heads, d]."""
    T, d = x.shape[1], x.shape[-1]
    freqs = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None, :]  # [T, d/2]
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@pytest.mark.parametrize("spec, G", [("mha", 4), ("gqa:2", 2), ("mqa", 1)])
def test_standard_family_is_the_attention_written_out(spec, G):
    torch.manual_seed(1)
    H, D = 4, 32
    d = D // H
    attn = kvlab.nn.Attention(spec, d_model=D, n_heads=H)
    p = {name: t.detach().double() for name, t in attn.named_parameters()}
    x = torch.randn(2, 7, D, dtype=torch.float64)
    q = rope((x @ p["q_proj.weight"].T).view(2, 7, H, d))
    k = rope((x @ p["k_proj.weight"].T).view(2, 7, G, d)).repeat_interleave(H // G, dim=2)
    v = (x @ p["v_proj.weight"].T).view(2, 7, G, d).repeat_interleave(H // G, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
    mixed = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v).reshape(2, 7, H * d)
    expected = mixed @ p["o_proj.weight"].T
    torch.testing.assert_close(attn(x.float()).double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spec", ["gqa:2", "gva:2,dr=4", "gta:2,dr=4", "mla:dc=8,dr=4",
                                  "gla:hc=2,dc=8", "q-gqa:2"])
def test_gradients_against_finite_differences(spec):
    torch.manual_seed(2)
    attn = kvlab.nn.Attention(spec, d_model=16, n_heads=2, dtype=torch.float64)
    x = torch.randn(1, 4, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: attn(t), (x,))
    weight = next(iter(attn.parameters()))
    weight_copy = weight.detach().clone().requires_grad_()

    def through_weight(w):
        with torch.no_grad():
            weight.copy_(w)
        return attn(x.detach())

    # d(out)/d(weight) from autograd at this point, against central differences
    out = attn(x.detach())
    direction = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * direction).sum(), weight)
    step = torch.randn_like(weight_copy) * 1e-6
    plus = (through_weight(weight_copy + step) * direction).sum()
    minus = (through_weight(weight_copy - step) * direction).sum()
    through_weight(weight_copy)
    torch.testing.assert_close((plus - minus) / 2, (grad * step).sum(), atol=1e-9, rtol=1e-6)


def test_the_fused_kernel_and_the_composed_ops_agree_in_training():
    torch.manual_seed(3)
    attn = kvlab.nn.Attention("gva:2,dr=8", d_model=32, n_heads=4)
    x = torch.randn(2, 9, 32, requires_grad=True)
    fused = attn(x)
    (fused_grad,) = torch.autograd.grad(fused.sum(), x)
    attn.cpp_module.use_fused_attention(False)
    composed = attn(x)
    (composed_grad,) = torch.autograd.grad(composed.sum(), x)
    torch.testing.assert_close(fused, composed, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_grad, composed_grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["gqa:2", "gva:2,dr=8", "mla:dc=32,dr=8"])
def test_loaded_model_loss_is_kvlab_evals(kvlab_bin, tiny_checkpoints, tmp_path, attn):
    exported = tmp_path / "hf"
    run_kvlab(kvlab_bin, "export", "--checkpoint", tiny_checkpoints(attn), "--out", str(exported))
    text = "In the beginning God created the heaven and the earth. " * 3
    (tmp_path / "text.txt").write_text(text)
    report = json.loads(run_kvlab(kvlab_bin, "eval", "--checkpoint", str(exported), "--data",
                                  str(tmp_path / "text.txt"), "--context", "256", "--format",
                                  "json"))
    assert report["windows"] == 1
    model = kvlab.nn.load(exported)
    tokens = kvlab.Generator(exported).encode(text)
    assert len(tokens) == report["tokens"]
    with torch.no_grad():
        logits = model(torch.tensor([tokens]))[0]
    loss = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(tokens[1:]))
    assert abs(loss.item() - report["loss"]) < 1e-5


def test_a_model_round_trips_through_a_checkpoint(tiny_checkpoints, tmp_path):
    model = kvlab.nn.load(tiny_checkpoints("gla:hc=2,dc=32"))
    assert model.attn == "gla:hc=2,dc=32,dr=8"  # canonical: the default d_r written out
    kvlab.nn.save(model, tmp_path / "copy")
    # a state dict under the model's own parameter names saves as the same checkpoint
    kvlab.nn.save_state_dict(model.state_dict(), tmp_path / "state", "gla:hc=2,dc=32",
                             **TINY_SHAPE)
    tokens = torch.randint(0, 256, (2, 11))
    with torch.no_grad():
        expected = model(tokens)
        for folder in ("copy", "state"):
            assert torch.equal(kvlab.nn.load(tmp_path / folder)(tokens), expected)


def test_bad_input_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="groups"):
        kvlab.nn.Attention("gqa:3", d_model=32, n_heads=4)
    with pytest.raises(ValueError, match="checkpoint"):
        kvlab.nn.load(tmp_path / "nothing-here")
    model = kvlab.nn.Transformer.new("gqa:2", layers=1, d_model=32, heads=4, vocab=256)
    state = dict(model.state_dict())
    state.pop("lm_head.weight", None)
    state["model.norm.weight"] = torch.zeros(7)
    with pytest.raises(Exception, match="model.norm.weight"):
        kvlab.nn.save_state_dict(state, tmp_path / "bad", "gqa:2", layers=1, d_model=32, heads=4,
                                 vocab=256)
    assert not (tmp_path / "bad" / "config.json").exists()
