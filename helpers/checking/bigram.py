"""The exercise checkers of chapter 7: sampling a batch (``check_get_batch``) and the bigram
loss over all positions (``check_bigram_loss``).

Defined in chapter 7, "Tiny Shakespeare and a bigram model".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from helpers.checking._core import (
    CheckResult,
    _error_text,
    _expect_close,
    _expect_gradients,
    _Mismatch,
    _nums,
    _Property,
    _ReaderRaised,
    _run,
    _seed_global,
    _Session,
    _shape,
    _tensor_out,
)


def check_get_batch(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> CheckResult:
    """Check the reader's batch sampler (chapter 7, "Tiny Shakespeare and a bigram model").

    The reader writes ``fn(data, block_size, batch_size, generator)``: ``data`` is a 1-D tensor of
    token ids and ``generator`` a ``torch.Generator``; it returns ``(x, y)``, both
    ``(batch_size, block_size)`` with the dtype of ``data``: each row of ``x`` is a window of
    ``block_size`` consecutive tokens starting at a random position drawn with ``generator``, and
    ``y`` holds the next token for each of them (the same window, one position later in the data).

    Properties: shapes and dtype; every window, targets included, lies inside the data; ``y`` is
    the window shifted by one in the data; the same generator seed gives the same batch (whatever
    the global random state, which the function must leave alone); window starts cover every
    valid position, first and last included. The check's data are distinct token ids (int64, and
    int32 once), so each window's start can be located in the data.
    """

    def data_of(n: int, seed: int) -> torch.Tensor:
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed))

    first_starts: dict[int, torch.Tensor] = {}  # the starts drawn with each seed, by seed

    def call(
        s: _Session,
        data: torch.Tensor,
        block: int,
        batch: int,
        seed: int,
        what: str = "",
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        text = what or (
            f"data of {len(data)} tokens, block_size = {block}, batch_size = {batch}, "
            f"generator seeded with {seed}"
        )
        g = generator if generator is not None else torch.Generator().manual_seed(seed)
        out = s.call(fn, data, block, batch, generator=g, input=text)
        if not isinstance(out, tuple | list) or len(out) != 2:
            got = f"a {type(out).__name__}"
            if isinstance(out, tuple | list):
                got += f" of {len(out)} items"
            raise _Mismatch("a pair (x, y)", got, "Return x, y.")
        for name, t in zip("xy", out, strict=True):
            if not isinstance(t, torch.Tensor):
                raise _Mismatch(f"{name}: a tensor", f"a {type(t).__name__}", "Return tensors.")
            if tuple(t.shape) != (batch, block):
                raise _Mismatch(
                    f"{name} of shape {_shape((batch, block))} (batch_size, block_size)",
                    f"shape {_shape(t.shape)}",
                )
            if t.dtype != data.dtype:
                raise _Mismatch(f"{name} of dtype {data.dtype} (token ids)", f"dtype {t.dtype}")
        return out[0], out[1]

    def starts(data: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        position = torch.empty_like(data)
        position[data] = torch.arange(len(data))
        return position[x[:, 0]]

    def shape(s: _Session) -> None:
        for n, block, batch, seed in ((1000, 8, 4, 1), (1000, 1, 1, 2), (500, 40, 3, 3)):
            data = data_of(n, seed)
            if seed == 3:  # token ids stored compactly, as a real data set often is
                data = data.to(torch.int32)
                what = (
                    f"data of {n} tokens of dtype int32, block_size = {block}, batch_size = "
                    f"{batch}, generator seeded with {seed}"
                )
                call(s, data, block, batch, seed, what)
            else:
                call(s, data, block, batch, seed)

    def inside(s: _Session) -> None:
        block = 6
        for n, seed in ((block + 3, 4), (200, 6)):
            data = data_of(n, seed)
            x, y = call(s, data, block, 64, seed)
            x0 = starts(data, x)
            for b in range(64):
                first = int(x0[b])
                if not torch.equal(x[b], data[first : first + block]):
                    raise _Mismatch(
                        f"each row of x a stretch data[s : s + {block}] of the data",
                        f"row {b} of x is {_nums(x[b], block)}: it starts like data[{first}:] "
                        f"but data[{first}:{first + block}] is {_nums(data[first:], block)}",
                        "Each row of x is block_size consecutive tokens: data[s : s + block_size].",
                    )
                if first + block > n - 1:
                    raise _Mismatch(
                        f"every window start s <= {n - block - 1} (len(data) - block_size - 1), "
                        f"so that the target of its last token, data[s + {block}], exists",
                        f"row {b} of x starts at data[{first}]: its last target would be "
                        f"data[{first + block}], past the end of the {n} tokens",
                    )

    def shifted(s: _Session) -> None:
        for n, block, batch, seed in ((1000, 8, 4, 7), (300, 16, 8, 8)):
            data = data_of(n, seed)
            x, y = call(s, data, block, batch, seed)
            x0 = starts(data, x)
            if n == 1000:
                first_starts[seed] = x0
            for b in range(batch):
                first = int(x0[b])
                want = data[first + 1 : first + block + 1]
                if not torch.equal(y[b], want):
                    t = int((y[b] != want).nonzero()[0, 0])
                    raise _Mismatch(
                        f"y[{b}, {t}] = data[{first + 1 + t}] = {int(want[t])}, the token after "
                        f"x[{b}, {t}] = data[{first + t}] (row {b} of x starts at data[{first}])",
                        f"y[{b}, {t}] = {int(y[b, t])}; row {b} of y is {_nums(y[b], 5)}",
                    )

    def reproducible(s: _Session) -> None:
        data = data_of(1000, 9)
        batches = []
        g = torch.Generator().manual_seed(9)
        for global_seed in (1, 2):
            _seed_global(global_seed)
            what = (
                "data of 1000 tokens, block_size = 8, batch_size = 4, a new generator seeded "
                f"with 9, global seed {global_seed}"
            )
            batches.append(call(s, data, 8, 4, 9, what, g if global_seed == 1 else None))
        _seed_global(0)
        for name, a, b in zip("xy", batches[0], batches[1], strict=True):
            if not torch.equal(a, b):
                raise _Mismatch(
                    f"the same {name} from two generators seeded alike",
                    f"{_nums(a[0], 5)} the first time, {_nums(b[0], 5)} the second (row 0)",
                    "Draw the starts from the generator passed in (generator=generator), not "
                    "from the global random state.",
                )
        what = (
            "data of 1000 tokens, block_size = 8, batch_size = 4: a second call with the first "
            "generator (seeded with 9, already used once)"
        )
        again = call(s, data, 8, 4, 9, what, g)
        if torch.equal(again[0], batches[0][0]):
            raise _Mismatch(
                "a new batch from the second call on one generator (training draws a new batch "
                "at every step)",
                f"the same batch again: row 0 of x is {_nums(again[0][0], 5)} both times",
                "Each call must draw new starts from the generator passed in, or training sees "
                "one batch only. Seeding inside the function (torch.manual_seed, "
                "generator.manual_seed, a new Generator) or starts that ignore the generator "
                "give the same batch every time.",
            )
        seven = first_starts.get(7)
        if seven is not None and torch.equal(seven, starts(data, batches[0][0])):
            raise _Mismatch(
                "different batches from generators seeded differently",
                f"the same window starts {_nums(seven, 4)} with seed 7 (property 3) and seed 9",
                "Draw the starts from the generator passed in; a generator or seed of your own "
                "makes every seed give the same batch.",
            )

    def spread(s: _Session) -> None:
        block = 6
        for n in (block + 3, block + 2, 1000):
            data = data_of(n, 10)
            x, _ = call(s, data, block, 256, 10)
            seen = starts(data, x)
            last = n - block - 1
            if n < 100:
                missing = sorted(set(range(last + 1)) - set(seen.tolist()))
                if missing:
                    raise _Mismatch(
                        f"every start 0..{last} drawn at least once in 256 windows",
                        f"start {missing[0]} never drawn (starts drawn: "
                        f"{sorted(set(seen.tolist()))})",
                    )
            elif seen.min() > 50 or seen.max() < last - 50:
                raise _Mismatch(
                    f"starts spread over 0..{last} (the smallest below 50, the largest above "
                    f"{last - 50})",
                    f"starts from {int(seen.min())} to {int(seen.max())}",
                )

    range_hint = (
        "Draw the starts with torch.randint(len(data) - block_size, (batch_size,), "
        "generator=generator): s + block_size must still be a position in the data."
    )
    rng_hint = (
        "Draw the starts from the generator passed in (generator=generator), not from the "
        "global random state, and leave that state alone: no torch.manual_seed(...) in the "
        "function, no draw without generator=."
    )
    return _run(
        "check_get_batch",
        [
            _Property(
                "shape",
                "x and y are (batch_size, block_size) token ids",
                "Return x, y: token ids of data's dtype, one window of block_size per row.",
                shape,
            ),
            _Property(
                "inside",
                "every window, with its targets, lies inside the data",
                range_hint,
                inside,
            ),
            _Property(
                "shifted",
                "y is x shifted by one position in the data",
                "y[b] = data[s + 1 : s + block_size + 1]: every target is the next token.",
                shifted,
            ),
            _Property(
                "reproducible",
                "the same generator seed gives the same batch",
                "The batch depends only on the generator passed in: the same seed, the same "
                "batch; another seed or a second draw, another batch.",
                reproducible,
            ),
            _Property(
                "spread",
                "starts cover every valid position, the last one included",
                range_hint,
                spread,
            ),
        ],
        rng_hint=rng_hint,
    )


def check_bigram_loss(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's bigram loss (chapter 7, "Tiny Shakespeare and a bigram model").

    The reader writes ``fn(logits, targets)``: ``logits`` is a ``(B, T, vocab_size)`` float
    tensor and ``targets`` a ``(B, T)`` tensor of token ids; it returns the mean cross-entropy
    over all ``B * T`` positions, a scalar: ``F.cross_entropy`` of the logits reshaped to
    ``(B * T, vocab_size)`` against the targets reshaped to ``(B * T,)``.

    Properties: the loss is a scalar; equal logits give ``ln(vocab_size)`` whatever the
    targets; the loss equals the mean of ``-log softmax(logits[b, t])[targets[b, t]]`` over
    every position, on shapes where ``T`` equals ``vocab_size`` (where the unreshaped call runs
    without an error), with logits of +-1000, with float64 logits (a float64 loss, to float64
    precision), and with gradients reaching the logits.
    """

    def inputs(B: int, T: int, V: int, seed: int, scale: float = 2.0) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(B, T, V, generator=g) * scale
        if scale > 100:
            logits = logits.round().clamp(-1000, 1000)
        return logits, torch.randint(V, (B, T), generator=g)

    def describe(B: int, T: int, V: int, seed: int, extra: str = "") -> str:
        return (
            f"logits of shape {_shape((B, T, V))}, targets of shape {_shape((B, T))}, "
            f"seed {seed}{extra}"
        )

    def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        V = logits.shape[-1]
        return F.cross_entropy(logits.double().reshape(-1, V), targets.reshape(-1))

    def mistakes(logits: torch.Tensor, targets: torch.Tensor) -> list[tuple[str, Any]]:
        B, T, V = logits.shape
        ld = logits.double()
        flat_t = targets.reshape(-1)
        return [
            (
                "Your loss matches F.cross_entropy(logits, targets) without the reshape: it reads "
                "dimension 1 (T, here equal to vocab_size) as the classes. Reshape the logits to "
                "(B * T, vocab_size) and the targets to (B * T,).",
                lambda: F.cross_entropy(ld, targets),
            ),
            (
                "Your loss matches the sum over the positions: F.cross_entropy averages them "
                "(reduction='mean', the default).",
                lambda: F.cross_entropy(ld.reshape(-1, V), flat_t, reduction="sum"),
            ),
            (
                "Your loss matches logits reshaped to (vocab_size, B * T) (or read in another "
                "order): view(B * T, vocab_size) keeps each position's scores together.",
                lambda: F.cross_entropy(ld.reshape(V, -1).T, flat_t),
            ),
            (
                "Your loss matches targets taken in another order (targets.T): reshape the "
                "targets exactly as the logits, targets.view(B * T).",
                lambda: F.cross_entropy(ld.reshape(-1, V), targets.T.reshape(-1)),
            ),
            (
                "Your loss matches a softmax applied before F.cross_entropy: it takes the raw "
                "logits and applies log_softmax itself.",
                lambda: F.cross_entropy(ld.softmax(-1).reshape(-1, V), flat_t),
            ),
            (
                "Your loss matches F.nll_loss on the raw logits: nll_loss expects log-"
                "probabilities, so use F.cross_entropy (or log_softmax first).",
                lambda: F.nll_loss(ld.reshape(-1, V), flat_t),
            ),
            (
                "Your loss matches a softmax then log: a target's probability that rounds to 0 "
                "(its logit far below the row's largest, as with logits of +-1000) gives "
                "log(0) = -inf. Use log_softmax or F.cross_entropy, which compute the "
                "log-probabilities without forming the probabilities first.",
                # In the input's dtype, where the reader's softmax underflows.
                lambda: -logits.softmax(-1).gather(-1, targets[..., None]).log().mean(),
            ),
        ]

    def scalar(
        s: _Session,
        logits: torch.Tensor,
        targets: torch.Tensor,
        what: str,
        mistaken: Sequence[tuple[str, Any]] = (),
    ) -> Any:
        try:
            out = s.call(fn, logits, targets, input=what)
        except _ReaderRaised as err:
            if "Expected target size" not in str(err.error):
                raise
            raise _Mismatch(
                "the loss, one number",
                f"your function raised {_error_text(err.error)}",
                "F.cross_entropy reads dimension 1 as the classes, so (B, T, vocab_size) logits "
                "make it read T as the classes: reshape the logits to (B * T, vocab_size) and the "
                "targets to (B * T,) first.",
            ) from err
        per_position = logits.shape[0] * logits.shape[1]
        if isinstance(out, torch.Tensor) and out.dim() > 0 and out.numel() == per_position:
            raise _Mismatch(
                "one number, the mean over all positions",
                f"a tensor of shape {_shape(out.shape)}, one loss per position",
                "Average over the positions: reduction='none' gives one loss per position.",
            )
        return _tensor_out(out, (), "the loss", dtype=logits.dtype, mistakes=mistaken)

    def shape(s: _Session) -> None:
        for B, T, V, seed in ((4, 8, 65, 1), (1, 1, 5, 2), (3, 5, 7, 3)):
            logits, targets = inputs(B, T, V, seed)
            scalar(s, logits, targets, describe(B, T, V, seed))

    def uniform(s: _Session) -> None:
        for B, T, V, seed in ((4, 8, 65, 4), (2, 3, 11, 5)):
            _, targets = inputs(B, T, V, seed)
            logits = torch.zeros(B, T, V)
            what = describe(B, T, V, seed, ", every logit 0")
            out = scalar(s, logits, targets, what)
            _expect_close(
                out,
                torch.tensor(math.log(V), dtype=torch.float64),
                f"ln({V}) = {math.log(V):.4f}: a uniform guess over {V} tokens",
                mistakes=mistakes(logits, targets),
            )

    def matches(s: _Session) -> None:
        cases = [(4, 8, 65, 6, 2.0), (2, 7, 7, 7, 2.0), (3, 40, 11, 8, 1000.0), (1, 1, 5, 9, 2.0)]
        for number, (B, T, V, seed, scale) in enumerate(cases):
            logits, targets = inputs(B, T, V, seed, scale)
            extra = {2.0: "", 1000.0: ", logits rounded to integers up to +-1000"}[scale]
            if seed == 9:
                logits = logits.double()
                extra += ", float64"
            if T == V:
                extra += f" (T = vocab_size = {V})"
            with torch.enable_grad():
                logits.requires_grad_(number == 0)  # the first call with gradients on
                what = describe(B, T, V, seed, extra)
                out = scalar(s, logits, targets, what, mistakes(logits.detach(), targets))
                expected = reference(logits, targets)
                _expect_close(
                    out,
                    expected,
                    "the mean of -log softmax(logits[b, t])[targets[b, t]] over all B * T "
                    "positions",
                    mistakes=mistakes(logits.detach(), targets),
                    dtype=logits.dtype,
                )
                if logits.requires_grad:
                    _expect_gradients(out, expected, [("the logits", logits)])

    return _run(
        "check_bigram_loss",
        [
            _Property(
                "shape",
                "the loss is a scalar",
                "Return one number: the mean cross-entropy over every position.",
                shape,
            ),
            _Property(
                "uniform",
                "equal logits give ln(vocab_size)",
                "With equal logits every token has probability 1 / vocab_size, so the loss is "
                "-ln(1 / vocab_size) at every position.",
                uniform,
            ),
            _Property(
                "matches",
                "equals the mean cross-entropy over all B*T positions",
                "Each position (b, t) scores logits[b, t] against targets[b, t]; the loss is the "
                "mean of -log softmax over the B * T positions.",
                matches,
            ),
        ],
    )
