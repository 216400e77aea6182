#!/usr/bin/env python3
"""Prefill tokens/s of a 2,048-token prompt fed to kvlab.Decoder whole and in 8 chunks of 256
(later chunks attend after cached tokens), per family; random-weight models of 4 layers, d 256,
8 heads, bf16 cache and weights, medians of 2 rounds.

    OMP_WAIT_POLICY=passive PYTHONPATH=build/python python3 bench/python_prefill_chunks.py
"""

import statistics
import tempfile
import time

import torch

import kvlab

SHAPE = dict(layers=4, d_model=256, heads=8, vocab=256, mlp=1024, mlp_kind="swiglu",
             norm="rmsnorm", bias="none", pos="rope", tied=False)


def main():
    prompt = torch.randint(0, 256, (2048,), generator=torch.Generator().manual_seed(0)).tolist()
    print("| attn | whole prompt tok/s | 8 chunks tok/s |")
    print("|---|--:|--:|")
    for attn in ["gqa:2", "gva:2,dr=16", "mla:dc=64,dr=16", "gla:hc=2,dc=64"]:
        with tempfile.TemporaryDirectory() as folder:
            torch.manual_seed(0)
            kvlab.nn.save(kvlab.nn.Transformer.new(attn, **SHAPE), folder)
            decoder = kvlab.Decoder(folder, cache_dtype="bf16", weight_dtype="bf16",
                                    max_tokens=2100, max_seqs=2, threads=2)
            rates = {1: [], 8: []}
            for _ in range(2):
                for chunks in (1, 8):
                    seq = decoder.add_sequence()
                    size = len(prompt) // chunks
                    start = time.perf_counter()
                    for c in range(chunks):
                        decoder.feed(seq, prompt[c * size:(c + 1) * size])
                    rates[chunks].append(len(prompt) / (time.perf_counter() - start))
                    decoder.free_sequence(seq)
            print(f"| {attn} | {statistics.median(rates[1]):,.0f} | "
                  f"{statistics.median(rates[8]):,.0f} |")


if __name__ == "__main__":
    main()
