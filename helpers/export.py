"""Export a trained GPT to one small file that a web page and Python can both load.

Defined in chapter 8, "Building and training a GPT".

The file is JavaScript: one statement that assigns the model (configuration, vocabulary and
weights) to the global ``AFS_GPT_MODEL``. A page includes it with a ``<script>`` tag, which works
from ``file://`` with no network and no server (a page opened from disk cannot ``fetch()`` a local
JSON file). The value assigned is plain JSON, so :func:`load_gpt` reads it back into a
:class:`helpers.model.GPT`: the same file is a pretrained checkpoint a learner loads in seconds.

Weights are stored as little-endian float16 (or float32), concatenated in ``state_dict`` order and
base64-encoded; the tied LM head (``lm_head.weight`` is ``tok_emb.weight``) is stored once. A
SHA-256 of the raw bytes lets :func:`load_gpt` refuse a truncated or edited file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import urllib.error
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from helpers import raw_file_url
from helpers.data import _fetch, default_cache_dir
from helpers.model import GPT, SIZE_FIELDS, GPTConfig
from helpers.tokenizer import CharTokenizer

FORMAT = "attention-from-scratch-gpt"
VERSION = 1
GLOBAL_NAME = "AFS_GPT_MODEL"
_PREFIX = f"globalThis.{GLOBAL_NAME} = "
_DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4")}
# The LM head shares the token embedding's matrix (weight tying): stored once, under this name.
_TIED = {"lm_head.weight": "tok_emb.weight"}
# The configuration fields the file stores. The explorer page implements chapter 8's
# architecture (learned positions, LayerNorm, GELU MLP, no QK-norm), so only models with
# GPTConfig's default architecture are exported; their size is all that varies.
_CONFIG_FIELDS = SIZE_FIELDS
# The trained model the book ships (chapter 8 writes it with `make model`), inside a checkout and
# on the web, for a notebook that runs without the book's files (Colab, a pip install).
SHIPPED_NAME = "gpt_shakespeare.js"
SHIPPED_PATH = Path("book") / "explorer" / SHIPPED_NAME
SHIPPED_URL = raw_file_url(SHIPPED_PATH.as_posix())
_PACKAGE_DIR = Path(__file__).resolve().parent


def export_gpt(
    model: GPT,
    tokenizer: CharTokenizer,
    path: str | Path,
    *,
    dtype: str = "float16",
    description: str = "",
) -> Path:
    """Write ``model``'s configuration, vocabulary and weights to the JavaScript file ``path``.

    The file holds one statement, ``globalThis.AFS_GPT_MODEL = {...};``, whose value is
    :func:`gpt_payload`'s JSON.

    Args:
        model: the GPT to export (its weights are copied to the CPU; the model is not changed).
        tokenizer: its character tokenizer (the vocabulary must match ``model.config.vocab_size``).
        path: the file to write, conventionally ending in ``.js``.
        dtype: ``"float16"`` (default; about 0.55 MB for the book's 0.2 M-parameter model) or
            ``"float32"`` (exact, twice the size).
        description: a line of text kept in the file (for example how the model was trained).

    Returns:
        The path written.

    Raises:
        ValueError: on an unknown ``dtype``, a tokenizer that does not match the model, a model
            whose LM head is not tied to its token embedding, a model whose architecture is not
            chapter 8's (other positions, norm, MLP or QK-norm than ``GPTConfig``'s defaults),
            or a weight that float16 cannot hold (larger than 65504 in magnitude, or not finite).
    """
    payload = gpt_payload(model, tokenizer, dtype=dtype, description=description)
    text = (
        "// A character-level GPT exported by helpers.export.export_gpt (Attention from Scratch).\n"
        "// Load it in a page with <script src=...>, or in Python with helpers.export.load_gpt.\n"
        + _PREFIX
        + json.dumps(payload, ensure_ascii=True, separators=(",", ":"))
        + ";\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def gpt_payload(
    model: GPT, tokenizer: CharTokenizer, *, dtype: str = "float16", description: str = ""
) -> dict:
    """The JSON-ready object :func:`export_gpt` writes: format, configuration, vocabulary and
    base64-encoded weights (arguments and errors as for :func:`export_gpt`)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    if not isinstance(model, GPT):
        raise ValueError(f"export_gpt exports a helpers.model.GPT, got {type(model).__name__}")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model expects "
            f"{model.config.vocab_size}"
        )
    if model.lm_head.weight is not model.tok_emb.weight:
        raise ValueError("the model's lm_head.weight is not tied to tok_emb.weight")
    config = asdict(model.config)
    default = asdict(GPTConfig())
    other = {k: v for k, v in config.items() if k not in _CONFIG_FIELDS and v != default[k]}
    if other:
        raise ValueError(
            f"only chapter 8's architecture can be exported (the explorer implements it); "
            f"this model sets {other}"
        )
    np_dtype = _DTYPES[dtype]
    tensors: list[dict] = []
    chunks: list[bytes] = []
    offset = 0
    for name, tensor in model.state_dict().items():
        if name in _TIED:
            continue
        values = tensor.detach().to("cpu", torch.float32).numpy()
        limit = float(np.finfo(np_dtype).max)
        if not np.isfinite(values).all() or np.abs(values).max(initial=0.0) > limit:
            raise ValueError(
                f"{name} has values that {dtype} cannot hold (largest magnitude "
                f"{float(np.abs(values).max()):.3g}); export with dtype='float32'"
            )
        stored = values.astype(np_dtype)
        raw = stored.tobytes()
        tensors.append({"name": name, "shape": list(values.shape), "offset": offset})
        chunks.append(raw)
        offset += stored.size
    data = b"".join(chunks)
    return {
        "format": FORMAT,
        "version": VERSION,
        "description": description,
        "config": {k: config[k] for k in _CONFIG_FIELDS},
        "chars": "".join(tokenizer.chars),
        "dtype": dtype,
        "tied": _TIED,
        "tensors": tensors,
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode("ascii"),
    }


