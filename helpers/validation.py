"""Input checks shared by every helper module, so that bad input fails early with a clear message.

Used throughout the book's ``helpers`` (no chapter teaches it).
"""

from __future__ import annotations

import numbers


def check_positive_int(name: str, value: object, *, what: str = "") -> int:
    """Return ``value`` as an ``int`` if it is a positive integer, else raise ``ValueError``.

    ``numbers.Integral`` admits NumPy integers such as ``np.int64``; ``bool`` is an ``int`` in
    Python but never a size, and floats such as ``8.0`` are refused (they would fail later, deep
    inside PyTorch, with a less helpful message).

    Args:
        name: the argument's name, used in the message.
        value: the value to check.
        what: optional words on what the number counts, e.g. ``"the number of tokens"``.

    Raises:
        ValueError: if ``value`` is not a positive integer.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        meaning = f" ({what})" if what else ""
        raise ValueError(f"{name} must be a positive int{meaning}, got {value!r}")
    return int(value)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` as an ``int`` if it is an integer ``>= 0``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)
