"""Induction heads: a two-layer, attention-only model trained on repeated random segments (chapter 14).

The data (``induction_task.py``, whose names are reachable here too): sequences
whose first L tokens, distinct, come again right after them. Olsson et al.
(2022), *In-context Learning and Induction Heads*, describe the two-head
circuit that predicts the second copy: a *previous-token head* in layer 1
writes into each position which token came before it, and an *induction head*
in layer 2 looks for the position whose previous token is the current token
(its keys read layer 1's output), and copies the token it finds there.

The model, with a residual stream (each layer adds its output to its input):

    x0     = E[tokens] + P                      (B, n, d_model)
    x1     = x0 + MHA_1(x0, x0, x0, causal)     (B, n, d_model)
    x2     = x1 + MHA_2(x1, x1, x1, causal)     (B, n, d_model)
    logits = x2 W_U + b_U                       (B, n, V)
    loss   = mean cross-entropy of the next token, at positions 0 .. n - 2

The backward pass uses chapter 5's ``mha_backward`` for both layers (with the
three paths of self-attention added up), and a few lines for the rest, each
beside its forward. ``forward`` can also take layer 1's output out of layer 2's
keys, replaced by zero, by its mean, or by what layer 1 wrote for another
sequence (an *ablation*), to test that the induction head reads what the
previous-token head wrote. Axis names: B
sequences, n positions, L the length of the repeated segment, V vocabulary, h
heads per layer, d_model width.
"""

import math
from dataclasses import dataclass

import numpy as np

from ._checks import require_positive_int
from .attention import causal_mask
from .grads import _project_backward, mha_backward
from .learning import EmbeddedModel, cross_entropy, train_with_adam
from .induction_task import (  # noqa: F401  (reachable here: the chapter's data and scores)
    copy_positions, first_copy_floor, induction_score, next_token_targets, prefix_match_score,
    previous_token_score, repeated_sequences)
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


def forward(model, tokens, *, ablate_layer1_in_keys=False):
    """Logits and both layers' attention weights.

    Parameters
    ----------
    model : TwoLayerModel
    tokens : ndarray of int, (B, n)
    ablate_layer1_in_keys : False, True, "zero", "mean", "resample", or ndarray (n, d_model)
        What layer 2's keys read in place of layer 1's output ``y1`` (queries and
        values always read ``x1 = x0 + y1``). False: ``y1`` itself, no ablation.
        True or "zero": nothing, the keys read ``x0`` (*zero-ablation*). "mean":
        ``y1``'s mean over the B sequences at each position (*mean-ablation*, for
        a batch large enough to average over). "resample": the ``y1`` of the
        previous sequence in the batch (sequence b reads sequence b - 1's, the
        first the last's; *resample-ablation*, B >= 2). An array: that array, for
        instance ``layer1_mean`` of another batch.

    Returns
    -------
    logits : (B, n, V); weights1, weights2 : (B, h, n, n)

    Examples
    --------
    >>> model = init_two_layer(vocab=5, n=6, d_model=8, num_heads=2)
    >>> logits, w1, w2 = forward(model, repeated_sequences(3, 6, 5)[0], ablate_layer1_in_keys="mean")
    >>> logits.shape, w1.shape, w2.shape
    ((3, 6, 5), (3, 2, 6, 6), (3, 2, 6, 6))
    """
    tokens = model.check_tokens(tokens)
    ablation = _check_ablation(ablate_layer1_in_keys, model)
    if isinstance(ablation, str) and ablation == "resample" and len(tokens) < 2:
        raise ValueError(f"a resample-ablation needs B >= 2 sequences to swap, got B = {len(tokens)}")
    mask = causal_mask(model.n)
    x0 = model.embed[tokens] + model.pos  # (B, n) -> (B, n, d_model)
    y1, weights1 = multihead_attention(x0, x0, x0, model.attn1, mask)  # (B, n, d_model)
    x1 = x0 + y1  # the residual stream after layer 1
    if ablation is None:
        keys = x1
    elif isinstance(ablation, np.ndarray):
        keys = x0 + ablation  # (B, n, d_model) + (n, d_model)
    elif ablation == "zero":
        keys = x0
    elif ablation == "mean":
        keys = x0 + y1.mean(axis=0)  # (B, n, d_model) + (n, d_model)
    elif ablation == "resample":
        keys = x0 + _resample(y1)  # sequence b's keys get sequence b - 1's y1, (B, n, d_model)
    y2, weights2 = multihead_attention(x1, keys, x1, model.attn2, mask)
    x2 = x1 + y2
    return _project(x2, model.w_u, model.b_u), weights1, weights2  # (B, n, V)


def _resample(a):
    """Sequence b gets sequence b - 1's rows (the first the last's): a resample-ablation's donors, (B, ...)."""
    return np.roll(a, 1, axis=0)


