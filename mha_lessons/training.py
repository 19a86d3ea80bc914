"""A tiny attention model (chapter 13), trained by our own gradients on a task that needs two relations at once.

The task (``task.py``): at every position, name the previous token and the
first token of the position's segment.

The model. One multi-head attention layer (``multihead.py``) with a causal
mask, between embeddings and a linear read-out. By default where a head looks
depends on positions only and what it fetches is tokens only:

    x_qk   = P                                  (n, d_model)   position embeddings
    x_v    = E[tokens]                          (B, n, d_model) token embeddings
    y, A   = MHA(x_qk, x_qk, x_v, causal mask)  (B, n, d_model), (h, n, n)
    logits = y W_out + b_out                    (B, n, R V) -> (B, n, R, V)
    loss   = mean cross-entropy of the R predictions at every scored position

With ``keys_see_tokens=True`` the three inputs are all ``E[tokens] + P``, as in
a usual Transformer, and the weights become (B, h, n, n). ``values_see_positions``
sets the values apart from the queries and keys (by default it follows
``keys_see_tokens``): ``keys_see_tokens=True, values_see_positions=False`` gives
queries and keys ``E[tokens] + P`` and values ``E[tokens]``, the ablation that
changes one thing at a time. There is no residual
connection: whatever the read-out sees at position i, a head fetched it.

Training uses the package's own gradients: ``grads.mha_backward`` (chapter 5)
for the attention layer, and short backward passes, each beside its forward,
for the embeddings and the read-out. The loss, Adam and the training loop are
shared with ``induction.py`` and live in ``learning.py``; the model's parameters
and inputs are in ``tiny_model.py`` (all reachable here too). Every random draw is seeded, so a run
repeats exactly.

Axis names (as in ``multihead.py``):

    B         sequences in a batch
    n         positions of a sequence (queries and keys: self-attention)
    V         vocabulary size (tokens are 0 .. V - 1)
    R         relations, 2: previous token, first token of the segment
    h, d_k    heads, width of a head (d_model / h)
    d_model   width of a token vector
"""

import numpy as np

from .attention import causal_mask
from .grads import _project_backward, mha_backward
from .learning import adam_step, cross_entropy, train_with_adam  # noqa: F401  (adam_step: reachable here)
from .multihead import _project, multihead_attention
from .task import IGNORE, RELATIONS, distinct_queries, make_task
from .tiny_model import (TinyModel, attention_inputs, attention_inputs_backward,  # noqa: F401  (reachable here)
                         init_model)

def forward(model, tokens):
    """The model's scores for every relation and token, and every head's attention weights.

    Parameters
    ----------
    model : TinyModel
    tokens : ndarray of int, (B, n)

    Returns
    -------
    logits : ndarray, (B, n, R, V)
    weights : ndarray, (h, n, n); with keys_see_tokens (B, h, n, n)
        By default the weights depend on positions only: one (h, n, n)
        array serves every sequence.

    Examples
    --------
    >>> model = init_model(vocab=5, n=4, d_model=8, num_heads=2)
    >>> logits, weights = forward(model, np.zeros((3, 4), dtype=int))
    >>> logits.shape, weights.shape
    ((3, 4, 2, 5), (2, 4, 4))
    """
    tokens = model.check_tokens(tokens)
    x_qk, x_v = attention_inputs(model, tokens)
    y, weights = multihead_attention(x_qk, x_qk, x_v, model.attn, causal_mask(model.n))  # y (B, n, d_model)
    logits = _project(y, model.w_out, model.b_out)  # (B, n, d_model) @ (d_model, R V) -> (B, n, R V)
    return logits.reshape(*tokens.shape, len(RELATIONS), model.vocab), weights  # (B, n, R V) -> (B, n, R, V)


def loss_and_grads(model, tokens, targets):
    """The loss on a batch and its gradient with respect to every parameter, by backpropagation.

    Parameters
    ----------
    model : TinyModel
    tokens : ndarray of int, (B, n)
    targets : ndarray of int, (B, n, R)

    Returns
    -------
    loss : float
    grads : TinyModel
        ∂loss/∂(each parameter), in a TinyModel of the same shapes.

    Examples
    --------
    >>> model = init_model(vocab=4, n=4, d_model=4, num_heads=2)
    >>> tokens, targets = make_task(2, n=4, vocab=4, segment=2)
    >>> loss, grads = loss_and_grads(model, tokens, targets)
    >>> grads.attn.w_q.shape, grads.embed.shape
    ((4, 4), (4, 4))
    """
    tokens = model.check_tokens(tokens)
    targets = np.asarray(targets)
    if targets.shape != tokens.shape + (len(RELATIONS),):
        raise ValueError(f"targets has shape {targets.shape}; for tokens of shape {tokens.shape} "
                         f"it must be {tokens.shape + (len(RELATIONS),)}")
    mask = causal_mask(model.n)
    # forward
    x_qk, x_v = attention_inputs(model, tokens)
    y, _ = multihead_attention(x_qk, x_qk, x_v, model.attn, mask)  # (B, n, d_model)
    logits = _project(y, model.w_out, model.b_out)  # (B, n, R V)
    loss, d_logits = cross_entropy(logits.reshape(targets.shape + (model.vocab,)), targets)  # (B, n, R, V)
    # backward of the read-out, logits = y W_out + b_out (eq-ch5-proj)
    d_logits = d_logits.reshape(logits.shape)  # (B, n, R, V) -> (B, n, R V)
    d_y, d_w_out, d_b_out = _project_backward(y, model.w_out, d_logits, True)  # d_y (B, n, d_model)
    # backward of the attention layer: chapter 5's mha_backward
    dx_q, dx_k, dx_v, d_attn = mha_backward(x_qk, x_qk, x_v, model.attn, d_y, mask)
    # backward of the embeddings; x_qk was used twice, as queries and as keys (eq-ch5-three-paths)
    d_embed, d_pos = attention_inputs_backward(model, tokens, dx_q + dx_k, dx_v)
    return loss, TinyModel(d_embed, d_pos, d_attn, d_w_out, d_b_out, model.keys_see_tokens, model.values_see_positions)


