"""The table of published models: counts against hand computations, citations against references.bib."""

import re
from pathlib import Path

import pytest

import mha_lessons as M
from mha_lessons.models import PUBLISHED, by_name

ROOT = Path(__file__).resolve().parent.parent


# Written out by hand from the layer's shapes, not from param_count:
# W_Q, W_K (d_model, h d_k), W_V (d_model, h d_v), W_O (h d_v, d_model), and the biases where the model has them.
HAND_COUNTS = {
    "BERT-base": 4 * 768 * 768 + 4 * 768,                   # square matrices, four biases of 768
    "Transformer base": 4 * 512 * 512,                      # no biases
    "GPT-3 175B": 4 * 12288 * 12288,                        # biases not stated: counted without
    "LLaMA-65B": 4 * 8192 * 8192,
    "T5-11B": 2 * 1024 * (128 * 128) + 2 * 1024 * (128 * 128),   # 128 heads of 128: h d_k = 16384, not 1024
    "Gemma-7B": 4 * 3072 * (16 * 256),                      # h d_k = 4096, not 3072
}


@pytest.mark.parametrize("name", sorted(HAND_COUNTS))
def test_attention_params_match_a_hand_count(name):
    assert by_name(name).attention_params() == HAND_COUNTS[name]


def test_with_biases_the_count_adds_two_query_key_biases_one_value_bias_and_one_output_bias():
    gemma = by_name("Gemma-7B")
    with_bias = M.complexity.param_count(gemma.d_model, gemma.num_heads, bias=True, d_k=gemma.d_k, d_v=gemma.d_v)
    assert with_bias - gemma.attention_params() == 2 * 16 * 256 + 16 * 256 + 3072


def test_exactly_t5_and_gemma_break_d_k_equals_d_model_over_h():
    breaking = {c.name for c in PUBLISHED if not c.heads_fill_d_model}
    assert breaking == {"T5-11B", "Gemma-7B"}
    for config in PUBLISHED:
        assert config.heads_fill_d_model == (config.d_model % config.num_heads == 0
                                             and config.d_k == config.d_v == config.d_model // config.num_heads)


def test_every_row_is_cited_and_every_key_is_in_references_bib():
    keys = set(re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "references.bib").read_text(), flags=re.MULTILINE))
    for config in PUBLISHED:
        assert config.cite, f"{config.name} cites no source"
        for key in config.cite:
            assert key in keys, f"{config.name} cites {key!r}, which is not in references.bib"


def test_rows_are_well_formed_and_names_unique():
    assert len({c.name for c in PUBLISHED}) == len(PUBLISHED)
    for config in PUBLISHED:
        for value in (config.d_model, config.num_heads, config.d_k, config.d_v):
            assert isinstance(value, int) and value > 0
        assert config.bias in (True, False, None)
        assert config.bias_source
        assert (config.bias is None) == (config.bias_source == "not stated")


def test_by_name_names_the_choices_when_the_name_is_unknown():
    with pytest.raises(ValueError, match="no published configuration is called 'GPT-5'.*BERT-base"):
        by_name("GPT-5")


def test_chapter_3_cites_the_sources_of_every_row():
    import json

    nb = json.loads((ROOT / "book" / "03_multi_head_attention.ipynb").read_text())
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for config in PUBLISHED:
        for key in config.cite:
            assert re.search(r"\{cite:[tp]\}`[^`]*\b" + re.escape(key) + r"\b", prose), (
                f"chapter 3 shows {config.name} but never cites {key}")


def test_head_count_ablation_agrees_with_what_the_papers_text_says_of_its_table():
    # Vaswani et al. (2017), section 6.2, in words: rows (A) vary h and d_k = d_v "keeping the amount of computation
    # constant", and "single-head attention is 0.9 BLEU worse than the best setting"; the base row (h = 8) has
    # perplexity 4.92 and BLEU 25.8 in Table 3 and d_k = d_model / h = 64 in section 3.2.2.
    from mha_lessons.models import HEAD_COUNT_ABLATION

    assert [row[0] for row in HEAD_COUNT_ABLATION] == [1, 4, 8, 16, 32]
    assert all(h * d_k == 512 for h, d_k, _, _ in HEAD_COUNT_ABLATION)
    assert (8, 64, 4.92, 25.8) in HEAD_COUNT_ABLATION
    bleu = {h: b for h, _, _, b in HEAD_COUNT_ABLATION}
    assert round(max(bleu.values()) - bleu[1], 1) == 0.9
    assert bleu[32] < max(bleu.values())       # "quality also drops off with too many heads"
