"""kvlab's attention families and models as torch.nn.Module: the C++ modules themselves, wrapped
as leaf modules (CppModule), so parameters are shared tensors, autograd runs through the C++
forward (and kvlab's fused causal kernel), and any torch optimizer trains them. Parameter names
are those of kvlab's checkpoints."""

import torch

from . import _kvlab

__all__ = ["Attention", "CppModule", "Transformer", "load", "save", "save_state_dict"]


class CppModule(torch.nn.Module):
    """A kvlab C++ module as a leaf torch.nn.Module: its parameters (and buffers) are the C++
    module's own tensors under their dotted names, so the module nests in any PyTorch model,
    parameters(), state_dict() and load_state_dict() see them, and .to() / .double() change the
    tensors the C++ forward reads."""

    def __init__(self, cpp_module):
        super().__init__()
        self.cpp_module = cpp_module
        for name, tensor in cpp_module.named_parameters(True).items():
            self._parameters[name] = tensor
        for name, tensor in cpp_module.named_buffers(True).items():
            self._buffers[name] = tensor

    def _apply(self, fn):
        # in place, so the C++ module keeps reading the same tensors
        for tensor in list(self._parameters.values()) + list(self._buffers.values()):
            tensor.data = fn(tensor.data)
            if tensor.grad is not None:
                tensor.grad.data = fn(tensor.grad.data)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # torch's own splits a key at its first dot to find a child; these names keep their dots
        own = dict(self._parameters)
        own.update(self._buffers)
        for name, tensor in own.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if value.shape != tensor.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{tuple(value.shape)}, the module's is {tuple(tensor.shape)}")
                continue
            with torch.no_grad():
                tensor.copy_(value)
        if strict:
            unexpected_keys.extend(key for key in state_dict
                                   if key.startswith(prefix) and key[len(prefix):] not in own)

    def train(self, mode=True):
        super().train(mode)
        self.cpp_module.train(mode)
        return self

    def forward(self, x, start_pos=0):
        return self.cpp_module.forward(x, start_pos)


class Attention(CppModule):
    """One attention layer of any kvlab variant: forward(x [B, T, d_model], start_pos=0) ->
    [B, T, d_model], causal.

    spec: kvlab's spec text ("gqa:2", "gva:2,dr=16", "mla:dc=64,dr=16", "gla:hc=2,dc=32", ...);
    the model fields describe the layer's surroundings as kvlab's shape flags do (Llama style by
    default: RoPE, RMSNorm, no biases)."""

    def __init__(self, spec, d_model, n_heads, head_dim=None, *, pos="rope", rope_theta=10000.0,
                 norm="rmsnorm", bias="none", dtype=torch.float32):
        shape = dict(layers=1, d_model=d_model, heads=n_heads, head_dim=head_dim, pos=pos,
                     rope_theta=rope_theta, norm=norm, bias=bias, mlp_kind="swiglu")
        super().__init__(_kvlab.make_attention(spec, shape, dtype))


class Transformer(CppModule):
    """A whole kvlab model (embeddings, blocks, norm, head): forward(tokens [B, T]) -> logits
    [B, T, V] for a decoder."""

    @property
    def attn(self):
        """The model's attention spec, canonical."""
        return self.cpp_module.attn

    @property
    def config_json(self):
        return self.cpp_module.config_json

    @classmethod
    def new(cls, attn=None, *, model=None, **shape):
        """A new model initialised as `kvlab train` initialises one."""
        return cls(_kvlab.make_model(dict(shape, model=model), attn or ""))


def load(path):
    """A kvlab checkpoint (or run) folder, or a Hugging Face folder, as a Transformer (f32)."""
    return Transformer(_kvlab.load_model(str(path)))


def save(module, path):
    """Saves a kvlab Transformer as a checkpoint folder that kvlab's commands read."""
    _kvlab.save_checkpoint(module.cpp_module, str(path))


def save_state_dict(state, path, attn, *, model=None, **shape):
    """Saves a state dict named as kvlab's checkpoints name their tensors (Hugging Face's
    Llama names: model.embed_tokens.weight, model.layers.N.self_attn.*, ...) as a checkpoint of
    the given shape and attention. Every tensor must be there with its shape, and nothing else."""
    tensors = {name: t.detach().float().contiguous() for name, t in state.items()}
    _kvlab.save_model(tensors, dict(shape, model=model), attn, str(path))
