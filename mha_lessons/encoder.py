"""The encoder's forward pass in the package's own code (chapter 15): all-MiniLM-L6-v2 run on numpy.

One layer, as BERT computes it (the attention is the package's ``multihead_attention``)::

    a = MHA(x, x, x)                      (B, n, d_model), weights (B, h, n, n)
    x = LayerNorm_1(x + a)
    f = gelu(x W_1 + b_1) W_2 + b_2       (B, n, d_ff) -> (B, n, d_model)
    x = LayerNorm_2(x + f)

Axis names, as in the rest of the package: ``B`` sentences, ``n`` tokens (queries and keys: this is
self-attention, m = n), ``L`` layers (``N_layers`` on the notation page), ``h`` heads, ``d_model``,
``d_k``, ``d_ff`` the width of the feed-forward block. scipy (for the exact GELU's erf) is imported
inside ``gelu``. ``reference_bert`` builds the same model in ``transformers`` (imported inside), to
compare with.
"""

import json
import math
from dataclasses import dataclass

import numpy as np

from .attention import padding_mask
from .minilm import _model, read_files, tokenize
from .multihead import multihead_attention
from .params import MHAParams


def layer_norm(x, gamma, beta, eps):
    """(x - mean) / √(var + eps) · gamma + beta over the last axis (the feature axis, d_model)."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., n, 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (..., n, 1): the biased variance, as torch's
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x):
    """The exact GELU of BERT's ``hidden_act = "gelu"``: x Φ(x) = x (1 + erf(x / √2)) / 2."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # a Python float keeps float32 input float32


def without_heads(params, heads):
    """A copy of ``params`` in which the listed heads reach nothing: their rows of W_O are zero.

    The layer's output is concat @ W_O + b_O, and rows ``[i d_v, (i + 1) d_v)`` of W_O read head
    i's output, so zeroing them is the same as zeroing the head's output (Michel et al.'s mask).
    """
    w_o = params.w_o.copy()
    for head in heads:
        w_o[head * params.d_v:(head + 1) * params.d_v] = 0  # (h d_v, d_model): head's d_v rows
    return MHAParams(params.num_heads, params.w_q, params.w_k, params.w_v, w_o,
                     params.b_q, params.b_k, params.b_v, params.b_o)


def _removed_by_layer(removed, num_layers, num_heads):
    by_layer = [[] for _ in range(num_layers)]
    for item in removed:
        if len(item) != 2:
            raise ValueError(f"removed must hold (layer, head) pairs, got {item!r}")
        layer, head = (int(v) for v in item)
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise ValueError(f"no head ({layer}, {head}): layers run from 0 to {num_layers - 1}, "
                             f"heads from 0 to {num_heads - 1}")
        by_layer[layer].append(head)
    return by_layer


@dataclass
class Output:
    """What ``run`` computes for a batch: tokens per text, lengths (B,), the hidden states
    (L + 1, B, n, d_model) (the embeddings, then each layer's output) and the attention weights
    (L, B, h, n, n) of every layer and head."""

    tokens: list
    lengths: np.ndarray
    hidden: np.ndarray
    weights: np.ndarray


def run(texts, *, model=None, removed=()):
    """Run the model on a batch of texts with the package's ``multihead_attention``, optionally without some heads.

    Parameters
    ----------
    texts : list of str
    model : MiniLM, optional
        By default the float64 model from the installed wheel.
    removed : iterable of (layer, head) pairs
        Heads whose output is zeroed (see ``without_heads``), counted from 0.

    Returns
    -------
    Output

    Examples
    --------
    >>> out = run(["Heads attend.", "A longer second sentence."])
    >>> out.tokens[0]
    ['[CLS]', 'heads', 'attend', '.', '[SEP]']
    >>> out.hidden.shape, out.weights.shape      # (L + 1, B, n, d_model), (L, B, h, n, n)
    ((7, 2, 7, 384), (6, 2, 12, 7, 7))
    """
    model = _model(model)
    ids, lengths, tokens = tokenize(texts, model=model)
    n = ids.shape[1]
    if n > model.position.shape[0]:
        raise ValueError(f"{n} tokens; the model has positions for {model.position.shape[0]}")
    by_layer = _removed_by_layer(removed, model.num_layers, model.num_heads)
    x = model.word[ids] + model.position[:n] + model.token_type[0]  # (B, n, d_model)
    x = layer_norm(x, *model.ln_embed, model.eps)
    mask = padding_mask(lengths, n)  # (B, 1, n): no query attends to padding
    hidden, weights = [x], []
    for layer, heads in zip(model.layers, by_layer):
        x, w = encoder_layer(x, layer, mask, model.eps, removed=heads)
        hidden.append(x)
        weights.append(w)
    return Output(tokens, lengths, np.stack(hidden), np.stack(weights))


