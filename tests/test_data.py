"""The data helper: env var, cache, download, checksum, atomic writes (network always stubbed)."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from helpers import data
from helpers.data import DatasetError, load_tinyshakespeare, sha256_of, tinyshakespeare_path

GOOD = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
GOOD_SHA = sha256_of(GOOD)


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(data.PATH_ENV_VAR, raising=False)
    monkeypatch.delenv(data.CACHE_ENV_VAR, raising=False)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stub the download: serves GOOD and records each URL fetched."""
    calls: list[str] = []

    def fake_fetch(url: str, timeout: float) -> bytes:
        calls.append(url)
        return GOOD

    monkeypatch.setattr(data, "_fetch", fake_fetch)
    return calls


def offline(url: str, timeout: float) -> bytes:
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_cache_hit_does_not_download(tmp_path: Path, network: list[str]) -> None:
    (tmp_path / data.FILENAME).write_bytes(GOOD)
    assert load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA) == GOOD.decode()
    assert network == []


def test_env_var_wins_over_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: list[str]
) -> None:
    elsewhere = tmp_path / "my copy.txt"
    elsewhere.write_bytes(GOOD)
    monkeypatch.setenv(data.PATH_ENV_VAR, str(elsewhere))
    assert tinyshakespeare_path(tmp_path / "cache", expected_sha256=GOOD_SHA) == elsewhere
    assert network == []


def test_env_var_pointing_nowhere_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(data.PATH_ENV_VAR, str(tmp_path / "missing.txt"))
    with pytest.raises(
        DatasetError, match=r"TINYSHAKESPEARE_PATH is set to .*missing\.txt, but no such file"
    ):
        load_tinyshakespeare(tmp_path)


def test_cache_dir_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: list[str]
) -> None:
    monkeypatch.setenv(data.CACHE_ENV_VAR, str(tmp_path))
    assert tinyshakespeare_path(expected_sha256=GOOD_SHA) == tmp_path / data.FILENAME


def test_download_fills_the_cache(tmp_path: Path, network: list[str]) -> None:
    assert load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA) == GOOD.decode()
    assert network == [data.URL]
    assert (tmp_path / data.FILENAME).read_bytes() == GOOD
    assert load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA) == GOOD.decode()
    assert network == [data.URL], "the second call must read the cache"


def test_checksum_mismatch_on_download_saves_nothing(tmp_path: Path, network: list[str]) -> None:
    with pytest.raises(DatasetError, match="SHA-256 .* expected 0{64}; it was not saved"):
        load_tinyshakespeare(tmp_path, expected_sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_cache_is_never_used(tmp_path: Path, network: list[str]) -> None:
    (tmp_path / data.FILENAME).write_bytes(GOOD[:-5])  # a truncated copy
    with pytest.raises(DatasetError, match="corrupt or not Tiny Shakespeare.*TINYSHAKESPEARE_PATH"):
        load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA)


def test_corrupt_env_file_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"not shakespeare")
    monkeypatch.setenv(data.PATH_ENV_VAR, str(bad))
    with pytest.raises(DatasetError, match="from TINYSHAKESPEARE_PATH"):
        load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA)


def test_offline_error_names_the_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "_fetch", offline)
    with pytest.raises(DatasetError, match="Could not download.*set TINYSHAKESPEARE_PATH"):
        load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA)
    assert list(tmp_path.iterdir()) == []


def test_download_off_never_touches_the_network(tmp_path: Path, network: list[str]) -> None:
    with pytest.raises(DatasetError, match="downloading is off"):
        load_tinyshakespeare(tmp_path, download=False)
    assert network == []


def test_failed_write_leaves_no_partial_file(
    tmp_path: Path, network: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(data.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        load_tinyshakespeare(tmp_path, expected_sha256=GOOD_SHA)
    assert list(tmp_path.iterdir()) == [], "no temporary or partial file may remain"


def test_real_dataset_when_available() -> None:
    """The real file (CI copies it into the cache) has the published size."""
    try:
        path = tinyshakespeare_path(download=False)
    except DatasetError:
        pytest.skip("Tiny Shakespeare is not cached on this machine")
    assert len(path.read_text(encoding="utf-8")) == 1_115_394