def read_export(path: str | Path) -> dict:
    """The JSON object stored in an exported file (configuration, vocabulary, encoded weights).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not one :func:`export_gpt` wrote.
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    start = text.find(_PREFIX)
    if start < 0:
        raise ValueError(f"{path} is not a file written by export_gpt (no {GLOBAL_NAME} found)")
    body = text[start + len(_PREFIX) :].rstrip().removesuffix(";")
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is corrupt: its model JSON does not parse ({err})") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a file written by export_gpt (format is not {FORMAT!r})")
    if payload.get("version") != VERSION:
        raise ValueError(
            f"{path} has format version {payload.get('version')!r}; this helper reads {VERSION}"
        )
    return payload


def load_gpt(path: str | Path) -> tuple[GPT, CharTokenizer]:
    """Rebuild the model and tokenizer that :func:`export_gpt` wrote to ``path``.

    The model is returned in evaluation mode, in float32, on the CPU. Its weights equal the
    exported ones up to the storage precision (float16 keeps 11 significant bits: a relative
    rounding error of at most 2**-11, about 5e-4).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not an export, or is truncated or corrupt (checksum, shapes,
            configuration or vocabulary do not match).
    """
    payload = read_export(path)
    try:
        config = GPTConfig(**payload["config"])
        tokenizer = CharTokenizer(list(payload["chars"]))
        np_dtype = _DTYPES[payload["dtype"]]
        data = base64.b64decode(payload["data"], validate=True)
        if hashlib.sha256(data).hexdigest() != payload["sha256"]:
            raise ValueError("the weights do not match their SHA-256 checksum")
        flat = np.frombuffer(data, dtype=np_dtype).astype(np.float32)
        model = GPT(config)
        expected = {k: v for k, v in model.state_dict().items() if k not in payload["tied"]}
        state: dict[str, torch.Tensor] = {}
        for entry in payload["tensors"]:
            name, shape, offset = entry["name"], tuple(entry["shape"]), entry["offset"]
            n = int(np.prod(shape, dtype=np.int64))
            if name not in expected or tuple(expected[name].shape) != shape:
                raise ValueError(f"tensor {name} {shape} does not fit the configured model")
            if offset < 0 or offset + n > flat.size:
                raise ValueError(f"tensor {name} lies outside the stored weights")
            state[name] = torch.from_numpy(flat[offset : offset + n].reshape(shape).copy())
        missing = sorted(set(expected) - set(state))
        if missing:
            raise ValueError(f"weights missing for {missing}")
        for tied, source in payload["tied"].items():
            state[tied] = state[source]
        model.load_state_dict(state)
    except ValueError as err:
        raise ValueError(f"{path} is corrupt or not a GPT export: {err}") from err
    except (KeyError, TypeError, AttributeError, RuntimeError) as err:
        raise ValueError(
            f"{path} is corrupt or not a GPT export ({type(err).__name__}: {err})"
        ) from err
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{path} is corrupt: {tokenizer.vocab_size} characters for vocab_size "
            f"{config.vocab_size}"
        )
    model.eval()
    return model, tokenizer


def shipped_checkpoint(
    start: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    download: bool = True,
    url: str = SHIPPED_URL,
    timeout: float = 60.0,
) -> Path:
    """The path of the book's trained model, ``book/explorer/gpt_shakespeare.js``.

    Pass it to :func:`load_gpt`. The file of the checkout that holds ``start`` (default: the
    working directory) or this package wins. Outside a checkout (on Colab, or with the package
    installed by pip) it is a copy in ``cache_dir/shipped/`` (default
    :func:`helpers.data.default_cache_dir`), downloaded from ``url`` on the first call and kept
    only if :func:`load_gpt` reads it. A copy that chapter 8's own training writes to the cache
    folder (``cache_dir/gpt_shakespeare.js``) is never taken for the shipped model.

    Raises:
        ValueError: ``timeout`` is not positive, or the download is not a valid export (it is
            not saved).
        FileNotFoundError: the file is in no checkout and no cache, and ``download`` is off.
        OSError: the download failed (for example, no network).
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    places = [Path(start) if start is not None else Path.cwd(), _PACKAGE_DIR]
    for place in places:
        for folder in [place.resolve(), *place.resolve().parents]:
            candidate = folder / SHIPPED_PATH
            if candidate.is_file():
                return candidate
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    copy = cache / "shipped" / SHIPPED_NAME
    if copy.is_file():
        return copy
    if not download:
        raise FileNotFoundError(
            f"The book's trained model is in no checkout around {places[0]} and not at {copy}, "
            f"and downloading is off; download {url} to {copy}."
        )
    try:
        data = _fetch(url, timeout)
    except (urllib.error.URLError, OSError) as err:
        raise OSError(
            f"Could not download the book's trained model from {url} ({err}). If this machine "
            f"is offline, download the file elsewhere and copy it to {copy}."
        ) from err
    copy.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{SHIPPED_NAME}.", suffix=".part", dir=copy.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
        load_gpt(tmp_name)  # refuses a truncated or corrupt download (checksum, shapes)
        os.replace(tmp_name, copy)
    except ValueError as err:
        raise ValueError(f"The download from {url} is not a valid model file: {err}") from err
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return copy
