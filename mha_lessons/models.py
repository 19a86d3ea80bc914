"""Published multi-head attention configurations, as data, each with the papers that state it.

Each row gives the sizes of one attention layer of a published model: ``d_model``,
the number of heads ``h`` and the head widths ``d_k`` (queries and keys) and
``d_v`` (values), whether the four projections have biases, and the keys of the
papers in ``references.bib`` that give the sizes. The parameter count comes
from ``complexity.param_count``, never from the row.

Where the numbers come from (the papers' tables and text):

- Transformer base and big: Table 3 of Vaswani et al. (2017), d_k = d_v = 64 in
  both (the big model's blank d_k, d_v entries mean "as in base"). The paper's
  equations have no biases in the projections.
- BERT-base and BERT-large: Devlin et al. (2019), (H, A) = (768, 12) and (1024, 16);
  the heads are H / A = 64 wide, as in the Transformer implementation the paper
  says it follows.
- GPT-2 small: d_model = 768 in Table 2 of Radford et al. (2019), which says its
  smallest model is equivalent to the original GPT; that GPT had 12 heads of
  768-dimensional states (Radford et al., 2018).
- GPT-3 175B: Table 2.1 of Brown et al. (2020): d_model = 12288, 96 heads, d_head = 128.
- LLaMA-7B and LLaMA-65B: Table 2 of Touvron et al. (2023): (dimension, heads)
  = (4096, 32) and (8192, 64), heads 128 wide.
- T5-11B: section 3.7 of Raffel et al. (2020): d_model = 1024, 128 heads, d_kv = 128.
- Gemma-7B: Table 1 of the Gemma Team (2024): d_model = 3072, 16 heads (and 16
  key/value heads, so plain multi-head attention), head size 256.

``bias`` is ``None`` where no source we cite states it (GPT-3); ``bias_source``
says where each True or False comes from.
"""

from dataclasses import dataclass
from typing import Optional

from .complexity import param_count


@dataclass(frozen=True)
class AttentionConfig:
    """The attention layer of one published model.

    Attributes
    ----------
    name : str
    d_model, num_heads, d_k, d_v : int
        Token width, number of heads ``h``, width of each head's queries and keys, and of its values.
    bias : bool or None
        Whether W_Q, W_K, W_V and W_O have biases; ``None`` where the sources do not say.
    cite : tuple of str
        Keys in ``references.bib`` of the papers that give these sizes.
    bias_source : str
        Where the bias choice is stated.
    """

    name: str
    d_model: int
    num_heads: int
    d_k: int
    d_v: int
    bias: Optional[bool]
    cite: tuple
    bias_source: str

    @property
    def heads_fill_d_model(self):
        """True when ``d_k = d_v = d_model / h``, the choice under which ``h`` drops out of the parameter count."""
        return self.num_heads * self.d_k == self.d_model == self.num_heads * self.d_v

    def attention_params(self):
        """Parameters of one attention layer, from ``param_count``; an unknown bias is counted as none."""
        return param_count(self.d_model, self.num_heads, bias=bool(self.bias), d_k=self.d_k, d_v=self.d_v)


_PAPER_EQUATIONS = "the paper's equations have none; its tensor2tensor code has none"
_LLAMA_CODE = "the released code (bias=False)"

PUBLISHED = (
    AttentionConfig("Transformer base", 512, 8, 64, 64, False, ("vaswani2017attention",), _PAPER_EQUATIONS),
    AttentionConfig("Transformer big", 1024, 16, 64, 64, False, ("vaswani2017attention",), _PAPER_EQUATIONS),
    AttentionConfig("BERT-base", 768, 12, 64, 64, True, ("devlin2019bert",), "the released code (dense layers with biases)"),
    AttentionConfig("BERT-large", 1024, 16, 64, 64, True, ("devlin2019bert",), "the released code (dense layers with biases)"),
    AttentionConfig("GPT-2 small", 768, 12, 64, 64, True, ("radford2019language", "radford2018improving"),
                    "the released code (each projection has a bias b)"),
    AttentionConfig("T5-11B", 1024, 128, 128, 128, False, ("raffel2020exploring",),
                    "the released checkpoints (no bias weights)"),
    AttentionConfig("GPT-3 175B", 12288, 96, 128, 128, None, ("brown2020language",), "not stated"),
    AttentionConfig("LLaMA-7B", 4096, 32, 128, 128, False, ("touvron2023llama1",), _LLAMA_CODE),
    AttentionConfig("LLaMA-65B", 8192, 64, 128, 128, False, ("touvron2023llama1",), _LLAMA_CODE),
    AttentionConfig("Gemma-7B", 3072, 16, 256, 256, False, ("gemmateam2024gemma",),
                    "the released configuration (attention_bias: false)"),
)
"""The published configurations, in order of publication."""


def by_name(name):
    """The row of ``PUBLISHED`` called ``name``.

    >>> by_name("LLaMA-7B").d_k
    128
    """
    for config in PUBLISHED:
        if config.name == name:
            return config
    raise ValueError(f"no published configuration is called {name!r}; there are {[c.name for c in PUBLISHED]}")


HEAD_COUNT_ABLATION = (
    # (h, d_k = d_v, perplexity, BLEU): Table 3 of Vaswani et al. (2017), the base row and rows (A)
    (1, 512, 5.29, 24.9),
    (4, 128, 5.00, 25.5),
    (8, 64, 4.92, 25.8),
    (16, 32, 4.91, 25.8),
    (32, 16, 5.01, 25.4),
)
"""Vaswani et al. (2017), Table 3: the base Transformer (d_model = 512) with h heads of width d_k = d_v = 512 / h,
so that h·d_k stays 512: "keeping the amount of computation constant", in the paper's words, and with it the
parameter count. Perplexity (per word piece) and BLEU on the English-to-German development set, newstest2013, as
the paper prints them (checked against the paper's text). The row h = 8 is the base model; the others are the rows
(A). The paper gives no error bars."""
