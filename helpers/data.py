"""Find, download and verify the Tiny Shakespeare text.

Defined in "Check your setup", the page before chapter 1; used from chapter 7 ("Tiny Shakespeare
and a bigram model") on.

Lookup order:

1. the file named by the environment variable ``TINYSHAKESPEARE_PATH``;
2. the cache file ``<cache dir>/tinyshakespeare.txt``, where the cache dir is
   ``$ATTENTION_CACHE_DIR`` or ``~/.cache/attention-from-scratch``;
3. a download from the public char-rnn URL into that cache.

Every file is checked against a known SHA-256 before it is used, and a download
is written to a temporary file that is renamed into place only once verified,
so a corrupt or partial file is never used and never left behind as the cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
PATH_ENV_VAR = "TINYSHAKESPEARE_PATH"
CACHE_ENV_VAR = "ATTENTION_CACHE_DIR"
FILENAME = "tinyshakespeare.txt"


class DatasetError(RuntimeError):
    """The dataset could not be found, downloaded or verified."""


def sha256_of(data: bytes) -> str:
    """Return the hex SHA-256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def default_cache_dir() -> Path:
    """The directory the dataset is cached in (``$ATTENTION_CACHE_DIR`` wins)."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "attention-from-scratch"


def _fetch(url: str, timeout: float) -> bytes:
    """Download ``url`` and return its bytes (replaced by a stub in the tests)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (fixed https URL)
        return response.read()


def _read_verified(path: Path, expected_sha256: str, origin: str) -> str:
    data = path.read_bytes()
    digest = sha256_of(data)
    if digest != expected_sha256:
        raise DatasetError(
            f"{path} ({origin}) has SHA-256 {digest}, expected {expected_sha256}: the file is "
            f"corrupt or not Tiny Shakespeare. Delete it, or point {PATH_ENV_VAR} at a good copy."
        )
    return data.decode("utf-8")


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)  # atomic on POSIX and Windows
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def tinyshakespeare_path(
    cache_dir: str | Path | None = None,
    *,
    url: str = URL,
    expected_sha256: str = SHA256,
    download: bool = True,
    timeout: float = 30.0,
) -> Path:
    """Return the path of a verified copy of Tiny Shakespeare, downloading it if needed.

    Args:
        cache_dir: where the cached copy lives; defaults to :func:`default_cache_dir`.
        url: where to download from when no local copy exists.
        expected_sha256: the digest every copy must have.
        download: if ``False``, never touch the network.
        timeout: seconds to wait for the download.

    Raises:
        DatasetError: the file named by ``TINYSHAKESPEARE_PATH`` is missing or corrupt,
            the cached copy is corrupt, or the download failed or did not verify.
    """
    env_path = os.environ.get(PATH_ENV_VAR)
    if env_path:
        path = Path(env_path).expanduser()
        if not path.is_file():
            raise DatasetError(f"{PATH_ENV_VAR} is set to {path}, but no such file exists.")
        _read_verified(path, expected_sha256, f"from {PATH_ENV_VAR}")
        return path

    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / FILENAME
    if cache.is_file():
        _read_verified(cache, expected_sha256, "cached copy")
        return cache

    if not download:
        raise DatasetError(
            f"Tiny Shakespeare is not at {cache} and downloading is off. "
            f"Set {PATH_ENV_VAR} to a local copy of {url}."
        )
    try:
        data = _fetch(url, timeout)
    except (urllib.error.URLError, OSError) as err:
        raise DatasetError(
            f"Could not download Tiny Shakespeare from {url} ({err}). If this machine is "
            f"offline, download the file elsewhere and set {PATH_ENV_VAR} to its path, "
            f"or copy it to {cache}."
        ) from err
    digest = sha256_of(data)
    if digest != expected_sha256:
        raise DatasetError(
            f"The download from {url} has SHA-256 {digest}, expected {expected_sha256}; "
            f"it was not saved. Try again later, or set {PATH_ENV_VAR} to a verified copy."
        )
    _write_atomically(cache, data)
    return cache


def load_tinyshakespeare(cache_dir: str | Path | None = None, **kwargs: object) -> str:
    """Return the Tiny Shakespeare text (1,115,394 characters), verified by SHA-256.

    Accepts the same arguments as :func:`tinyshakespeare_path`.
    """
    path = tinyshakespeare_path(cache_dir, **kwargs)  # type: ignore[arg-type]
    return path.read_bytes().decode("utf-8")
