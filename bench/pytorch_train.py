#!/usr/bin/env python3
"""PyTorch eager twin of `kvlab bench train`: the same GPT-2 style model (byte vocabulary, learned
positions, pre-LayerNorm blocks with biases, separate q/k/v projections, exact GELU MLP of 4·D,
tied head), the same AdamW (betas 0.9/0.98, eps 1e-8, decay 0.01 on matrices only, lr 1e-4,
foreach), the same batch of random windows; prints one JSON line with the median step time.

Written for Debian's python3-torch (1.13: no scaled_dot_product_attention, so attention is
composed as in any 1.13 GPT-2 implementation). Run by `kvlab bench train --compare-pytorch`,
or alone:
  python3 bench/pytorch_train.py --threads 1 --d-model 128 --layers 4 --heads 4 --seq-len 128 \
      --batch 32 --steps 10 --warmup 3
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    return p.parse_args()


ARGS = parse_args()
# OpenBLAS keeps its own pool, which torch.set_num_threads does not size: it must be set before
# torch loads, or "1 thread" runs its matrix products on every core.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
# Idle OpenMP workers must sleep (libgomp's default spins them, and on 2 cores 2 threads then run
# slower than 1); kvlab runs with the same policy. A value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("pytorch_train.py: PyTorch is not installed (Debian: apt-get install python3-torch)",
          file=sys.stderr)
    sys.exit(3)


class Block(torch.nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(d, eps=1e-5)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)
        self.v = torch.nn.Linear(d, d)
        self.o = torch.nn.Linear(d, d)
        self.ln_2 = torch.nn.LayerNorm(d, eps=1e-5)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)
        self.register_buffer("future", torch.ones(context, context, dtype=torch.bool).triu(1))

    def forward(self, x):  # [B, T, D]
        B, T, D = x.shape
        a = self.ln_1(x)
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)  # [B, H, T, d]
        q, k, v = split(self.q(a)), split(self.k(a)), split(self.v(a))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.heads)  # [B, H, T, T]
        scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
        mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(mixed)
        return x + self.down(F.gelu(self.up(self.ln_2(x))))


class Model(torch.nn.Module):
    def __init__(self, d, layers, heads, context):
        super().__init__()
        self.embed = torch.nn.Embedding(256, d)
        self.positions = torch.nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads, context) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d, eps=1e-5)

    def forward(self, tokens):  # [B, T] -> [B, T, 256]
        h = self.embed(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.norm(h) @ self.embed.weight.t()


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Model(a.d_model, a.layers, a.heads, a.seq_len)
    decay = [t for t in model.parameters() if t.dim() >= 2]
    no_decay = [t for t in model.parameters() if t.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.98), eps=1e-8, foreach=True)
    windows = torch.randint(0, 256, (a.batch, a.seq_len + 1))
    inputs, targets = windows[:, :-1], windows[:, 1:]
    seconds = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        loss.item()
        if i >= a.warmup:
            seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(json.dumps({
        "implementation": "pytorch-eager",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "params": sum(t.numel() for t in model.parameters()),
        "tokens_per_s": a.batch * a.seq_len / median,
        "step_ms_median": 1e3 * median,
        "step_ms_min": 1e3 * min(seconds),
        "step_ms_max": 1e3 * max(seconds),
    }))


if __name__ == "__main__":
    main()
