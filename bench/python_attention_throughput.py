#!/usr/bin/env python3
"""Training throughput of kvlab.nn.Attention in a plain PyTorch model: kvlab's fused causal
kernel against the same C++ modules on libtorch's composed ops (matmul, mask, softmax, matmul),
and, for the standard family, against attention written in Python with torch's composed ops.
Rounds alternate between the arms; medians and ratios come from one run.

    PYTHONPATH=build/python python3 bench/python_attention_throughput.py --attn gqa:2 --rounds 5
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_gva  # noqa: E402  (ByteLM: a Llama-style model around kvlab.nn.Attention)

import kvlab  # noqa: E402


class PythonGqa(torch.nn.Module):
    """GQA with RoPE in Python on torch's composed ops: the baseline a PyTorch user writes."""

    def __init__(self, d_model, n_heads, n_groups):
        super().__init__()
        self.h, self.g, self.d = n_heads, n_groups, d_model // n_heads
        self.q_proj = torch.nn.Linear(d_model, n_heads * self.d, bias=False)
        self.k_proj = torch.nn.Linear(d_model, n_groups * self.d, bias=False)
        self.v_proj = torch.nn.Linear(d_model, n_groups * self.d, bias=False)
        self.o_proj = torch.nn.Linear(n_heads * self.d, d_model, bias=False)

    def rope(self, x):  # [B, T, heads, d]
        T, d = x.shape[1], self.d
        freqs = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float32) * 2 / d)
        angles = torch.arange(T, dtype=torch.float32)[:, None] * freqs[None, :]
        cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.rope(self.q_proj(x).view(B, T, self.h, self.d)).transpose(1, 2)
        k = self.rope(self.k_proj(x).view(B, T, self.g, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.g, self.d).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.g, dim=1)
        v = v.repeat_interleave(self.h // self.g, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        out = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.h * self.d))


def make_model(args, arm):
    torch.manual_seed(0)
    model = train_gva.ByteLM(args.attn, args.layers, args.d_model, args.heads, 4 * args.d_model)
    for block in model.model.layers:
        if arm == "python":
            groups = int(args.attn.split(":")[1]) if ":" in args.attn else args.heads
            block.self_attn = PythonGqa(args.d_model, args.heads, groups)
        else:
            block.self_attn.cpp_module.use_fused_attention(arm == "fused")
    return model


def tokens_per_second(model, args):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 256, (args.steps + 1, args.batch, args.seq_len + 1))
    step = lambda window: (  # noqa: E731
        torch.nn.functional.cross_entropy(model(window[:, :-1]).reshape(-1, 256),
                                          window[:, 1:].reshape(-1)))
    loss = step(data[0])  # warm-up
    loss.backward()
    start = time.perf_counter()
    for i in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = step(data[i])
        loss.backward()
        optimizer.step()
    return args.steps * args.batch * args.seq_len / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attn", default="gqa:2")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="timed steps a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0,
                        help="libtorch's and OpenBLAS's threads (kvlab.set_threads; 0: all cores)")
    args = parser.parse_args()
    kvlab.set_threads(args.threads)
    arms = ["fused", "composed"]
    if kvlab.AttentionSpec(args.attn, model=kvlab.model(layers=1, d_model=args.d_model,
                                                         heads=args.heads, pos="rope")).family == \
            "standard" and not args.attn.startswith(("q", "qk")):
        arms.append("python")
    models = {arm: make_model(args, arm) for arm in arms}
    rates = {arm: [] for arm in arms}
    for _ in range(args.rounds):
        for arm in arms:
            rates[arm].append(tokens_per_second(models[arm], args))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    print(f"{args.attn}: {args.layers} layers, d {args.d_model}, {args.heads} heads, "
          f"batch {args.batch} × {args.seq_len} tokens; {torch.get_num_threads()} threads; {cpu}")
    fused = statistics.median(rates["fused"])
    print("| attention | training tokens/s (median of {}) | fused ÷ this |".format(args.rounds))
    print("|---|--:|--:|")
    names = {"fused": "kvlab.nn.Attention, fused kernel",
             "composed": "kvlab.nn.Attention, libtorch's composed ops",
             "python": "attention in Python, torch's composed ops"}
    for arm in arms:
        median = statistics.median(rates[arm])
        print(f"| {names[arm]} | {median:,.0f} | {fused / median:.2f}× |")


if __name__ == "__main__":
    main()
