"""The tiny model of chapter 13: its parameters, their initialisation, and what its attention layer reads.

One multi-head attention layer between embeddings and a linear read-out (``training.py`` runs and
trains it; its module docstring has the equations). By default where a head looks depends on
positions only and what it fetches is tokens only: queries and keys are the position embeddings P,
values the token embeddings E[tokens]. Axis names: B sequences, n positions, V vocabulary, R = 2
relations, h heads, d_model the width of a token.
"""

import math
from dataclasses import dataclass

import numpy as np

from .grads import _sum_to_shape
from .learning import EmbeddedModel
from .params import MHAParams, init_params
from .task import RELATIONS


@dataclass
class TinyModel(EmbeddedModel):
    """Parameters of the tiny model: embeddings, one attention layer, a read-out.

    embed : (V, d_model), pos : (n, d_model), attn : MHAParams,
    w_out : (d_model, R V), b_out : (R V,); keys_see_tokens : bool; values_see_positions : bool or None,
    None meaning "the same as keys_see_tokens" (see the module's docstring).
    """

    attn: MHAParams
    w_out: np.ndarray
    b_out: np.ndarray
    keys_see_tokens: bool = False
    values_see_positions: bool | None = None

    @property
    def values_with_positions(self):
        """True when the values are ``E[tokens] + P``, False when they are ``E[tokens]``."""
        return self.keys_see_tokens if self.values_see_positions is None else bool(self.values_see_positions)

    @property
    def num_heads(self):
        return self.attn.num_heads


def init_model(vocab, n, d_model, num_heads, *, seed=0, keys_see_tokens=False, values_see_positions=None):
    """A freshly initialised TinyModel.

    The attention layer is ``init_params(d_model, num_heads, seed=seed + 1)``
    (PyTorch's initialisation, biases zero). Embeddings are N(0, 1); the
    read-out is U(-1/√d_model, 1/√d_model) like ``nn.Linear``, its bias zero.
    No draw depends on ``num_heads``: models with 1 and 2 heads and the same
    seed start from the same numbers, only cut into heads differently.

    Examples
    --------
    >>> m1, m2 = init_model(8, 12, 16, 1), init_model(8, 12, 16, 2)
    >>> m1.size() == m2.size(), np.array_equal(m1.attn.w_q, m2.attn.w_q)
    (True, True)
    """
    if vocab < 2 or n < 2:
        raise ValueError(f"init_model needs vocab >= 2 and n >= 2, got vocab = {vocab}, n = {n}")
    rng = np.random.default_rng(seed)
    embed = rng.normal(size=(vocab, d_model))
    pos = rng.normal(size=(n, d_model))
    bound = 1 / math.sqrt(d_model)
    w_out = rng.uniform(-bound, bound, size=(d_model, len(RELATIONS) * vocab))
    b_out = np.zeros(len(RELATIONS) * vocab)
    return TinyModel(embed, pos, init_params(d_model, num_heads, seed=seed + 1), w_out, b_out, keys_see_tokens,
                     values_see_positions)


def attention_inputs(model, tokens):
    """What the attention layer reads: ``x_qk`` (queries and keys) and ``x_v`` (values).

    Returns
    -------
    x_qk : ndarray, (n, d_model): the positions P; with keys_see_tokens (B, n, d_model), E[tokens] + P
    x_v : ndarray, (B, n, d_model): the tokens E[tokens]; when the values see positions, E[tokens] + P

    Examples
    --------
    >>> model = init_model(vocab=5, n=4, d_model=8, num_heads=2)
    >>> x_qk, x_v = attention_inputs(model, np.zeros((3, 4), dtype=int))
    >>> x_qk.shape, x_v.shape, bool(np.all(x_v == model.embed[0]))
    ((4, 8), (3, 4, 8), True)
    >>> ablation = init_model(5, 4, 8, 2, keys_see_tokens=True, values_see_positions=False)
    >>> x_qk, x_v = attention_inputs(ablation, np.zeros((3, 4), dtype=int))
    >>> x_qk.shape, bool(np.all(x_v == ablation.embed[0]))
    ((3, 4, 8), True)
    """
    tokens_in = model.embed[tokens]  # (B, n) -> (B, n, d_model)
    both = tokens_in + model.pos  # (B, n, d_model) + (n, d_model)
    x_qk = both if model.keys_see_tokens else model.pos
    x_v = both if model.values_with_positions else tokens_in
    return x_qk, x_v


def attention_inputs_backward(model, tokens, dx_qk, dx_v):
    """Gradients of E and P from those of ``attention_inputs``' two outputs.

    A row of E used at several places (a token that occurs many times)
    collects the gradients of all of them; P is shared by every sequence.

    Parameters
    ----------
    model : TinyModel
    tokens : ndarray of int, (B, n)
    dx_qk : ndarray, the shape of x_qk: the gradient that reached the queries and keys, summed
    dx_v : ndarray, (B, n, d_model): the gradient that reached the values

    Returns
    -------
    d_embed : ndarray, (V, d_model)
    d_pos : ndarray, (n, d_model)

    Examples
    --------
    >>> model = init_model(vocab=3, n=2, d_model=2, num_heads=1)
    >>> d_embed, d_pos = attention_inputs_backward(model, np.array([[1, 1]]), np.ones((2, 2)), np.ones((1, 2, 2)))
    >>> d_embed                      # token 1 was used twice, tokens 0 and 2 never
    array([[0., 0.],
           [2., 2.],
           [0., 0.]])
    """
    d_tokens = dx_v  # (B, n, d_model): what reaches E[tokens]
    d_pos = np.zeros_like(model.pos)  # (n, d_model)
    if model.values_with_positions:
        d_pos = d_pos + dx_v.sum(axis=0)  # x_v = E[tokens] + P: P is shared by the batch, (B, n, d) -> (n, d)
    if model.keys_see_tokens:
        d_tokens = d_tokens + dx_qk  # x_qk = E[tokens] + P as well: its gradient reaches both
        d_pos = d_pos + dx_qk.sum(axis=0)  # (B, n, d_model) -> (n, d_model)
    else:
        d_pos = d_pos + _sum_to_shape(dx_qk, model.pos.shape)  # x_qk = P itself, (n, d_model)
    d_embed = np.zeros_like(model.embed)
    np.add.at(d_embed, tokens, d_tokens)  # row tokens[b, i] of E receives d_tokens[b, i]
    return d_embed, d_pos