def encoder_layer(x, layer, mask, eps, *, removed=()):
    """One post-LN layer on x (B, n, d_model) -> (x (B, n, d_model), weights (B, h, n, n)); ``removed``: head numbers."""
    params = without_heads(layer.attention, removed) if len(removed) else layer.attention
    a, w = multihead_attention(x, x, x, params, mask)  # (B, n, d_model), (B, h, n, n)
    x = layer_norm(x + a, *layer.ln_1, eps)
    rows = x.reshape(-1, x.shape[-1])  # (B, n, d_model) -> (B n, d_model): one matrix product, not B of them
    f = gelu(rows @ layer.w_1 + layer.b_1) @ layer.w_2 + layer.b_2  # (B n, d_ff) -> (B n, d_model)
    return layer_norm(x + f.reshape(x.shape), *layer.ln_2, eps), w  # (B n, d_model) -> (B, n, d_model)


def pair_similarities(embeddings):
    """Cosine similarity of texts 0 and 1, 2 and 3, ...: unit rows (..., 2 P, d_model) -> (..., P).

    Examples
    --------
    >>> pair_similarities(np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.6, 0.8]]))
    array([0., 1.])
    """
    embeddings = np.asarray(embeddings)
    if embeddings.ndim < 2 or embeddings.shape[-2] % 2:
        raise ValueError(f"embeddings must be (..., 2 P, d_model), pairs one after the other; got shape "
                         f"{embeddings.shape}")
    return np.sum(embeddings[..., 0::2, :] * embeddings[..., 1::2, :], axis=-1)  # (..., P, d) -> (..., P)


def paraphrase_margin(similarities):
    """The least similar paraphrase minus the most similar unrelated pair: (..., P) -> (...).

    ``similarities`` holds P pairs' cosine similarities, the paraphrases first (the first P / 2),
    then the unrelated pairs, as the course's sentence lists are ordered. Positive when every
    paraphrase is closer than every unrelated pair.

    Examples
    --------
    >>> float(paraphrase_margin([0.875, 0.75, 0.25, 0.5]))   # 0.75 - 0.5
    0.25
    """
    similarities = np.asarray(similarities, dtype=float)
    if similarities.ndim < 1 or similarities.shape[-1] < 2 or similarities.shape[-1] % 2:
        raise ValueError(f"similarities must be (..., P) with P even, paraphrases first; got shape "
                         f"{similarities.shape}")
    half = similarities.shape[-1] // 2
    return similarities[..., :half].min(axis=-1) - similarities[..., half:].max(axis=-1)


def single_head_ablations(texts, *, model=None):
    """The embeddings of ``texts`` with each head removed alone: (L, h, N, d_model), unit rows.

    The same numbers as ``embed(texts, removed=[(l, i)])`` for every head (l, i), computed
    faster: the layers before l do not change, so each run starts from layer l's stored input.

    Examples
    --------
    >>> e = single_head_ablations(["The cat sat.", "It rained."])
    >>> e.shape
    (6, 12, 2, 384)
    >>> bool(np.allclose(e[4, 7], embed(["The cat sat.", "It rained."], removed=[(4, 7)])))
    True
    """
    model = _model(model)
    out = run(texts, model=model)
    h, B, n = model.num_heads, len(texts), out.hidden.shape[-2]
    mask = padding_mask(out.lengths, n)  # (B, 1, n)
    masks, lengths = np.tile(mask, (h, 1, 1)), np.tile(out.lengths, h)  # (h B, 1, n), (h B,): once per head
    result = np.empty((model.num_layers, h, B, model.d_model), dtype=out.hidden.dtype)
    for l in range(model.num_layers):
        # layer l without head i, from its stored input (the layers before l do not change), for each i:
        # the h results side by side as one batch, (h B, n, d_model), head by head
        x = np.concatenate([encoder_layer(out.hidden[l], model.layers[l], mask, model.eps, removed=[i])[0]
                            for i in range(h)])
        for k in range(l + 1, model.num_layers):  # the layers after l, for all h removals at once
            x, _ = encoder_layer(x, model.layers[k], masks, model.eps)
        pooled = mean_pool(x, lengths)  # (h B, d_model)
        result[l] = (pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)).reshape(h, B, -1)  # -> (h, B, d)
    return result


