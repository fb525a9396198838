"""Load OpenAI's GPT-2 weights, as Hugging Face publishes them, into the book's GPT.

Defined in the chapter "From characters to GPT-2".

The book's :class:`helpers.model.GPT` computes GPT-2's network once its configuration asks for
GPT-2's details (biases, the tanh-approximate GELU, LayerNorm's ``eps`` 1e-5, learned positions,
the tied embedding and LM head). What differs is only how the weights are stored:

* names: Hugging Face's ``transformer.wte`` / ``wpe`` / ``h.{i}`` are the book's ``tok_emb`` /
  ``pos_emb`` / ``blocks.{i}`` (the names inside a block are GPT-2's own);
* orientation: GPT-2's ``Conv1D`` layers compute ``x @ W + b`` with ``W`` of shape
  ``(in, out)``, while ``nn.Linear`` computes ``x @ W.T + b`` with ``W`` of shape ``(out, in)``,
  so the four matrices of every block (``c_attn``, ``attn.c_proj``, ``c_fc``, ``mlp.c_proj``)
  are transposed;
* extras: older checkpoints also store each layer's causal mask (``attn.bias``,
  ``attn.masked_bias``), which the book's model builds itself, and the LM head's matrix, which
  is the token embedding's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from helpers.model import GPT, GPTConfig

#: GPT-2's activation names in a Hugging Face ``config.json`` that are the tanh-approximate GELU.
_TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
#: the matrices that GPT-2 stores as ``Conv1D`` ``(in, out)`` weights
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_BLOCK_PARAMS = (
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
)


def config_from_hf(hf_config: Mapping[str, Any] | Any) -> GPTConfig:
    """The :class:`GPTConfig` of a Hugging Face GPT-2 configuration (a ``GPT2Config`` or the
    dict of its ``config.json``).

    Raises:
        ValueError: the configuration is not GPT-2's, or uses an option the book's model does
            not have (another activation, a hidden layer other than ``4 n_embd``, attention
            scores scaled by the layer index or not scaled at all, untied embeddings).
    """
    c = dict(hf_config) if isinstance(hf_config, Mapping) else hf_config.to_dict()
    if c.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"expected a GPT-2 configuration, got model_type={c['model_type']!r}")
    act = c.get("activation_function", "gelu_new")
    if act not in _TANH_GELU:
        raise ValueError(f"activation_function={act!r}: the book's GPT-2 uses the tanh GELU")
    if c.get("n_inner") not in (None, 4 * c["n_embd"]):
        raise ValueError(f"n_inner={c['n_inner']}: the book's MLP has 4 * n_embd hidden units")
    unsupported = {
        "scale_attn_weights": (True, "scores are always divided by sqrt(head_size)"),
        "scale_attn_by_inverse_layer_idx": (False, "scores are not scaled by the layer index"),
        "tie_word_embeddings": (True, "the LM head is always the token embedding"),
        "add_cross_attention": (False, "there is no cross-attention"),
    }
    for key, (ok, why) in unsupported.items():
        if c.get(key, ok) != ok:
            raise ValueError(f"{key}={c[key]!r} is not supported: in the book's GPT {why}")
    return GPTConfig(
        vocab_size=c["vocab_size"],
        block_size=c["n_positions"],
        n_layer=c["n_layer"],
        n_head=c["n_head"],
        n_embd=c["n_embd"],
        dropout=0.0,
        bias=True,
        norm_eps=c.get("layer_norm_epsilon", 1e-5),
        mlp="gelu_tanh",
    )


def convert_state_dict(
    hf_state: Mapping[str, torch.Tensor], config: GPTConfig
) -> dict[str, torch.Tensor]:
    """Rename and transpose a Hugging Face GPT-2 state dict (``GPT2LMHeadModel``'s, with the
    ``transformer.`` prefix, or ``GPT2Model``'s, without) into the book's :class:`GPT` names.

    Raises:
        ValueError: a weight is missing, has the wrong shape, or is left over; or the checkpoint
            stores an LM head that differs from its token embedding.
    """
    state = {k.removeprefix("transformer."): v for k, v in hf_state.items()}
    head = state.pop("lm_head.weight", None)
    for key in [k for k in state if k.endswith((".attn.bias", ".attn.masked_bias"))]:
        if state[key].dim() != 1 or key.endswith("masked_bias"):  # the stored causal masks
            del state[key]
    out: dict[str, torch.Tensor] = {}

    def take(hf_key: str, book_key: str, transpose: bool = False) -> None:
        if hf_key not in state:
            raise ValueError(f"the checkpoint has no {hf_key!r}")
        w = state.pop(hf_key)
        out[book_key] = w.t().contiguous() if transpose else w

    take("wte.weight", "tok_emb.weight")
    take("wpe.weight", "pos_emb.weight")
    for i in range(config.n_layer):
        for name in _BLOCK_PARAMS:
            take(f"h.{i}.{name}", f"blocks.{i}.{name}", transpose=name in _CONV1D)
    take("ln_f.weight", "ln_f.weight")
    take("ln_f.bias", "ln_f.bias")
    if state:
        raise ValueError(f"weights the book's GPT has no place for: {sorted(state)[:5]}")
    if head is not None and not torch.equal(head, out["tok_emb.weight"]):
        raise ValueError("the checkpoint's lm_head.weight is not its token embedding (wte)")
    out["lm_head.weight"] = out["tok_emb.weight"]
    shapes = _shapes(config)
    for key, w in out.items():
        if tuple(w.shape) != tuple(shapes[key]):
            raise ValueError(f"{key}: shape {tuple(w.shape)}, the model expects {shapes[key]}")
    return out


def _shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """The shapes of the book's GPT's weights, without building the model."""
    C, V, H = config.n_embd, config.vocab_size, 4 * config.n_embd
    per_block = {
        "ln_1.weight": (C,),
        "ln_1.bias": (C,),
        "attn.c_attn.weight": (3 * C, C),
        "attn.c_attn.bias": (3 * C,),
        "attn.c_proj.weight": (C, C),
        "attn.c_proj.bias": (C,),
        "ln_2.weight": (C,),
        "ln_2.bias": (C,),
        "mlp.c_fc.weight": (H, C),
        "mlp.c_fc.bias": (H,),
        "mlp.c_proj.weight": (C, H),
        "mlp.c_proj.bias": (C,),
    }
    shapes = {"tok_emb.weight": (V, C), "pos_emb.weight": (config.block_size, C)}
    for i in range(config.n_layer):
        shapes |= {f"blocks.{i}.{k}": s for k, s in per_block.items()}
    return shapes | {"ln_f.weight": (C,), "ln_f.bias": (C,), "lm_head.weight": (V, C)}


def gpt_from_hf_state(hf_state: Mapping[str, torch.Tensor], hf_config: Any) -> GPT:
    """The book's :class:`GPT` holding a Hugging Face GPT-2 state dict, in evaluation mode."""
    config = config_from_hf(hf_config)
    state = convert_state_dict(hf_state, config)
    model = GPT(config)
    model.load_state_dict(state)
    return model.eval()


def load_gpt2(path: str | os.PathLike[str]) -> GPT:
    """Load a directory written by ``save_pretrained`` (``config.json`` and
    ``model.safetensors``) into the book's :class:`GPT`.

    Raises:
        FileNotFoundError: the directory lacks ``config.json`` or ``model.safetensors``.
        ValueError: the checkpoint is not a GPT-2 the book's model can hold.
    """
    from safetensors.torch import load_file

    path = Path(path)
    for name in ("config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} has no {name} (write one with save_pretrained)")
    hf_config = json.loads((path / "config.json").read_text())
    return gpt_from_hf_state(load_file(path / "model.safetensors"), hf_config)


def download_gpt2(name: str = "gpt2") -> Path:
    """Download ``config.json`` and ``model.safetensors`` of a GPT-2 model from the Hugging Face
    Hub (cached; needs a network the first time) and return the directory, for
    :func:`load_gpt2`."""
    from huggingface_hub import snapshot_download

    folder = snapshot_download(name, allow_patterns=["config.json", "model.safetensors"])
    return Path(folder)
