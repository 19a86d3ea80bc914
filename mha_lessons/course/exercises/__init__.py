"""Checkers for the exercises: write your answer, call ``M.exercises.check_...(answer)``, read the verdict.

Each checker computes the right answer with the package and the answers that the typical mistakes
give (the softmax over the wrong axis, the scale forgotten, the heads split in the wrong order, ...);
if yours matches one of those it names the mistake in plain words, otherwise it says what differs
(the shape, a NaN, the largest wrong entry). It returns a :class:`Verdict`, which a notebook shows
as one line and which is true when the answer is right.

The checkers of each chapter live in a module of this package (``ch01``, ``ch03``, ...) and are
imported here by name, so a chapter writes ``M.exercises.check_band_mask(my_mask)`` and a reader can
see below where each one comes from.
"""

from ._verdict import Verdict, call_learner, compare
from .ch01 import (
    check_zero_query_weights, check_attend_one, check_band_mask, check_attention, check_shifted_weights)
from .ch02 import (
    check_variance_prediction, check_self_score_moments, check_uniform_jacobian, check_score_divisor)
from .ch03 import (
    check_head_choices, check_split_heads, check_combine_heads, check_key_bias_change,
    check_unexplained_fraction)
from .ch04 import check_cross_attention_flops, check_weights_memory_length, check_float32_weights
from .ch05 import check_weighted_sum_backward, check_temperature_gradient, check_causal_gradient_rows
from .ch06 import (
    check_batch_mask, check_torch_key_padding_mask, check_sliding_window_mask, check_changed_positions,
    check_chunk_outputs)
from .ch07 import check_running_max_sum, check_merge_states, check_causal_blocks, check_weights_from_lse
from .ch08 import check_forward_intensity, check_key_blocks_loaded, check_tflops
from .ch09 import check_earlier_changed, check_batch_flops_per_byte
from .ch10 import check_cache_bytes, check_expand_kv, check_mean_pool_kv, check_mla_flops_per_byte
from .ch11 import (check_w_o_rows, check_allreduce_bytes, check_worker_output, check_split_head_counts,
                   check_split_head_work)
from .ch12 import check_ring_pairs, check_zigzag_positions, check_min_block, check_sequence_volumes
from .ch13 import check_relation_positions, check_relation_score, check_both_right, check_head_weights
from .ch14 import (check_previous_token_score, check_induction_score, check_first_copy_floor,
                   check_mean_ablated_keys)
from .ch15 import check_previous_share, check_mean_pool, check_head_query_weights

__all__ = [
    "Verdict", "call_learner", "compare",
    "check_zero_query_weights", "check_attend_one", "check_band_mask", "check_attention",
    "check_shifted_weights", "check_variance_prediction", "check_self_score_moments",
    "check_uniform_jacobian", "check_score_divisor", "check_head_choices", "check_split_heads",
    "check_combine_heads", "check_key_bias_change", "check_unexplained_fraction",
    "check_cross_attention_flops", "check_weights_memory_length", "check_float32_weights",
    "check_weighted_sum_backward", "check_temperature_gradient", "check_causal_gradient_rows",
    "check_batch_mask", "check_torch_key_padding_mask", "check_sliding_window_mask",
    "check_changed_positions", "check_chunk_outputs", "check_running_max_sum", "check_merge_states",
    "check_causal_blocks", "check_weights_from_lse", "check_forward_intensity", "check_key_blocks_loaded",
    "check_tflops", "check_cache_bytes", "check_expand_kv",
    "check_mean_pool_kv", "check_earlier_changed", "check_batch_flops_per_byte", "check_mla_flops_per_byte",
    "check_w_o_rows", "check_allreduce_bytes",
    "check_worker_output", "check_split_head_counts", "check_split_head_work", "check_ring_pairs",
    "check_zigzag_positions", "check_min_block", "check_sequence_volumes", "check_relation_positions",
    "check_relation_score", "check_both_right", "check_head_weights", "check_previous_token_score",
    "check_induction_score", "check_first_copy_floor", "check_mean_ablated_keys",
    "check_previous_share", "check_mean_pool", "check_head_query_weights",
]
