#!/usr/bin/env python3
"""The Python package's equality figures per family: the example's PyTorch model around
kvlab.nn.Attention against kvlab's C++ model loaded from the checkpoint it saved (max |Δ logit|),
and kvlab.nn.load's loss against `kvlab eval`'s on the exported folder (|Δ loss|).

    PYTHONPATH=build/python python3 bench/python_equality.py --kvlab build/bin/kvlab
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_gva  # noqa: E402

import kvlab  # noqa: E402

FAMILIES = ["mha", "gqa:2", "mqa", "q-gqa:2", "qk-v", "gva:2,dr=16", "gva:2,dr=0", "gta:2,dr=8",
            "mla:dc=32,dr=8", "gla:hc=2,dc=32"]
SHAPE = dict(layers=2, d_model=64, heads=4, vocab=256, mlp=128, mlp_kind="swiglu",
             norm="rmsnorm", bias="none", pos="rope", tied=False)
TEXT = train_gva.TEXT


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvlab", default="build/bin/kvlab")
    args = parser.parse_args()
    print("| attn | max abs(logits PyTorch − C++) | abs(loss kvlab.nn.load − kvlab eval) |")
    print("|---|--:|--:|")
    for attn in FAMILIES:
        torch.manual_seed(0)
        model = train_gva.ByteLM(attn, 2, 64, 4, 128)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        with tempfile.TemporaryDirectory() as tmp:
            kvlab.nn.save_state_dict(model.state_dict(), f"{tmp}/ckpt", attn, **SHAPE)
            tokens = torch.tensor([list(TEXT.encode()[:200])])
            with torch.no_grad():
                logit_gap = (kvlab.nn.load(f"{tmp}/ckpt")(tokens) - model(tokens)).abs().max()
            subprocess.run([args.kvlab, "export", "--checkpoint", f"{tmp}/ckpt", "--out",
                            f"{tmp}/hf"], check=True, capture_output=True)
            with open(f"{tmp}/text.txt", "w") as f:
                f.write(TEXT)
            report = json.loads(subprocess.run(
                [args.kvlab, "eval", "--checkpoint", f"{tmp}/hf", "--data", f"{tmp}/text.txt",
                 "--context", "1024", "--format", "json"], check=True, capture_output=True).stdout)
            ids = kvlab.Generator(f"{tmp}/hf").encode(TEXT)
            with torch.no_grad():
                logits = kvlab.nn.load(f"{tmp}/hf")(torch.tensor([ids]))[0]
            loss = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]))
            print(f"| {attn} | {logit_gap.item():.2e} | {abs(loss.item() - report['loss']):.2e} |")


if __name__ == "__main__":
    main()
