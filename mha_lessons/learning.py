"""What the course's small models share to learn (chapters 13 and 14): embeddings and parameters by name, the loss,
Adam, and the loop that trains on fresh batches.

``training.py`` (one attention layer between embeddings and a read-out) and ``induction.py`` (two
attention layers on a residual stream) build on it. The optimiser is Adam (Kingma and Ba, 2015, *Adam:
A Method for Stochastic Optimization*) in a few lines of numpy. Axis names: B sequences, n positions,
V vocabulary, d_model the width of a token.
"""

from dataclasses import dataclass, fields

import numpy as np

from .params import MHAParams
from .task import IGNORE


@dataclass
class EmbeddedModel:
    """What every small model starts with: token embeddings E (V, d_model) and position embeddings P (n, d_model).

    A model adds its own fields: attention layers (``MHAParams``) and arrays; ``arrays`` finds them all.
    """

    embed: np.ndarray
    pos: np.ndarray

    @property
    def vocab(self):
        """V, the number of tokens (0 .. V - 1)."""
        return self.embed.shape[0]

    @property
    def n(self):
        """The number of positions."""
        return self.pos.shape[0]

    def arrays(self):
        """Every parameter array by name (an attention layer's as ``attn.w_q``, ...): the arrays, not copies."""
        named = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, MHAParams):
                named.update({f"{f.name}.{name}": a for name, a in value.arrays().items()})
            elif isinstance(value, np.ndarray):
                named[f.name] = value
        return named

    def size(self):
        """The number of parameters."""
        return sum(a.size for a in self.arrays().values())

    def check_tokens(self, tokens):
        """``tokens`` as a (B, n) integer array of tokens 0 .. V - 1; ValueError naming what is wrong otherwise."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens must be a (B, n) array of integers, got shape {tokens.shape} and dtype "
                             f"{tokens.dtype}")
        if tokens.shape[1] != self.n:
            raise ValueError(f"tokens has shape {tokens.shape}, but the model has position embeddings for n = {self.n}")
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.vocab):
            raise ValueError(f"tokens must lie in 0 .. {self.vocab - 1}, got values {tokens.min()} .. {tokens.max()}")
        return tokens


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


def adam_step(params, grads, state, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """One Adam step, in place: each array moves by −lr m̂ / (√v̂ + ε).

    Parameters
    ----------
    params, grads : dicts of name -> ndarray (``EmbeddedModel.arrays()``)
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


def train_with_adam(model, steps, *, batch_at, loss_and_grads, evaluate, lr, eval_every):
    """Train ``model`` in place: at step t = 1 .. steps, the gradients on ``batch_at(t)`` and one ``adam_step``.

    ``batch_at(t)`` returns the arguments that follow the model in ``loss_and_grads(model, ...)``,
    which returns (loss, gradients shaped like the model). ``evaluate(step)`` runs at step 0, every
    ``eval_every`` steps and after the last.

    Examples
    --------
    >>> model = EmbeddedModel(np.ones((2, 1)), np.ones((3, 1)))
    >>> def toy_grads(model, target):                    # the loss |E - target|², summed
    ...     return None, EmbeddedModel(2 * (model.embed - target), np.zeros_like(model.pos))
    >>> seen = []
    >>> train_with_adam(model, 4, batch_at=lambda t: (0.0,), loss_and_grads=toy_grads, evaluate=seen.append,
    ...                 lr=0.1, eval_every=3)
    >>> seen, model.embed.round(2).ravel().tolist()      # four steps of 0.1 towards 0
    ([0, 3, 4], [0.6, 0.6])
    """
    params, state = model.arrays(), {}
    evaluate(0)
    for step in range(1, steps + 1):
        _, grads = loss_and_grads(model, *batch_at(step))
        adam_step(params, grads.arrays(), state, lr)
        if step % eval_every == 0 or step == steps:
            evaluate(step)
