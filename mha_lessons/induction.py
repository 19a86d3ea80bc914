"""Induction heads: a two-layer, attention-only model trained on repeated random segments (chapter 10).

The data. A sequence of n tokens starts with a segment of L distinct random
tokens, followed by the same L tokens again, and then random tokens up to n.
L differs from sequence to sequence (from n // 4 to n // 2), so that no fixed
offset of positions finds the earlier copy. The next token is unpredictable in
the first copy and fully predictable in the second, but only by looking back:
at position i of the second copy, the answer is the token that followed the
earlier occurrence of the current token, at position i - L + 1. Olsson et al. (2022), *In-context
Learning and Induction Heads*, describe the two-head circuit that does this:
a *previous-token head* in layer 1 writes into each position which token came
before it, and an *induction head* in layer 2 looks for the position whose
previous token is the current token (its keys read layer 1's output), and
copies the token it finds there.

The model, with a residual stream (each layer adds its output to its input):

    x0     = E[tokens] + P                      (B, n, d_model)
    x1     = x0 + MHA_1(x0, x0, x0, causal)     (B, n, d_model)
    x2     = x1 + MHA_2(x1, x1, x1, causal)     (B, n, d_model)
    logits = x2 W_U + b_U                       (B, n, V)
    loss   = mean cross-entropy of the next token, at positions 0 .. n - 2

The backward pass uses chapter 5's ``mha_backward`` for both layers (with the
three paths of self-attention added up), and a few lines for the rest, each
beside its forward. Axis names: B sequences, n positions, L the length of the
repeated segment, V vocabulary, h heads per layer, d_model width.
"""

import math
from dataclasses import dataclass

import numpy as np

from ._checks import require_positive_int
from .attention import causal_mask
from .grads import _project_backward, mha_backward
from .learning import EmbeddedModel, cross_entropy, train_with_adam
from .multihead import MHAParams, _project, init_params, multihead_attention


@dataclass
class TwoLayerModel(EmbeddedModel):
    """Parameters: embeddings E (V, d_model) and P (n, d_model), two attention layers, an unembedding W_U, b_U."""

    attn1: MHAParams
    attn2: MHAParams
    w_u: np.ndarray
    b_u: np.ndarray


def init_two_layer(vocab, n, d_model, num_heads=1, *, seed=0):
    """A freshly initialised TwoLayerModel: embeddings N(0, 1) / √d_model, layers as ``init_params``.

    Examples
    --------
    >>> model = init_two_layer(vocab=8, n=10, d_model=16)
    >>> model.embed.shape, model.attn2.num_heads, model.w_u.shape
    ((8, 16), 1, (16, 8))
    """
    require_positive_int(vocab, "vocab")
    require_positive_int(n, "n")
    rng = np.random.default_rng(seed)
    scale = 1 / math.sqrt(d_model)
    embed = rng.normal(scale=scale, size=(vocab, d_model))
    pos = rng.normal(scale=scale, size=(n, d_model))
    w_u = rng.uniform(-scale, scale, size=(d_model, vocab))
    return TwoLayerModel(embed, pos, init_params(d_model, num_heads, seed=seed + 1),
                         init_params(d_model, num_heads, seed=seed + 2), w_u, np.zeros(vocab))


