"""Print a constraints file (exact versions of every package) for the environment given.

Usage: python tools/write_constraints.py VENV > constraints.txt   (what `make lock` runs)

PyTorch is written without its local label (``torch==2.13.0``, not ``2.13.0+cpu``), which both
the Linux CPU build that `make install` puts in first and the macOS wheel satisfy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEADER = """\
# Exact versions of every package the book installs, used by `make book` and `make test` as
#   pip install -r requirements.txt -c constraints.txt        (reading: make book, make lab)
#   pip install -r requirements-test.txt -c constraints.txt   (the test toolchain: make test)
# so that a new release of a dependency (Sphinx, MyST, the theme...) cannot break the strict
# build overnight. Refresh with `make lock`, review the diff, run `make test`, commit.
"""


def main(venv: str) -> None:
    python = Path(venv) / "bin" / "python"
    frozen = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    lines = []
    for line in sorted(frozen, key=str.lower):
        name = line.split("==")[0].strip().lower()
        if not line or line.startswith("#") or name == "attention-from-scratch-helpers":
            continue
        if name == "torch":  # the CPU build's local label (+cpu) would not exist on macOS
            line = line.split("+")[0]
        lines.append(line)
    sys.stdout.write(HEADER + "\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/write_constraints.py VENV")
    main(sys.argv[1])
