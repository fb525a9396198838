"""Pick the fastest available PyTorch device.

Defined in "Check your setup", the page before chapter 1.
"""

from __future__ import annotations

import torch


def pick_device() -> str:
    """Return ``"cuda"`` if a CUDA GPU is available, else ``"mps"`` (Apple silicon), else ``"cpu"``.

    Every chapter runs on the CPU. The training chapter does too: its model of 0.2 M parameters
    gives a GPU little work per step, so a GPU need not be faster there.
    """
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"
