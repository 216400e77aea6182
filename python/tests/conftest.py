"""Fixtures of the Python package's tests: the kvlab program of the same build (the CLI is the
oracle the package is held to) and small checkpoints made through the package itself."""

import os
import subprocess

import pytest
import torch

import kvlab

# A small Llama-style byte model: what the generator and loading tests decode.
TINY_SHAPE = dict(layers=2, d_model=64, heads=4, vocab=256, mlp=96, mlp_kind="swiglu",
                  norm="rmsnorm", bias="none", pos="rope", tied=False, max_context=512)


@pytest.fixture(scope="session")
def kvlab_bin():
    path = os.environ.get("KVLAB_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("KVLAB_BIN must name the kvlab program of this build (ctest sets it)")
    return path


def run_kvlab(kvlab_bin, *args):
    """kvlab's stdout as bytes; a non-zero exit fails the test with its stderr."""
    done = subprocess.run([kvlab_bin, *args], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """attn -> a checkpoint folder of TINY_SHAPE with that attention, random weights (seeded)."""
    made = {}

    def make(attn):
        if attn not in made:
            torch.manual_seed(len(made) + 1)
            model = kvlab.nn.Transformer.new(attn, **TINY_SHAPE)
            folder = tmp_path_factory.mktemp(attn.replace(":", "_").replace(",", "_"))
            kvlab.nn.save(model, folder)
            made[attn] = str(folder)
        return made[attn]

    return make