def attention_maps(text, *, model=None, removed=()):
    """The attention weights of every layer and head for one text: (tokens, weights (L, h, n, n)).

    ``tokens`` are the word pieces with ``[CLS]`` first and ``[SEP]`` last; ``weights[l, i]`` is
    head i of layer l, queries down, keys across (rows sum to 1).

    Examples
    --------
    >>> tokens, weights = attention_maps("The cat sat.")
    >>> tokens, weights.shape
    (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], (6, 12, 6, 6))
    >>> bool(np.allclose(weights.sum(axis=-1), 1))
    True
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    out = run([text], model=model, removed=removed)
    return out.tokens[0], out.weights[:, 0]  # (L, 1, h, n, n) -> (L, h, n, n)


def mean_pool(hidden, lengths):
    """The mean of each text's real tokens (padding left out): (B, n, d_model) -> (B, d_model)."""
    real = padding_mask(lengths, hidden.shape[-2])[:, 0, :, None]  # (B, 1, n) -> (B, n, 1)
    return (hidden * real).sum(axis=-2) / lengths[:, None].astype(hidden.dtype)  # (B, d_model)


def embed(texts, *, model=None, removed=()):
    """Sentence embeddings as sentence-transformers defines them for this model: (N, d_model), unit length.

    The last layer's output, averaged over each text's real tokens ([CLS] and [SEP] included,
    padding not), then divided by its length (L2-normalised): the model's ``1_Pooling`` and
    ``2_Normalize`` modules. ``removed`` as in ``run``.

    Examples
    --------
    >>> e = embed(["A cat sat on the mat.", "A kitten was sitting on a rug.", "Stocks fell sharply today."])
    >>> e.shape, bool(np.allclose(np.linalg.norm(e, axis=1), 1))
    ((3, 384), True)
    >>> bool(e[0] @ e[1] > e[0] @ e[2])   # the paraphrase is closer than the unrelated sentence
    True
    """
    out = run(texts, model=model, removed=removed)
    pooled = mean_pool(out.hidden[-1], out.lengths)  # (B, d_model)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


# ---------------------------------------------------------------- the reference implementation

def reference_bert(source=None, *, dtype="float32"):
    """The same checked files loaded into ``transformers``' ``BertModel`` (eval mode), for comparison.

    Built from the config and the state dict, so that nothing is looked up on the network. The
    file's pooler (a dense layer on [CLS]) is loaded too; sentence embeddings do not use it.
    """
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: it must not look online
    import torch
    from safetensors.torch import load as load_safetensors
    from transformers import BertConfig, BertModel

    files = read_files(source)
    config = BertConfig(**json.loads(files["config.json"]))
    config._attn_implementation = "eager"  # the implementation that returns the attention weights
    bert = BertModel(config)
    state = load_safetensors(files["model.safetensors"])
    missing, unexpected = bert.load_state_dict(state, strict=False)
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]  # a buffer, not a weight
    if missing or unexpected:
        raise ValueError(f"the weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    return bert.to(getattr(torch, dtype)).eval()


def reference_outputs(texts, bert, *, model=None):
    """Run ``reference_bert``'s model on the same tokens: hidden states (L + 1, B, n, d_model), weights (L, B, h, n, n)."""
    import torch

    ids, lengths, _ = tokenize(texts, model=model)
    attention_mask = padding_mask(lengths, ids.shape[1])[:, 0].astype(np.int64)  # (B, n): 1 for real tokens
    with torch.no_grad():
        out = bert(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(attention_mask),
                   output_hidden_states=True, output_attentions=True)
    hidden = np.stack([t.numpy() for t in out.hidden_states])
    weights = np.stack([t.numpy() for t in out.attentions])
    return hidden, weights