# ---------------------------------------------------------------- training


def accuracy(model, tokens, targets, positions=None):
    """Fraction of predictions that are right: per relation, and for both relations at once.

    Parameters
    ----------
    model : TinyModel
    tokens : ndarray of int, (B, n)
    targets : ndarray of int, (B, n, R)
    positions : boolean (n,), optional
        Count only these query positions (for example ``distinct_queries``).

    Returns
    -------
    dict: "previous" and "first" (each relation over the positions where it
    exists) and "both" (positions where every existing relation is right).

    Examples
    --------
    >>> model = init_model(vocab=4, n=4, d_model=4, num_heads=2)
    >>> sorted(accuracy(model, *make_task(8, n=4, vocab=4, segment=2)))
    ['both', 'first', 'previous']
    """
    logits, _ = forward(model, tokens)
    return _accuracy(logits, targets, positions)


def _accuracy(logits, targets, positions=None):
    right = logits.argmax(axis=-1) == targets  # (B, n, R)
    scored = targets != IGNORE  # (B, n, R)
    if positions is not None:
        scored = scored & np.asarray(positions, dtype=bool)[:, None]  # (B, n, R) & (n, 1)
    result = {name: float(right[..., r][scored[..., r]].mean()) for r, name in enumerate(RELATIONS)}
    counted = scored.any(axis=-1)  # (B, n): positions with at least one counted relation
    result["both"] = float((right | ~scored).all(axis=-1)[counted].mean())
    return result


def train(model, steps, *, segment=4, batch=64, lr=0.01, seed=0, eval_every=25, eval_batch=512):
    """Train ``model`` in place with Adam on fresh batches of the task; return the history.

    Step t draws a new batch from seed (seed, 1, t), computes the gradients
    with ``loss_and_grads`` and takes one ``adam_step``. At step 0, every
    ``eval_every`` steps and at the end, the loss and the accuracies are
    measured on one fixed held-out batch (seed (seed, 0)).

    Parameters
    ----------
    model : TinyModel
        Trained in place; its n and V fix the task's.
    steps : int
    segment : int
        The task's segment length.
    batch, lr, seed, eval_every, eval_batch
        Batch size, Adam's learning rate, seed, and the evaluation's schedule and size.

    Returns
    -------
    dict of lists: "step", "loss", and the accuracies "previous", "first",
    "both" (all positions) and "both_distinct" (only ``distinct_queries``).

    Examples
    --------
    >>> model = init_model(vocab=4, n=4, d_model=4, num_heads=2)
    >>> history = train(model, 4, segment=2, batch=8, eval_every=2, eval_batch=8)
    >>> history["step"]
    [0, 2, 4]
    """
    if steps < 0 or batch < 1 or eval_every < 1:
        raise ValueError(f"train needs steps >= 0, batch >= 1 and eval_every >= 1, "
                         f"got steps = {steps}, batch = {batch}, eval_every = {eval_every}")
    held_out = make_task(eval_batch, model.n, model.vocab, segment, seed=np.random.SeedSequence([seed, 0]))
    distinct = distinct_queries(model.n, segment)
    history = {"step": [], "loss": [], "previous": [], "first": [], "both": [], "both_distinct": []}

    def evaluate(step):
        logits, _ = forward(model, held_out[0])  # (eval_batch, n, R, V)
        history["step"].append(step)
        history["loss"].append(cross_entropy(logits, held_out[1])[0])
        for name, value in _accuracy(logits, held_out[1]).items():
            history[name].append(value)
        history["both_distinct"].append(_accuracy(logits, held_out[1], distinct)["both"])

    def batch_at(step):  # a fresh batch at every step: (tokens, targets)
        return make_task(batch, model.n, model.vocab, segment, seed=np.random.SeedSequence([seed, 1, step]))

    train_with_adam(model, steps, batch_at=batch_at, loss_and_grads=loss_and_grads, evaluate=evaluate, lr=lr,
                    eval_every=eval_every)
    return history


# ---------------------------------------------------------------- looking inside


def head_attention(model, tokens=None):
    """Every head's attention weights: (h, n, n), or (B, h, n, n) with keys_see_tokens. Rows are queries.

    By default the weights depend on positions only, and ``tokens`` may be
    left out; with ``keys_see_tokens`` they depend on the tokens (B, n).

    Examples
    --------
    >>> w = head_attention(init_model(vocab=5, n=4, d_model=8, num_heads=2))
    >>> w.shape, np.allclose(w.sum(axis=-1), 1)
    ((2, 4, 4), True)
    """
    if tokens is None:
        if model.keys_see_tokens:
            raise ValueError("this model's weights depend on the tokens: pass tokens of shape (B, n)")
        tokens = np.zeros((1, model.n), dtype=int)  # any tokens give the same weights
    return forward(model, tokens)[1]
