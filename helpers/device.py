"""Pick the fastest available PyTorch device.

Defined in "Check your setup", the page before chapter 1.
"""

from __future__ import annotations

import torch


def pick_device() -> str:
    """Return ``"cuda"`` if a CUDA GPU is available, else ``"mps"`` (Apple silicon), else ``"cpu"``.

    Every chapter runs on the CPU; a GPU only makes the training chapter faster.
    """
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"