def repeated_sequences(batch, n, vocab, *, seed=0):
    """Sequences whose first L tokens (distinct) come again right after them; L varies from n // 4 to n // 2.

    Returns
    -------
    tokens : ndarray of int, (B, n)
    half : ndarray of int, (B,): L, the length of the repeated segment of each sequence

    Examples
    --------
    >>> tokens, half = repeated_sequences(1, 10, 12, seed=0)
    >>> half, bool(np.array_equal(tokens[0, :half[0]], tokens[0, half[0]:2 * half[0]]))
    (array([5]), True)
    """
    require_positive_int(batch, "batch")
    if n < 4 or vocab < n // 2:
        raise ValueError(f"repeated_sequences needs n >= 4 and vocab >= n // 2 (distinct tokens in a segment), "
                         f"got n = {n}, vocab = {vocab}")
    rng = np.random.default_rng(seed)
    half = rng.integers(n // 4, n // 2 + 1, size=batch)  # (B,)
    tokens = rng.integers(vocab, size=(batch, n))  # (B, n): random filler
    for b, length in enumerate(half):
        segment = rng.permutation(vocab)[:length]  # L distinct tokens
        tokens[b, :length] = segment
        tokens[b, length:2 * length] = segment
    return tokens, half


def copy_positions(half, n):
    """Boolean (B, n) masks of the positions whose next token is predictable, and of those in the first copy.

    Returns
    -------
    second : True at i = L .. 2 L - 2, where the next token is a copy of token i - L + 1
    first : True at i = 0 .. L - 2, where the next token is new
    """
    i = np.arange(n)[None, :]  # (1, n)
    half = np.asarray(half)[:, None]  # (B, 1)
    return (i >= half) & (i <= 2 * half - 2), i <= half - 2


def forward(model, tokens, *, ablate_layer1_in_keys=False):
    """Logits and both layers' attention weights.

    Parameters
    ----------
    model : TwoLayerModel
    tokens : ndarray of int, (B, n)
    ablate_layer1_in_keys : bool
        Let layer 2's keys read ``x0`` instead of ``x1``: the stream without
        layer 1's output (queries and values still read ``x1``). This is how the
        chapter shows that the induction head's keys need the previous-token head.

    Returns
    -------
    logits : (B, n, V); weights1, weights2 : (B, h, n, n)

    Examples
    --------
    >>> model = init_two_layer(vocab=5, n=6, d_model=8, num_heads=2)
    >>> logits, w1, w2 = forward(model, repeated_sequences(3, 6, 5)[0])
    >>> logits.shape, w1.shape, w2.shape
    ((3, 6, 5), (3, 2, 6, 6), (3, 2, 6, 6))
    """
    tokens = model.check_tokens(tokens)
    mask = causal_mask(model.n)
    x0 = model.embed[tokens] + model.pos  # (B, n) -> (B, n, d_model)
    y1, weights1 = multihead_attention(x0, x0, x0, model.attn1, mask)
    x1 = x0 + y1  # the residual stream after layer 1
    keys = x0 if ablate_layer1_in_keys else x1
    y2, weights2 = multihead_attention(x1, keys, x1, model.attn2, mask)
    x2 = x1 + y2
    return _project(x2, model.w_u, model.b_u), weights1, weights2  # (B, n, V)


def next_token_targets(tokens):
    """The next token at positions 0 .. n - 2 and -1 (not scored) at the last one: (B, n)."""
    return np.concatenate([tokens[:, 1:], np.full((tokens.shape[0], 1), -1)], axis=1)


def loss_and_grads(model, tokens):
    """The next-token loss and its gradient with respect to every parameter, by backpropagation.

    Returns
    -------
    loss : float
    grads : TwoLayerModel of the same shapes

    Examples
    --------
    >>> model = init_two_layer(vocab=5, n=6, d_model=8)
    >>> loss, grads = loss_and_grads(model, repeated_sequences(2, 6, 5)[0])
    >>> grads.attn2.w_k.shape, grads.pos.shape
    ((8, 8), (6, 8))
    """
    tokens = model.check_tokens(tokens)
    mask = causal_mask(model.n)
    # forward
    x0 = model.embed[tokens] + model.pos  # (B, n, d_model)
    y1, _ = multihead_attention(x0, x0, x0, model.attn1, mask)
    x1 = x0 + y1
    y2, _ = multihead_attention(x1, x1, x1, model.attn2, mask)
    x2 = x1 + y2
    logits = _project(x2, model.w_u, model.b_u)  # (B, n, V)
    loss, d_logits = cross_entropy(logits, next_token_targets(tokens))
    # backward, from the top
    d_x2, d_w_u, d_b_u = _project_backward(x2, model.w_u, d_logits, True)  # (B, n, d_model)
    dq, dk, dv, d_attn2 = mha_backward(x1, x1, x1, model.attn2, d_x2, mask)
    d_x1 = d_x2 + dq + dk + dv  # x2 = x1 + MHA_2(x1, x1, x1): the residual path and three paths into the layer
    dq, dk, dv, d_attn1 = mha_backward(x0, x0, x0, model.attn1, d_x1, mask)
    d_x0 = d_x1 + dq + dk + dv  # the same rule for layer 1
    d_pos = d_x0.sum(axis=0)  # P is shared by the batch: (B, n, d_model) -> (n, d_model)
    d_embed = np.zeros_like(model.embed)
    np.add.at(d_embed, tokens, d_x0)  # row tokens[b, i] of E receives d_x0[b, i]
    return loss, TwoLayerModel(d_embed, d_pos, d_attn1, d_attn2, d_w_u, d_b_u)


def previous_token_score(weights, half):
    """Mean weight of each head on the previous token, at the queries of the first copy (1 .. L - 1).

    Those are the positions whose keys the induction head reads: what the
    previous-token head writes there is what composition needs. ``weights`` (B, h, n, n),
    ``half`` (B,) -> (h,).
    """
    i = np.arange(weights.shape[-1])[None, :]  # (1, n)
    first = (i >= 1) & (i <= np.asarray(half)[:, None] - 1)  # (B, n)
    b, q = np.nonzero(first)
    return weights[b, :, q, q - 1].mean(axis=0)  # (pairs, h) -> (h,)


def induction_score(weights, half):
    """Mean weight of each head, at the queries of the second copy, on the token after the earlier occurrence.

    Query i of the second copy (L <= i <= 2 L - 2) holds the same token as
    position i - L; the token that followed it sits at key i - L + 1. ``weights`` (B, h, n, n),
    ``half`` (B,) -> (h,), averaged over every such query of every sequence.
    """
    second, _ = copy_positions(half, weights.shape[-1])  # (B, n)
    b, i = np.nonzero(second)  # the (sequence, query) pairs
    return weights[b, :, i, i - np.asarray(half)[b] + 1].mean(axis=0)  # (pairs, h) -> (h,)


def half_losses(logits, tokens, half):
    """The next-token loss over the first copy's predictions and over the second copy's (see ``copy_positions``)."""
    targets = next_token_targets(tokens)
    second, first = copy_positions(half, tokens.shape[1])
    return (cross_entropy(logits, np.where(first, targets, -1))[0],
            cross_entropy(logits, np.where(second, targets, -1))[0])


def train_two_layer(model, steps, *, batch=32, lr=1e-2, seed=0, eval_every=50, eval_batch=256):
    """Train in place with Adam on fresh batches of repeated sequences; return the history.

    Returns
    -------
    dict of lists: "step", "loss_first" and "loss_second" (the two halves, on a held-out batch),
    "previous" (layer 1's ``previous_token_score`` per head) and "induction" (layer 2's ``induction_score``
    per head).

    Examples
    --------
    >>> model = init_two_layer(vocab=6, n=8, d_model=8)
    >>> history = train_two_layer(model, 2, batch=4, eval_every=1, eval_batch=4)
    >>> history["step"], len(history["induction"][0])
    ([0, 1, 2], 1)
    """
    require_positive_int(eval_every, "eval_every")
    held_out, half = repeated_sequences(eval_batch, model.n, model.vocab, seed=np.random.SeedSequence([seed, 0]))
    history = {"step": [], "loss_first": [], "loss_second": [], "previous": [], "induction": []}

    def evaluate(step):
        logits, weights1, weights2 = forward(model, held_out)
        first, second = half_losses(logits, held_out, half)
        history["step"].append(step)
        history["loss_first"].append(first)
        history["loss_second"].append(second)
        history["previous"].append(previous_token_score(weights1, half).tolist())  # (h,)
        history["induction"].append(induction_score(weights2, half).tolist())  # (h,)

    def batch_at(step):  # a fresh batch at every step: its tokens only
        return repeated_sequences(batch, model.n, model.vocab, seed=np.random.SeedSequence([seed, 1, step]))[:1]

    train_with_adam(model, steps, batch_at=batch_at, loss_and_grads=loss_and_grads, evaluate=evaluate, lr=lr,
                    eval_every=eval_every)
    return history


# the chapter's sizes and schedule
INDUCTION_SETTINGS = dict(vocab=24, n=20, d_model=32, num_heads=1, steps=1500, batch=32, lr=1e-2, eval_every=50,
                          eval_batch=256)
DROPPED = 1.0  # the second copy's loss counts as dropped below this (it starts near log V)
INDUCTION_COLUMNS = ("seed", "loss_first", "loss_second", "drop_step", "previous", "induction",
                     "ablated_induction", "ablated_loss_second")


def induction_run(seed, **overrides):
    """Train the chapter's two-layer model at one seed and summarise it (one row of the stored table).

    Returns
    -------
    model, history, summary : summary holds INDUCTION_COLUMNS: the last evaluation's losses and scores (head 0 of
    each layer), ``drop_step`` (the first evaluated step at which the second copy's loss is below DROPPED, -1 if
    never), and the induction score and second-copy loss when layer 2's keys do not see layer 1's output.

    Examples
    --------
    >>> _, history, summary = induction_run(0, steps=2, eval_every=1, eval_batch=8)
    >>> history["step"], summary["drop_step"]
    ([0, 1, 2], -1)
    """
    settings = {**INDUCTION_SETTINGS, **overrides}
    unknown = set(settings) - set(INDUCTION_SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(INDUCTION_SETTINGS)}")
    model = init_two_layer(settings["vocab"], settings["n"], settings["d_model"], settings["num_heads"], seed=seed)
    history = train_two_layer(model, settings["steps"], batch=settings["batch"], lr=settings["lr"], seed=seed,
                              eval_every=settings["eval_every"], eval_batch=settings["eval_batch"])
    held_out, half = repeated_sequences(settings["eval_batch"], model.n, model.vocab,
                                        seed=np.random.SeedSequence([seed, 0]))
    logits, _, weights2 = forward(model, held_out, ablate_layer1_in_keys=True)
    dropped = [s for s, loss in zip(history["step"], history["loss_second"]) if loss < DROPPED]
    summary = {"seed": seed, "loss_first": history["loss_first"][-1], "loss_second": history["loss_second"][-1],
               "drop_step": dropped[0] if dropped else -1, "previous": history["previous"][-1][0],
               "induction": history["induction"][-1][0], "ablated_induction": float(induction_score(weights2, half)[0]),
               "ablated_loss_second": half_losses(logits, held_out, half)[1]}
    return model, history, summary
