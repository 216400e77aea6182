"""kvlab from PyTorch: attention specs and their costs, the attention families as torch modules,
the fused and paged kernels as torch.ops.kvlab, and the C++ decode runtime.

    import kvlab
    spec = kvlab.AttentionSpec("gva:8,dr=16")            # against llama-3-8b by default
    spec.bytes_per_token, spec.streams, spec.params
    kvlab.cache_report(model="llama-3-8b", attn=["gqa:8", "gva:8,dr=16"], context=32768)
    attn = kvlab.nn.Attention("gva:2,dr=16", d_model=256, n_heads=8)   # a torch.nn.Module
    kvlab.Generator("runs/gva").generate("The ", max_tokens=32)
"""

import json as _json

# torch first: the extension's modules derive from torch's binding of torch::nn::Module, and its
# operators register with torch's dispatcher as it loads.
import torch as _torch

from . import _kvlab
from ._kvlab import Model, SpecError, set_threads

DEFAULT_MODEL = "llama-3-8b"  # kvlab cache's default model

__all__ = [
    "AttentionSpec",
    "Decoder",
    "Generator",
    "Model",
    "SpecError",
    "cache_report",
    "from_hf_config",
    "model",
    "presets",
    "set_threads",
]


def presets():
    """The names of kvlab's model presets (kvlab cache --model NAME)."""
    return list(_kvlab.presets())


def model(name=None, *, hf_config=None, **shape):
    """A model shape: a preset by name, a Hugging Face config.json, or the shape field by field
    (layers, d_model, heads, head_dim, mlp, vocab, max_context, mlp_kind, norm, bias, pos,
    rope_theta, tied), as kvlab's --model / --hf-config / shape flags take them."""
    arguments = dict(shape, model=name, hf_config=hf_config)
    if name is None and hf_config is None and not shape:
        arguments["model"] = DEFAULT_MODEL
    return _kvlab.resolve_model(arguments)


def from_hf_config(path):
    """The model a Hugging Face config.json (or the folder holding one) describes."""
    return _kvlab.from_hf_config(str(path))


def _as_model(value):
    if isinstance(value, Model):
        return value
    if isinstance(value, str):
        return model(value)
    raise TypeError(f"model: expected a preset name or a kvlab.Model, got {type(value).__name__}")


class AttentionSpec(_kvlab.AttentionSpec):
    """An attention variant parsed against a model: canonical text, family, the cached streams,
    bytes per token (one layer, scales included), parameters and multiply-adds.

    Raises ValueError naming the field for a spec the model cannot take."""

    def __init__(self, text, model=DEFAULT_MODEL, cache_dtype="bf16"):
        super().__init__(text, _as_model(model), cache_dtype)


def cache_report(model=None, attn=None, context=32768, dtype="bf16", batch=1, macs=False, *,
                 hf_config=None, **shape):
    """What `kvlab cache --format json` prints for the same options: one row per attention
    variant (the model's own when attn is None), computed by the same code."""
    if isinstance(attn, str):
        attn = [attn]
    arguments = dict(shape, model=model, hf_config=hf_config)
    if model is None and hf_config is None and not shape:
        arguments["model"] = DEFAULT_MODEL
    text = _kvlab.cache_report_json(arguments, list(attn or []), str(context), int(batch),
                                    dtype, bool(macs))
    return _json.loads(text)


class Generator:
    """`kvlab generate` from Python: the checkpoint (a kvlab checkpoint or run folder, or a
    Hugging Face folder) and its tokenizer loaded once; generate() continues prompts exactly as
    `kvlab generate` does with the same options. Defaults are the command's."""

    def __init__(self, checkpoint, cache_dtype="f32", weight_dtype="auto", rope_dtype="",
                 precision="f32", use_cache=True, threads=0):
        self.checkpoint = str(checkpoint)
        self._weight_dtype = weight_dtype
        self._cache_dtype = cache_dtype
        self._precision = precision
        self._threads = threads
        self._text = _kvlab.TextGenerator(self.checkpoint, cache_dtype, weight_dtype, rope_dtype,
                                          precision, use_cache, threads)

    def generate(self, prompt, max_tokens=64, temperature=0.0, top_p=1.0, top_k=0, seed=0):
        """The generated text (the prompt not included); invalid UTF-8 becomes U+FFFD."""
        text, _ = self._text.generate(prompt, max_tokens, temperature, top_k, top_p, seed)
        return text.decode("utf-8", errors="replace")

    def generate_tokens(self, prompt, max_tokens=64, temperature=0.0, top_p=1.0, top_k=0, seed=0):
        """The generated token ids."""
        _, tokens = self._text.generate(prompt, max_tokens, temperature, top_k, top_p, seed)
        return list(tokens)

    def encode(self, text):
        return list(self._text.encode(text))

    def decode(self, ids):
        return self._text.decode(list(ids)).decode("utf-8", errors="replace")

    def decoder(self, max_tokens=2048, max_seqs=8):
        """A Decoder over the same checkpoint and settings, for loops of one's own."""
        return Decoder(self.checkpoint, self._cache_dtype, self._weight_dtype, max_tokens,
                       max_seqs, self._threads, self._precision)


class Decoder(_kvlab.DecodeSession):
    """The decode runtime's paged cache and batched steps: add_sequence() -> id,
    feed(seq, tokens) -> logits of the last token [V], step(seqs, tokens) -> logits [n, V] (one
    token for each sequence, read from the cache), free_sequence(seq). precision: the attention
    arithmetic, as `kvlab generate --attn-precision` (f32, bf16, int8 or auto: int8 on q8_0/q4_0
    caches, whose f32 decode is the scalar reference; bf16 on bf16 caches where the CPU has it);
    the .precision property says which runs."""

    def __init__(self, checkpoint, cache_dtype="f32", weight_dtype="auto", max_tokens=2048,
                 max_seqs=8, threads=0, precision="f32"):
        super().__init__(str(checkpoint), cache_dtype, weight_dtype, max_tokens, max_seqs, threads,
                         precision)


from . import nn, ops  # noqa: E402  (after _kvlab and torch)
