"""Checkers for the exercises where the reader writes a function and the book checks it.

Used by the exercises of every chapter: ``from helpers.checking import check_...``. The shared
machinery (the report, the runner, formatting) is in ``_core``; each chapter's checker is in a
module of its own, named after the chapter's notebook. A new checker is one module here plus one
import line and one ``__all__`` entry below.
"""

from helpers.checking._core import NOT_IMPLEMENTED_MESSAGE, CheckResult
from helpers.checking.averaging import check_running_average
from helpers.checking.bigram import check_bigram_loss, check_get_batch
from helpers.checking.bpe import check_bpe_encode
from helpers.checking.causal_masking import check_causal_softmax
from helpers.checking.cost_and_generation import check_cached_attention, check_cached_positions
from helpers.checking.distributed import check_average_gradients
from helpers.checking.flash_attention import check_merge_partials
from helpers.checking.gpt import check_block_forward, check_layer_norm
from helpers.checking.modern import check_rope
from helpers.checking.multihead_cross import check_split_heads
from helpers.checking.positional_encoding import check_sinusoidal_encoding
from helpers.checking.queries_keys_values import check_causal_attention
from helpers.checking.scaling_softmax import check_scaled_scores
from helpers.checking.what_attention_learns import check_ablate_head, check_prefix_matching

__all__ = [
    "NOT_IMPLEMENTED_MESSAGE",
    "CheckResult",
    "check_ablate_head",
    "check_average_gradients",
    "check_bigram_loss",
    "check_block_forward",
    "check_bpe_encode",
    "check_cached_attention",
    "check_cached_positions",
    "check_causal_attention",
    "check_causal_softmax",
    "check_get_batch",
    "check_layer_norm",
    "check_merge_partials",
    "check_prefix_matching",
    "check_rope",
    "check_running_average",
    "check_scaled_scores",
    "check_sinusoidal_encoding",
    "check_split_heads",
]
