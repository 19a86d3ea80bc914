"""A tiny attention model, trained by the package's own gradients on a task that needs two relations at once.

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
for the embeddings, the read-out and the loss. The optimiser is Adam (Kingma
and Ba, 2015, *Adam: A Method for Stochastic Optimization*) in a few lines of
numpy. Every random draw is seeded, so a run repeats exactly.

Axis names (as in ``multihead.py``):

    B         sequences in a batch
    n         positions of a sequence (queries and keys: self-attention)
    V         vocabulary size (tokens are 0 .. V - 1)
    R         relations, 2: previous token, first token of the segment
    h, d_k    heads, width of a head (d_model / h)
    d_model   width of a token vector
"""

import math
from dataclasses import dataclass, fields

import numpy as np

from .attention import causal_mask
from .grads import _project_backward, _sum_to_shape, mha_backward
from .multihead import MHAParams, _project, init_params, multihead_attention
from .task import IGNORE, RELATIONS, distinct_queries, make_task

# ---------------------------------------------------------------- the model


@dataclass
class TinyModel:
    """Parameters of the tiny model: embeddings, one attention layer, a read-out.

    embed : (V, d_model), pos : (n, d_model), attn : MHAParams,
    w_out : (d_model, R V), b_out : (R V,); keys_see_tokens : bool; values_see_positions : bool or None,
    None meaning "the same as keys_see_tokens" (see the module's docstring).
    """

    embed: np.ndarray
    pos: np.ndarray
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
    def vocab(self):
        return self.embed.shape[0]

    @property
    def n(self):
        return self.pos.shape[0]

    @property
    def num_heads(self):
        return self.attn.num_heads

    def arrays(self):
        """Every parameter array by name (the attention's as ``attn.w_q``, ...): the arrays themselves, not copies."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("attn", "keys_see_tokens", "values_see_positions")}
        named.update({f"attn.{name}": a for name, a in self.attn.arrays().items()})
        return named

    def size(self):
        """The number of parameters."""
        return sum(a.size for a in self.arrays().values())


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


def _check_tokens(model, tokens):
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be a (B, n) array of integers, got shape {tokens.shape} and dtype {tokens.dtype}")
    if tokens.shape[1] != model.n:
        raise ValueError(f"tokens has shape {tokens.shape}, but the model has position embeddings for n = {model.n}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= model.vocab):
        raise ValueError(f"tokens must lie in 0 .. {model.vocab - 1}, got values {tokens.min()} .. {tokens.max()}")
    return tokens


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
    tokens = _check_tokens(model, tokens)
    x_qk, x_v = attention_inputs(model, tokens)
    y, weights = multihead_attention(x_qk, x_qk, x_v, model.attn, causal_mask(model.n))  # y (B, n, d_model)
    logits = _project(y, model.w_out, model.b_out)  # (B, n, d_model) @ (d_model, R V) -> (B, n, R V)
    return logits.reshape(*tokens.shape, len(RELATIONS), model.vocab), weights  # (B, n, R V) -> (B, n, R, V)


def cross_entropy(logits, targets):
    """Mean cross-entropy over the targets that exist, and its gradient with respect to the logits.

    Parameters
    ----------
    logits : ndarray, (..., V)
    targets : ndarray of int, (...), -1 where not scored

    Returns
    -------
    loss : float
        −mean log softmax(logits)[target] over the N scored targets.
    d_logits : ndarray, (..., V)
        (softmax(logits) − onehot(target)) / N, zero where not scored.

    Examples
    --------
    >>> loss, d = cross_entropy(np.zeros((2, 2)), np.array([0, -1]))
    >>> round(loss, 4), d                       # log 2 for the one scored target
    (0.6931, array([[-0.5,  0.5],
           [ 0. ,  0. ]]))
    """
    targets = np.asarray(targets)
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits of shape {logits.shape} need targets of shape {logits.shape[:-1]}, "
                         f"got {targets.shape}")
    scored = targets != IGNORE  # (...)
    count = max(int(scored.sum()), 1)
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (..., V): exp stays finite
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # log softmax, (..., V)
    index = np.where(scored, targets, 0)[..., None]  # (..., 1); 0 stands in where not scored
    loss = -np.sum(np.take_along_axis(log_p, index, axis=-1)[..., 0] * scored) / count
    d_logits = np.exp(log_p)  # the softmax, (..., V)
    np.put_along_axis(d_logits, index, np.take_along_axis(d_logits, index, axis=-1) - 1, axis=-1)  # − one-hot
    d_logits = np.where(scored[..., None], d_logits / count, 0.0)  # (..., V); not scored: no gradient
    return float(loss), d_logits


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
    tokens = _check_tokens(model, tokens)
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


def adam_step(params, grads, state, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """One Adam step, in place: each array moves by −lr m̂ / (√v̂ + ε).

    Parameters
    ----------
    params, grads : dicts of name -> ndarray (``TinyModel.arrays()``)
        The parameters are updated in place.
    state : dict
        Adam's memory: start with ``{}``; it keeps the step count and, for
        every array, the running means m of the gradient and v of its square.
    lr, beta1, beta2, eps : float

    Examples
    --------
    >>> p, state = {"w": np.array([1.0, -1.0])}, {}
    >>> adam_step(p, {"w": np.array([0.5, -2.0])}, state, lr=0.1)   # the first step is lr · sign(g)
    >>> p["w"]
    array([ 0.9, -0.9])
    """
    state["step"] = step = state.get("step", 0) + 1
    for name, g in grads.items():
        m = state.setdefault(("m", name), np.zeros_like(g))
        v = state.setdefault(("v", name), np.zeros_like(g))
        m += (1 - beta1) * (g - m)  # m = β1 m + (1 − β1) g
        v += (1 - beta2) * (g * g - v)  # v = β2 v + (1 − β2) g²
        m_hat = m / (1 - beta1 ** step)  # both start at 0: undo that bias
        v_hat = v / (1 - beta2 ** step)
        params[name] -= lr * m_hat / (np.sqrt(v_hat) + eps)


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

    params, state = model.arrays(), {}
    evaluate(0)
    for step in range(1, steps + 1):
        tokens, targets = make_task(batch, model.n, model.vocab, segment, seed=np.random.SeedSequence([seed, 1, step]))
        _, grads = loss_and_grads(model, tokens, targets)
        adam_step(params, grads.arrays(), state, lr)
        if step % eval_every == 0 or step == steps:
            evaluate(step)
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
