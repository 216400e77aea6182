"""kvlab.Generator against `kvlab generate` (the same text, byte for byte, greedy and sampled, per
cache dtype), and kvlab.Decoder's batched steps against one sequence at a time."""

import pytest
import torch

import kvlab
from conftest import run_kvlab


@pytest.mark.parametrize("attn, cache_dtype", [("gqa:2", "f32"), ("gva:2,dr=16", "bf16"),
                                               ("mla:dc=32,dr=8", "q8_0"), ("gqa:2", "bf16")])
@pytest.mark.parametrize("temperature, top_p, seed", [(0.0, 1.0, 0), (0.9, 0.8, 5)])
def test_generate_is_kvlab_generate(kvlab_bin, tiny_checkpoints, attn, cache_dtype, temperature,
                                    top_p, seed):
    folder = tiny_checkpoints(attn)
    generator = kvlab.Generator(folder, cache_dtype=cache_dtype, weight_dtype="bf16", threads=1)
    text, tokens = generator._text.generate("The quick brown fox", 24, temperature, 0, top_p, seed)
    cli = run_kvlab(kvlab_bin, "generate", "--checkpoint", folder, "--prompt",
                    "The quick brown fox", "--max-tokens", "24", "--temperature", str(temperature),
                    "--top-p", str(top_p), "--seed", str(seed), "--cache-dtype", cache_dtype,
                    "--weight-dtype", "bf16", "--threads", "1")
    assert len(tokens) == 24
    assert cli == text + b"\n"
    assert generator.generate("The quick brown fox", 24, temperature, top_p, seed=seed) == \
        text.decode("utf-8", errors="replace")


def test_decoder_steps_are_the_generators_tokens(tiny_checkpoints):
    folder = tiny_checkpoints("gva:2,dr=16")
    generator = kvlab.Generator(folder, cache_dtype="bf16", weight_dtype="f32", threads=1)
    prompts = ["In the beginning", "And God said", "x"]
    expected = [generator.generate_tokens(p, max_tokens=12) for p in prompts]
    decoder = generator.decoder(max_tokens=64, max_seqs=4)
    assert decoder.vocab_size == 256
    seqs = [decoder.add_sequence() for _ in prompts]
    last = [int(decoder.feed(s, generator.encode(p)).argmax()) for s, p in zip(seqs, prompts)]
    got = [[t] for t in last]
    for _ in range(11):  # the three sequences stepped together, one token each
        logits = decoder.step(seqs, last)
        assert logits.shape == (3, 256) and torch.isfinite(logits).all()
        last = [int(row.argmax()) for row in logits]
        for g, t in zip(got, last):
            g.append(t)
    assert got == expected
    assert decoder.length(seqs[0]) == len(generator.encode(prompts[0])) + 11
    decoder.free_sequence(seqs[1])
    with pytest.raises(ValueError, match="seq"):
        decoder.step([seqs[1]], [5])


def test_decoder_precision_is_generates(tiny_checkpoints):
    """Decoder's precision as kvlab generate's --attn-precision: auto runs int8 on a q8_0 cache
    (its only SIMD kernel), and the decoder then steps the tokens Generator(precision="auto")
    generates; f32 stays the default; a precision the cache cannot take is refused."""
    folder = tiny_checkpoints("gqa:2")
    generator = kvlab.Generator(folder, cache_dtype="q8_0", weight_dtype="f32", precision="auto",
                                threads=1)
    decoder = generator.decoder(max_tokens=64, max_seqs=2)
    assert decoder.precision == "int8"
    prompt = generator.encode("In the beginning")
    expected = generator.generate_tokens("In the beginning", max_tokens=10)
    seq = decoder.add_sequence()
    got = [int(decoder.feed(seq, prompt).argmax())]
    for _ in range(9):
        got.append(int(decoder.step([seq], [got[-1]])[0].argmax()))
    assert got == expected
    assert kvlab.Decoder(folder, cache_dtype="q8_0", threads=1).precision == "f32"
    with pytest.raises(ValueError, match="precision"):
        kvlab.Decoder(folder, cache_dtype="bf16", precision="int8")
    with pytest.raises(ValueError, match="precision"):
        kvlab.Decoder(folder, cache_dtype="f32", precision="bf16")
    with pytest.raises(ValueError, match="precision"):
        kvlab.Decoder(folder, precision="f64")


def test_bad_input_names_the_field(tiny_checkpoints, tmp_path):
    folder = tiny_checkpoints("gqa:2")
    generator = kvlab.Generator(folder)
    with pytest.raises(ValueError, match="prompt"):
        generator.generate("")
    with pytest.raises(ValueError, match="temperature"):
        generator.generate("a", temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        generator.generate("a", top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        generator.generate("a", max_tokens=-1)
    with pytest.raises(ValueError, match="cache_dtype"):
        kvlab.Generator(folder, cache_dtype="f12")
    with pytest.raises(ValueError, match="weight"):
        kvlab.Generator(folder, weight_dtype="fp8")
    with pytest.raises(ValueError, match="checkpoint"):
        kvlab.Generator(tmp_path / "missing")
    decoder = generator.decoder(max_tokens=32, max_seqs=2)
    seq = decoder.add_sequence()
    with pytest.raises(ValueError, match="tokens"):
        decoder.feed(seq, [300])
    with pytest.raises(ValueError, match="feed"):
        decoder.step([seq], [1])  # nothing fed yet
    decoder.feed(seq, [1, 2, 3])
    with pytest.raises(ValueError, match="twice"):
        decoder.step([seq, seq], [1, 2])
    with pytest.raises(ValueError, match="one each"):
        decoder.step([seq], [1, 2])
    decoder.add_sequence()
    with pytest.raises(ValueError, match="max_seqs"):
        decoder.add_sequence()
