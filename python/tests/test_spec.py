"""The calculator: kvlab.AttentionSpec, kvlab.model, kvlab.cache_report against the arithmetic
written out here and against `kvlab cache --format json`."""

import json

import pytest

import kvlab
from conftest import run_kvlab

D, H, DH = 4096, 32, 128  # llama-3-8b


def test_gva_spec_on_llama_3_8b():
    spec = kvlab.AttentionSpec("gva:8,dr=16")
    assert spec.text == "gva:8,dr=16"
    assert spec.family == "gva"
    assert spec.decode_kernel == "one-stream"
    # one content stream of 8 value heads and one 16-wide rope key, bf16
    assert [(s["name"], s["heads"], s["width"]) for s in spec.streams] == [("c", 8, DH), ("kr", 1, 16)]
    assert spec.bytes_per_token == (8 * DH + 16) * 2


def test_gqa_parameters_and_macs_written_out():
    spec = kvlab.AttentionSpec("gqa:8")
    params = D * H * DH + 2 * D * 8 * DH + H * DH * D  # W_q, W_k, W_v, W_o
    assert spec.params == params
    assert spec.bytes_per_token == 2 * 8 * DH * 2
    macs = spec.decode_macs(1000)
    assert macs["projections"] == params
    assert macs["mixing"] == 2 * H * DH * 1000  # scores and weighted sums over 1000 positions
    assert macs["total"] == macs["projections"] + macs["mixing"]
    q8 = kvlab.AttentionSpec("gqa:8", cache_dtype="q8_0")
    assert q8.bytes_per_token == 2 * 8 * (DH // 32) * 34  # ggml blocks: 32 int8 + an f16 scale


def test_model_shapes():
    custom = kvlab.model(layers=2, d_model=64, heads=4)
    assert custom.shape["d_model"] == 64 and custom.shape["head_dim"] == 16
    assert kvlab.model().name == "llama-3-8b"
    assert "llama-3-8b" in kvlab.presets()
    spec = kvlab.AttentionSpec("mla:dc=32,dr=8", model=custom)
    assert spec.bytes_per_token == (32 + 8) * 2


def test_from_hf_config(tmp_path):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
              "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
              "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
              "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = kvlab.from_hf_config(tmp_path / "config.json")
    assert model.shape["layers"] == 3 and model.shape["d_model"] == 512
    assert model.shape["rope_theta"] == 500000.0
    assert model.attn == "gqa:2"
    assert kvlab.AttentionSpec("", model=model).text == "gqa:2"


@pytest.mark.parametrize("options", [
    dict(model="llama-3-8b", attn=["gqa:8", "gva:8,dr=16", "mla:dc=512,dr=64"], context=32768),
    dict(model="qwen2.5-7b", attn=None, context="8k", dtype="q8_0", batch=4, macs=True),
])
def test_cache_report_is_kvlab_cache_json(kvlab_bin, options):
    args = ["cache", "--format", "json", "--model", options["model"],
            "--context", str(options["context"])]
    for a in options.get("attn") or []:
        args += ["--attn", a]
    if "dtype" in options:
        args += ["--dtype", options["dtype"]]
    if "batch" in options:
        args += ["--batch", str(options["batch"])]
    if options.get("macs"):
        args += ["--macs"]
    cli = json.loads(run_kvlab(kvlab_bin, *args))
    assert kvlab.cache_report(**options) == cli


@pytest.mark.parametrize("call, field", [
    (lambda: kvlab.AttentionSpec("gqa:7"), "groups"),
    (lambda: kvlab.AttentionSpec("nope:2"), "attn"),
    (lambda: kvlab.AttentionSpec("gqa:8", cache_dtype="int3"), "cache_dtype"),
    (lambda: kvlab.model("no-such-model"), "model"),
    (lambda: kvlab.model(layers="two", d_model=64, heads=4), "layers"),
    (lambda: kvlab.model(layers=2, d_model=64, heads=4, colour=3), "colour"),
    (lambda: kvlab.cache_report(context="lots"), "context"),
    (lambda: kvlab.from_hf_config("/nonexistent/config.json"), "config"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError) as raised:
        call()
    assert field in str(raised.value)
