#!/usr/bin/env python3
"""Train a tiny byte-level GVA language model in plain PyTorch with kvlab.nn.Attention, save it as
a kvlab checkpoint, check that kvlab's own model computes the same logits, and decode it with
kvlab.Generator (kvlab's C++ decode runtime with a paged cache of grouped values).

    PYTHONPATH=build/python python3 examples/train_gva.py --steps 300 --out runs/py-gva
"""

import argparse
import time

import torch

import kvlab

TEXT = (
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters. And God said, Let there be light: and there was light. And God saw the light, "
    "that it was good: and God divided the light from the darkness. And God called the light Day, "
    "and the darkness he called Night. And the evening and the morning were the first day. ")


class RMSNorm(torch.nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(torch.nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.gate_proj = torch.nn.Linear(width, hidden, bias=False)
        self.up_proj = torch.nn.Linear(width, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    def __init__(self, attn, width, heads, hidden):
        super().__init__()
        self.input_layernorm = RMSNorm(width)
        self.self_attn = kvlab.nn.Attention(attn, d_model=width, n_heads=heads)
        self.post_attention_layernorm = RMSNorm(width)
        self.mlp = SwiGLU(width, hidden)

    def forward(self, h):
        h = h + self.self_attn(self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class Trunk(torch.nn.Module):
    def __init__(self, attn, layers, width, heads, hidden):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(256, width)
        self.layers = torch.nn.ModuleList(Block(attn, width, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(width)


class ByteLM(torch.nn.Module):
    """A Llama-style decoder whose parameter names are those of kvlab's checkpoints."""

    def __init__(self, attn, layers, width, heads, hidden):
        super().__init__()
        self.model = Trunk(attn, layers, width, heads, hidden)
        self.lm_head = torch.nn.Linear(width, 256, bias=False)
        torch.nn.init.normal_(self.model.embed_tokens.weight, std=0.02)

    def forward(self, tokens):  # [B, T] -> [B, T, 256]
        h = self.model.embed_tokens(tokens)
        for block in self.model.layers:
            h = block(h)
        return self.lm_head(self.model.norm(h))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attn", default="gva:2,dr=16", help="kvlab attention spec")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/py-gva", help="checkpoint folder to write")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    torch.manual_seed(args.seed)
    hidden = 2 * args.d_model
    model = ByteLM(args.attn, args.layers, args.d_model, args.heads, hidden)
    data = torch.tensor(list(TEXT.encode()), dtype=torch.int64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    print(f"ByteLM with kvlab.nn.Attention('{args.attn}'): "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")
    start = time.perf_counter()
    first_loss = None
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, len(data) - args.seq_len - 1, (args.batch,))
        window = torch.stack([data[s:s + args.seq_len + 1] for s in starts.tolist()])
        logits = model(window[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first_loss = first_loss if first_loss is not None else loss.item()
        if step == 1 or step % 50 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    seconds = time.perf_counter() - start
    print(f"trained {args.steps} steps in {seconds:.1f} s "
          f"({args.steps * args.batch * args.seq_len / seconds:,.0f} tokens/s); "
          f"loss {first_loss:.4f} -> {loss.item():.4f}")

    shape = dict(layers=args.layers, d_model=args.d_model, heads=args.heads, vocab=256,
                 mlp=hidden, mlp_kind="swiglu", norm="rmsnorm", bias="none", pos="rope",
                 tied=False)
    kvlab.nn.save_state_dict(model.state_dict(), args.out, args.attn, **shape)
    print(f"saved {args.out}")

    # kvlab's own model of the checkpoint computes what this PyTorch model computes
    probe = data[: args.seq_len].unsqueeze(0)
    with torch.no_grad():
        difference = (kvlab.nn.load(args.out)(probe) - model(probe)).abs().max().item()
    print(f"max |logits(kvlab) - logits(PyTorch)| = {difference:.2e}")

    generator = kvlab.Generator(args.out, cache_dtype="bf16")
    prompt = "And God said"
    print(f"kvlab.Generator ({args.attn}, bf16 cache): {prompt!r} -> "
          f"{generator.generate(prompt, max_tokens=48)!r}")


if __name__ == "__main__":
    main()
