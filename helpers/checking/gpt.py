"""The exercise checkers of chapter 8: a block's forward pass (``check_block_forward``) and a
LayerNorm written by hand (``check_layer_norm``).

Defined in chapter 8, "Building and training a GPT".
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from helpers.checking._core import (
    VARIANTS,
    CheckResult,
    _differ,
    _expect_close,
    _expect_gradients,
    _Mismatch,
    _mistake_hint,
    _NotTheExercise,
    _nums,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
)


def check_block_forward(fn: Callable[[Any, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's transformer block (chapter 8, "Building and training a GPT").

    The reader writes ``fn(block, x)``: ``block`` is a ``helpers.model.Block`` (use its ``ln_1``,
    ``attn``, ``ln_2`` and ``mlp``) and ``x`` a ``(B, T, C)`` tensor; it returns the ``(B, T, C)``
    output of the pre-LN block: ``x + attn(ln_1(x))``, then that plus ``mlp(ln_2(...))`` of it.

    Properties: the output has shape ``(B, T, C)``; with both branches switched off (their output
    projections zeroed) the input still reaches the output (residual connections); the residual
    stream itself is not normalised, so with both branches off the block returns ``x`` exactly
    (pre-LN, not post-LN); the output equals ``Block.forward`` with the same weights over several
    seeds, with and without biases, and for a float64 block (a float64 output, to float64
    precision). The block is given in training mode (with dropout 0) and must be left in it. A
    function that calls the block itself (``block(x)``, ``block.forward(x)``) gets the right
    numbers without doing the exercise, and is reported as such.
    """
    from helpers.model import Block, GPTConfig

    # Whether the block's own forward ran during the reader's call: a hook on the attention
    # looks for Block.forward among its callers (block(x), block.forward(x), Block.forward(...)).
    forward_code = Block.forward.__code__
    delegated = {"called": False}

    def watch(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is forward_code:
                delegated["called"] = True
                return
            frame = frame.f_back

    def call(s: _Session, block: Block, x: torch.Tensor, input: str) -> Any:
        """The reader's function on ``block`` and ``x``; reported if it calls the block itself."""
        delegated["called"] = False
        out = s.call(fn, block, x, input=input)
        if delegated["called"]:
            raise _NotTheExercise(
                "Your function calls the block itself, which is not the exercise.",
                "the block's output computed from its four parts, block.ln_1, block.attn, "
                "block.ln_2 and block.mlp",
                "your function calls the block's own forward (block(x) or block.forward(x)), "
                "which computes the whole block for it",
                "The exercise is to write what Block.forward does: call block.ln_1, block.attn, "
                "block.ln_2 and block.mlp yourself, and add each branch to the residual stream.",
            )
        return out

    configs = [(16, 2, False), (12, 3, True)]  # (n_embd, n_head, bias)
    sizes = [(2, 5), (1, 1), (3, 8)]  # (B, T)
    final_sizes = [(2, 5), (1, 1), (2, 80)]  # (B, T): T = 80, longer than the chapter's 64

    def mistakes(block: Block, x: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        b = copy.deepcopy(block)
        attn, mlp, ln_1, ln_2 = b.attn, b.mlp, b.ln_1, b.ln_2

        def plain(t: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(t, t.shape[-1:])

        def post_ln() -> torch.Tensor:
            h = ln_1(x + attn(x))
            return ln_2(h + mlp(h))

        def no_residual() -> torch.Tensor:
            return mlp(ln_2(attn(ln_1(x))))

        def no_mlp_residual() -> torch.Tensor:
            return mlp(ln_2(x + attn(ln_1(x))))

        def one_norm() -> torch.Tensor:
            h = x + attn(ln_1(x))
            return h + mlp(ln_1(h))

        def unweighted() -> torch.Tensor:
            h = x + attn(plain(x))
            return h + mlp(plain(h))

        return [
            (
                "Your output matches post-LN, ln(x + attn(x)): in this pre-LN block only the "
                "branch inputs are normalised, x + attn(ln_1(x)).",
                post_ln,
            ),
            (
                "Your output matches a block without residual connections (around the MLP at "
                "least): add each branch to its input, x = x + attn(...), then x = x + mlp(...).",
                no_mlp_residual,
            ),
            (
                "Your output matches a block without residual connections (around the MLP at "
                "least): add each branch to its input, x = x + attn(...), then x = x + mlp(...).",
                no_residual,
            ),
            (
                "Your output matches using ln_1 before the MLP too: the MLP branch has its own "
                "LayerNorm, ln_2.",
                one_norm,
            ),
            (
                "Your output matches both branches reading x (parallel branches): the MLP reads "
                "x after the attention has been added.",
                lambda: x + attn(ln_1(x)) + mlp(ln_2(x)),
            ),
            (
                "Your output matches LayerNorms without the block's learned weights: call "
                "block.ln_1 and block.ln_2.",
                unweighted,
            ),
        ]

    def make_block(n_embd: int, n_head: int, bias: bool, seed: int) -> Block:
        torch.manual_seed(seed)
        cfg = GPTConfig(
            vocab_size=8, block_size=128, n_layer=1, n_head=n_head, n_embd=n_embd, bias=bias
        )
        block = Block(cfg).train()  # dropout 0: the same output in either mode
        block.attn.register_forward_pre_hook(watch)
        g = torch.Generator().manual_seed(seed)
        for ln in (block.ln_1, block.ln_2):  # LayerNorm weights that are not all ones
            ln.weight.copy_(1 + 0.3 * torch.randn(ln.weight.shape, generator=g))
            if ln.bias is not None:
                ln.bias.copy_(0.2 * torch.randn(ln.bias.shape, generator=g))
        return block

    def branches_off(block: Block) -> Block:
        for proj in (block.attn.c_proj, block.mlp.c_proj):
            proj.weight.zero_()
            if proj.bias is not None:
                proj.bias.zero_()
        for ln in (block.ln_1, block.ln_2):
            ln.weight.fill_(1.0)
            if ln.bias is not None:
                ln.bias.zero_()
        return block

    def describe(cfg: tuple[int, int, bool], B: int, T: int, seed: int, extra: str = "") -> str:
        n_embd, n_head, bias = cfg
        return (
            f"a Block with n_embd = {n_embd}, n_head = {n_head}, bias = {bias}{extra}; "
            f"x of shape {_shape((B, T, n_embd))}, seed {seed}"
        )

    def shape(s: _Session) -> None:
        for seed, (cfg, (B, T)) in enumerate(((c, z) for c in configs for z in sizes), start=1):
            block = make_block(*cfg, seed)
            x = _randn(B, T, cfg[0], seed=seed)
            _tensor_out(call(s, block, x, describe(cfg, B, T, seed)), x.shape)

    off = " whose attention and MLP output projections are zero and LayerNorms plain"

    def residual(s: _Session) -> None:
        for seed, cfg in enumerate(configs, start=10):
            block = branches_off(make_block(*cfg, seed))
            x = _randn(2, 5, cfg[0], seed=seed, scale=2.0) + 1.0
            out = _tensor_out(call(s, block, x, describe(cfg, 2, 5, seed, off)), x.shape)
            norm = F.layer_norm(out.double(), out.shape[-1:])
            ok = torch.isclose(norm, F.layer_norm(x.double(), x.shape[-1:]), atol=1e-4).all(-1)
            if not ok.all():
                b, t = (int(i) for i in (~ok).nonzero()[0])
                raise _Mismatch(
                    "x itself comes out (up to a LayerNorm): both branches add 0 to it",
                    f"token {t} of sequence {b} comes out as {_nums(out[b, t])} where x is "
                    f"{_nums(x[b, t])}, and not as a normalised copy of it either",
                    _mistake_hint(out, mistakes(block, x), None),
                )

    def pre_ln(s: _Session) -> None:
        for seed, cfg in enumerate(configs, start=20):
            block = branches_off(make_block(*cfg, seed))
            x = _randn(2, 5, cfg[0], seed=seed, scale=2.0) + 1.0
            out = _tensor_out(call(s, block, x, describe(cfg, 2, 5, seed, off)), x.shape)
            _expect_close(
                out,
                x,
                "x unchanged: the residual stream is never normalised",
                mistakes=mistakes(block, x),
            )

    def matches(s: _Session) -> None:
        pairs = [(c, z) for c in configs for z in final_sizes]
        for seed, (cfg, (B, T)) in enumerate(pairs, start=30):
            block = make_block(*cfg, seed)
            x = _randn(B, T, cfg[0], seed=seed)
            extra = ""
            if seed == 33:  # a float64 block and input: float64 out, to float64 precision
                block, x, extra = block.double(), x.double(), " (float64 weights)"
            grad = seed == 30 + len(pairs) - 1  # the last call with gradients on
            with torch.enable_grad():
                x.requires_grad_(grad)
                what = describe(cfg, B, T, seed, extra) + (", float64" if extra else "")
                out = _tensor_out(call(s, block, x, what), x.shape, dtype=x.dtype)
                theirs = s.passed[0]  # the copy of the block the function was given
                _expect_close(
                    out,
                    theirs(x),
                    "block(x), the Block's own forward",
                    atol=1e-5,
                    mistakes=mistakes(block, x.detach()),
                    dtype=x.dtype,
                )
                if grad:
                    named = [("x", x)] + [
                        (f"the block's {name}", w) for name, w in theirs.named_parameters()
                    ]
                    _expect_gradients(out, theirs(x), named)

    return _run(
        "check_block_forward",
        [
            _Property(
                "shape",
                "output shape (B, T, C)",
                "Return the residual stream x after both branches, shaped like x.",
                shape,
            ),
            _Property(
                "residual",
                "residual connections: x reaches the output when both branches are off",
                "With both branches adding 0, the block must return its input x: each branch is "
                "added to the stream.",
                residual,
            ),
            _Property(
                "pre_ln",
                "pre-LN: the residual stream is never normalised",
                "With both branches adding 0, x itself comes out, not a normalised copy of it.",
                pre_ln,
            ),
            _Property(
                "matches_block",
                "equals Block.forward with the same weights",
                "The pre-LN block: x + attn(ln_1(x)), then that plus mlp(ln_2(...)) of it.",
                matches,
            ),
        ],
    )


def check_layer_norm(fn: Callable[..., torch.Tensor]) -> CheckResult:
    """Check the reader's LayerNorm (chapter 8, "Building and training a GPT").

    The reader writes ``fn(x, weight, bias, eps=1e-5)``: ``x`` is a ``(..., C)`` tensor and
    ``weight``, ``bias`` are ``(C,)``; it returns ``(x - mean) / sqrt(var + eps) * weight + bias``
    with the mean and the biased variance (divided by ``C``, not ``C - 1``) of each vector over
    its last dimension, as ``F.layer_norm(x, (C,), weight, bias, eps)``.

    Properties: the output has ``x``'s shape; with ``weight = 1`` and ``bias = 0`` every vector
    comes out with mean 0 and (biased) variance 1; a constant vector (variance 0) comes out as
    ``bias``, finite, thanks to ``eps``; the output equals ``F.layer_norm`` for several shapes,
    for the default ``eps`` on vectors of variance 1e-6 (where ``eps`` dominates), for ``eps`` of
    0.1 on vectors of variance below and above it, for vectors whose mean is 1000, for float64
    (to float64 precision, in a non-contiguous ``x``), and with gradients reaching ``x``,
    ``weight`` and ``bias``; the output has the input's dtype (bfloat16 included).
    """

    def params(C: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed + 500)
        return 1 + 0.3 * torch.randn(C, generator=g), 0.2 * torch.randn(C, generator=g)

    def describe(size: tuple[int, ...], seed: int, extra: str = "") -> str:
        return f"x of shape {_shape(size)}, seed {seed}{extra}"

    def call(s: _Session, x: Any, w: Any, b: Any, what: str, eps: float | None = None) -> Any:
        if eps is None:
            out = s.call(fn, x, w, b, input=what)
        else:
            out = s.call(fn, x, w, b, eps=eps, input=f"{what}, eps = {eps}")
        return _tensor_out(
            out,
            x.shape,
            mistakes=mistakes(x.detach(), w.detach(), b.detach(), eps),
            dtype=x.dtype,
        )

    def mistakes(x: Any, w: Any, b: Any, eps: float | None) -> list[tuple[str, Any]]:
        e = 1e-5 if eps is None else eps
        xd, wd, bd = x.double(), w.double(), b.double()
        mean = xd.mean(-1, keepdim=True)

        def norm(var: torch.Tensor, m: torch.Tensor = mean, eps: float = e) -> torch.Tensor:
            return (xd - m) / torch.sqrt(var + eps) * wd + bd

        var = xd.var(-1, keepdim=True, unbiased=False)
        defaults = [
            (
                f"Your output matches eps = {c:g} when no eps is passed: the default is "
                "eps=1e-5 (def fn(x, weight, bias, eps=1e-5)), as in nn.LayerNorm.",
                lambda c=c: norm(var, eps=c),
            )
            for c in ((1e-6, 1e-8, 1e-12, 1e-3, 1e-4) if eps is None else ())
        ]
        return defaults + [
            (
                "Your output matches eps used as a floor for the variance (max(var, eps)): it is "
                "added to it, sqrt(var + eps).",
                lambda: (xd - mean) / var.clamp(min=e).sqrt() * wd + bd,
            ),
            (
                "Your output matches the unbiased variance (divided by C - 1, torch.var's "
                "default): LayerNorm divides by C, var(dim=-1, unbiased=False).",
                lambda: norm(xd.var(-1, keepdim=True, unbiased=True)),
            ),
            (
                "Your output matches normalising over dimension 0 instead of the last one: each "
                "vector x[..., :] is normalised over its own C channels (dim=-1).",
                lambda: (
                    (xd - xd.mean(0, keepdim=True))
                    / torch.sqrt(xd.var(0, keepdim=True, unbiased=False) + e)
                    * wd
                    + bd
                ),
            ),
            (
                "Your output matches normalising over the whole tensor at once: each vector is "
                "normalised over its own C channels (dim=-1, keepdim=True).",
                lambda: (xd - xd.mean()) / torch.sqrt(xd.var(unbiased=False) + e) * wd + bd,
            ),
            (
                "Your output matches eps added to the standard deviation: it goes inside the "
                "square root, sqrt(var + eps).",
                lambda: (
                    (xd - mean) / (xd.var(-1, keepdim=True, unbiased=False).sqrt() + e) * wd + bd
                ),
            ),
            (
                "Your output matches weight and bias swapped: multiply by weight, then add bias.",
                lambda: norm(xd.var(-1, keepdim=True, unbiased=False)).sub(bd).div(wd).mul(bd) + wd,
            ),
            (
                "Your output matches a LayerNorm that ignores eps passed in (1e-5 always): use "
                "the eps argument.",
                lambda: (
                    (xd - mean) / torch.sqrt(xd.var(-1, keepdim=True, unbiased=False) + 1e-5) * wd
                    + bd
                ),
            ),
            (
                "Your output matches a LayerNorm without eps: a constant vector then divides 0 "
                "by 0. Add eps inside the square root, sqrt(var + eps).",
                lambda: (xd - mean) / xd.var(-1, keepdim=True, unbiased=False).sqrt() * wd + bd,
            ),
        ]

    def shape(s: _Session) -> None:
        for size, seed in (((2, 5, 8), 1), ((1, 1, 4), 2), ((3, 16), 3)):
            x = _randn(*size, seed=seed, scale=2.0)
            w, b = params(size[-1], seed)
            if seed == 3:  # bfloat16, as in mixed-precision training: a bfloat16 output
                x, w, b = x.bfloat16(), w.bfloat16(), b.bfloat16()
                call(s, x, w, b, describe(size, seed, ", x, weight and bias in bfloat16"))
            else:
                call(s, x, w, b, describe(size, seed))

    def standardised(s: _Session) -> None:
        for size, seed in (((2, 5, 8), 11), ((4, 3), 12), ((2, 3, 64), 13)):
            x = _randn(*size, seed=seed, scale=3.0) + 2.0
            C = size[-1]
            out = call(
                s, x, torch.ones(C), torch.zeros(C), describe(size, seed, ", weight 1, bias 0")
            )
            od = out.double()
            var = od.var(-1, unbiased=False)
            expected = x.double().var(-1, unbiased=False)
            expected = expected / (expected + 1e-5)  # just below 1: eps in the denominator
            problem = _differ(od.mean(-1), torch.zeros_like(var), atol=1e-4) or _differ(
                var, expected, atol=1e-4
            )
            if problem is not None:
                hint = _mistake_hint(out, mistakes(x, torch.ones(C), torch.zeros(C), None), None)
                raise _Mismatch(
                    "every vector with mean 0 and variance 1 (biased: divided by C)",
                    f"mean or variance of a vector: {problem}",
                    hint,
                )

    def constant(s: _Session) -> None:
        for size, seed in (((2, 3, 8), 21), ((1, 4), 22)):
            # Multiples of 1/4 and C a power of 2: the mean of a vector is exactly its value.
            x = (_randn(*size[:-1], 1, seed=seed, scale=12.0).round() / 4).expand(size).contiguous()
            w, b = params(size[-1], seed)
            what = describe(size, seed, ", every vector constant (variance 0)")
            out = call(s, x, w, b, what)
            _expect_close(
                out,
                b.expand(size),
                "bias in every vector: (x - mean) is 0 and eps keeps the division finite",
                mistakes=mistakes(x, w, b, None),
            )

    def matches(s: _Session) -> None:
        # (size, seed, eps, offset, scale of the vectors, dtype): vectors of variance about
        # 1e-6, where the default eps (1e-5) dominates; eps = 0.1 with vectors of variance from
        # 0.0025 to 4 (some below eps, some above); means of 1000; float64 with gradients, in
        # a non-contiguous x.
        cases = [
            ((2, 5, 8), 31, None, 0.0, "tiny", torch.float32),
            ((3, 40, 128), 32, 0.1, 0.0, "mixed", torch.float32),
            ((2, 4, 32), 33, None, 1000.0, "", torch.float32),
            ((2, 5, 8), 34, 1e-5, 0.0, "", torch.float64),
        ]
        for number, (size, seed, eps, offset, spread, dtype) in enumerate(cases):
            x = _randn(*size, seed=seed, scale=0.5 if offset else 2.0) + offset
            if spread == "tiny":
                x = x * 5e-4
                extra = ", every vector's variance about 1e-6 (below the default eps)"
            elif spread == "mixed":
                x = x * torch.logspace(-1.3, 0, size[-2])[:, None] / 2
                extra = ", vectors of variance 0.0025 to 1 (below and above eps)"
            else:
                extra = f", every vector's mean near {offset:g}" if offset else ""
            x = x.to(dtype)
            if dtype == torch.float64:  # and laid out as inside a model: not contiguous
                x = _variant(x, "strided")
                extra += ", float64" + VARIANTS["strided"]
            w, b = (t.to(dtype) for t in params(size[-1], seed))
            with torch.enable_grad():
                grad = number == len(cases) - 1  # the last call with gradients on
                for t in (x, w, b):
                    t.requires_grad_(grad)
                out = call(s, x, w, b, describe(size, seed, extra), eps)
                e = 1e-5 if eps is None else eps
                expected = F.layer_norm(x.double(), size[-1:], w.double(), b.double(), e)
                _expect_close(
                    out,
                    expected,
                    "F.layer_norm(x, (C,), weight, bias, eps)",
                    # float32 holds 1000 + x to about 6e-5: a right answer is that far off there.
                    atol=1e-3 if offset else 1e-4,
                    mistakes=mistakes(x.detach(), w.detach(), b.detach(), eps),
                    dtype=dtype,
                )
                if grad:
                    _expect_gradients(out, expected, [("x", x), ("weight", w), ("bias", b)])

    return _run(
        "check_layer_norm",
        [
            _Property("shape", "output shaped like x", "Return one tensor shaped like x.", shape),
            _Property(
                "standardised",
                "weight 1, bias 0: every vector has mean 0 and variance 1",
                "Each vector x[..., :] is centred by its own mean and divided by the square root "
                "of its own variance (plus eps), over the last dimension.",
                standardised,
            ),
            _Property(
                "constant",
                "a constant vector comes out as bias (eps keeps it finite)",
                "A constant vector has x - mean = 0 and variance 0: the output is bias.",
                constant,
            ),
            _Property(
                "matches",
                "equals F.layer_norm, with weight, bias and eps",
                "(x - mean) / sqrt(var + eps) * weight + bias, mean and biased variance over the "
                "last dimension.",
                matches,
            ),
        ],
    )
