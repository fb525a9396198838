"""Saving a trained GPT with its vocabulary in one file, and loading it back.

Defined in chapter 8, "Building and training a GPT".
"""

from __future__ import annotations

import pickle
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from helpers.tokenizer import CharTokenizer

if TYPE_CHECKING:
    from helpers.model import GPT


def save_checkpoint(path: str | Path, model: GPT, tokenizer: CharTokenizer) -> None:
    """Save the weights, the configuration and the vocabulary: everything needed to sample."""
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model expects "
            f"{model.config.vocab_size}"
        )
    torch.save(
        {
            "config": asdict(model.config),
            "state_dict": model.state_dict(),
            "chars": tokenizer.chars,
        },
        path,
    )


def load_checkpoint(
    path: str | Path, *, map_location: str | torch.device = "cpu"
) -> tuple[GPT, CharTokenizer]:
    """Rebuild a model and its tokenizer from :func:`save_checkpoint`'s file."""
    from helpers.model import GPT, GPTConfig  # helpers.model imports this module

    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
        model = GPT(GPTConfig(**ckpt["config"]))
        model.load_state_dict(ckpt["state_dict"])
        tokenizer = CharTokenizer(ckpt["chars"])
    except FileNotFoundError:
        raise
    except (
        KeyError,
        TypeError,
        ValueError,
        RuntimeError,
        EOFError,
        OSError,
        pickle.UnpicklingError,
    ) as err:
        raise ValueError(
            f"{path} is not a checkpoint written by save_checkpoint ({type(err).__name__}: {err})"
        ) from err
    return model, tokenizer
