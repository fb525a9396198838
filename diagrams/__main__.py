"""Draw every diagram of the book into book/figures/ (what `make diagrams` runs).

Usage: python -m diagrams [OUTPUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from diagrams import DIAGRAMS, write_all


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "book" / "figures"
    for path in write_all(out):
        print(path)
    print(f"{len(DIAGRAMS)} diagrams written to {out}")


if __name__ == "__main__":
    main()