def _check_ablation(ablation, model):
    """None (no ablation), "zero", "mean", "resample" or an (n, d_model) array; ValueError/TypeError otherwise."""
    if ablation is False:
        return None
    if ablation is True:
        return "zero"
    if isinstance(ablation, str):
        if ablation not in ("zero", "mean", "resample"):
            raise ValueError(f'ablate_layer1_in_keys must be False, True, "zero", "mean", "resample" or an array, '
                             f'got {ablation!r}')
        return ablation
    if not isinstance(ablation, np.ndarray):
        raise TypeError(f"ablate_layer1_in_keys must be a bool, a str or an ndarray, got {type(ablation).__name__}")
    if ablation.shape != model.pos.shape:
        raise ValueError(f"an array for ablate_layer1_in_keys must have shape (n, d_model) = {model.pos.shape}, "
                         f"got {ablation.shape}")
    return ablation


def layer1_mean(model, tokens):
    """Layer 1's output averaged over the B sequences, at each position: (n, d_model).

    What a mean-ablation puts in place of layer 1's output: it keeps what layer 1
    writes at a position whatever the tokens, and drops what depends on them.

    Examples
    --------
    >>> model = init_two_layer(vocab=5, n=6, d_model=8)
    >>> layer1_mean(model, repeated_sequences(4, 6, 5)[0]).shape
    (6, 8)
    """
    tokens = model.check_tokens(tokens)
    x0 = model.embed[tokens] + model.pos  # (B, n, d_model)
    return multihead_attention(x0, x0, x0, model.attn1, causal_mask(model.n))[0].mean(axis=0)  # (n, d_model)


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


def half_losses(logits, tokens, half):
    """The next-token loss over the first copy's predictions and over the second copy's (see ``copy_positions``)."""
    targets = next_token_targets(tokens)
    second, first = copy_positions(half, tokens.shape[1])
    return (cross_entropy(logits, np.where(first, targets, -1))[0],
            cross_entropy(logits, np.where(second, targets, -1))[0])


def evaluation_batch(seed, batch, n, vocab):
    """The held-out sequences on which a run with this seed is measured: ``repeated_sequences``' (tokens, half).

    Training batches are drawn from other streams of the same seed, so these sequences are never trained on.

    Examples
    --------
    >>> tokens, half = evaluation_batch(0, 3, 8, 6)
    >>> tokens.shape, half.shape
    ((3, 8), (3,))
    """
    return repeated_sequences(batch, n, vocab, seed=np.random.SeedSequence([seed, 0]))


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
    held_out, half = evaluation_batch(seed, eval_batch, model.n, model.vocab)
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
STARTED = 0.5  # ... and as dropping once it is this far below log V
ABLATIONS = ("zero", "mean", "resample")
INDUCTION_COLUMNS = ("seed", "loss_first", "loss_second", "drop_start", "drop_step", "previous", "induction",
                     "zero_induction", "zero_loss_second", "mean_induction", "mean_loss_second",
                     "resample_induction", "resample_loss_second", "resample_follows", "clean_follows")


def induction_run(seed, **overrides):
    """Train the chapter's two-layer model at one seed and summarise it (one row of the stored table).

    Returns
    -------
    model, history, summary : summary holds INDUCTION_COLUMNS: the last evaluation's losses and scores (head 0 of
    each layer); ``drop_start`` and ``drop_step``, the first evaluated steps at which the second copy's loss is
    below log V - STARTED and below DROPPED (-1 if never); on the same held-out batch, the induction score and
    the second copy's loss when layer 1's output is taken out of layer 2's keys, replaced by zero (``zero_...``),
    by its mean over the batch at each position (``mean_...``) or by another sequence's (``resample_...``; see
    ``forward``); and ``resample_follows``, the resample-ablated head's ``prefix_match_score`` with the keys read
    as the other sequences' (where their previous tokens point), ``clean_follows`` the unablated head's on the
    same keys.

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
    held_out, half = evaluation_batch(seed, settings["eval_batch"], model.n, model.vocab)
    def first_below(level):
        return next((s for s, loss in zip(history["step"], history["loss_second"]) if loss < level), -1)

    summary = {"seed": seed, "loss_first": history["loss_first"][-1], "loss_second": history["loss_second"][-1],
               "drop_start": first_below(math.log(model.vocab) - STARTED), "drop_step": first_below(DROPPED),
               "previous": history["previous"][-1][0], "induction": history["induction"][-1][0]}
    donors = _resample(held_out)  # the sequences a resample-ablation takes layer 1's output from
    layer2 = {}  # ablation -> layer 2's weights, (B, h, n, n)
    for kind in ABLATIONS:
        logits, _, layer2[kind] = forward(model, held_out, ablate_layer1_in_keys=kind)
        summary[f"{kind}_induction"] = float(induction_score(layer2[kind], half)[0])
        summary[f"{kind}_loss_second"] = half_losses(logits, held_out, half)[1]
    summary["resample_follows"] = float(prefix_match_score(layer2["resample"], half, held_out, donors)[0])
    clean = forward(model, held_out)[2]
    summary["clean_follows"] = float(prefix_match_score(clean, half, held_out, donors)[0])
    return model, history, summary
