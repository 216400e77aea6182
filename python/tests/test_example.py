"""examples/train_gva.py runs: a plain PyTorch model with kvlab.nn.Attention trains, saves as a
kvlab checkpoint whose C++ model computes the same logits, and kvlab.Generator decodes it."""

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_gva.py")


def test_train_gva_example(tmp_path):
    import kvlab

    # the package this test imports, wherever it came from
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvlab.__file__)))
    done = subprocess.run([sys.executable, EXAMPLE, "--steps", "60", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < first / 2
    difference = float(re.search(r"max \|logits\(kvlab\) - logits\(PyTorch\)\| = (\S+)", out)[1])
    assert difference < 1e-4
    assert re.search(r"kvlab.Generator \(gva:2,dr=16, bf16 cache\): 'And God said' -> '.{8,}'",
                     out)
    assert (tmp_path / "run" / "config.json").exists()


sys.path.insert(0, os.path.dirname(EXAMPLE))
import train_gva  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import kvlab  # noqa: E402


@pytest.mark.parametrize("attn", ["mha", "gqa:2", "mqa", "q-gqa:2", "qk-v", "gva:2,dr=16",
                                  "gva:2,dr=0", "gta:2,dr=8", "mla:dc=32,dr=8", "gla:hc=2,dc=32"])
def test_every_family_in_a_pytorch_model_is_kvlabs_model(tmp_path, attn):
    """The example's PyTorch model around kvlab.nn.Attention, saved under kvlab's names and loaded
    as kvlab's C++ model: the same logits to f32 rounding."""
    torch.manual_seed(4)
    model = train_gva.ByteLM(attn, 2, 64, 4, 128)
    with torch.no_grad():  # away from the initialisation, so every weight matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    shape = dict(layers=2, d_model=64, heads=4, vocab=256, mlp=128, mlp_kind="swiglu",
                 norm="rmsnorm", bias="none", pos="rope", tied=False)
    kvlab.nn.save_state_dict(model.state_dict(), tmp_path / "ckpt", attn, **shape)
    tokens = torch.randint(0, 256, (2, 37))
    with torch.no_grad():
        expected = model(tokens)
        got = kvlab.nn.load(tmp_path / "ckpt")(tokens)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)


def test_the_operators_load_without_the_python_module():
    """torch.ops.load_library on the extension registers torch.ops.kvlab (TORCH_LIBRARY), as a
    TorchScript or C++ user would load it, without importing kvlab."""
    library = kvlab._kvlab.__file__
    code = ("import torch, sys; torch.ops.load_library(sys.argv[1]); "
            "q = torch.randn(1, 3, 2, 4); "
            "print(torch.ops.kvlab.causal_attention(q, q[:, :, :1], q[:, :, :1], 0.5).shape); "
            "print('kvlab' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, library], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["torch.Size([1, 3, 2, 4])", "False"]
