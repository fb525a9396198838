"""Helpers for Attention from Scratch."""

#: The book's repository. ``_config.yml`` (``repository.url``) names the same one; a test checks
#: that they agree. A notebook run without the book's files (Colab, a pip install) downloads the
#: shipped model and the benchmark results from its ``main`` branch (:func:`raw_file_url`).
REPOSITORY_URL = "https://github.com/attention-from-scratch/attention-from-scratch"


def raw_file_url(path: str) -> str:
    """The download URL of the file at ``path`` (relative to the repository's root, such as
    ``"bench/results.json"``) on the ``main`` branch of :data:`REPOSITORY_URL`."""
    prefix = "https://github.com/"
    if not REPOSITORY_URL.startswith(prefix):
        raise ValueError(f"REPOSITORY_URL must start with {prefix}, got {REPOSITORY_URL!r}")
    if not path or path.startswith("/"):
        raise ValueError(f"path must be relative to the repository's root, got {path!r}")
    owner_and_name = REPOSITORY_URL.removeprefix(prefix).rstrip("/")
    return f"https://raw.githubusercontent.com/{owner_and_name}/main/{path}"
