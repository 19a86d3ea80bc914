"""The training runs of chapters 13 and 14, one row per model and seed, so that a claim can be checked over seeds.

``run(config, seed)`` trains one model of ``CONFIGS`` exactly as chapter 13
does and returns it with its history and a summary (a dict of numbers).
``scripts/ch13_seeds.py`` runs every configuration over many seeds and stores
the summaries in ``mha_lessons/results/ch13_seeds.csv``; the chapter reads that
table with ``load_table``, states a claim over the seeds with ``seed_range``,
and re-runs one seed to check that it matches. Chapter 14's two-layer model
(``induction.induction_run``) has its table too, stored by
``scripts/ch14_induction_seeds.py`` and read with ``load_induction_table``.

The configurations differ in what the attention layer reads (``training.py``):

    one           h = 1, queries and keys P, values E[tokens]
    two           h = 2, the same inputs
    loophole      h = 1, queries, keys and values all E[tokens] + P
    qk_tokens     h = 1, queries and keys E[tokens] + P, values E[tokens]   (one change: the weights see tokens)
    v_positions   h = 1, queries and keys P, values E[tokens] + P           (the other change: values see positions)

Axis names: h heads, n positions, R = 2 relations.
"""

import csv
import io

import numpy as np

from ..task import RELATIONS, distinct_queries, make_task, relation_mask, relation_positions, relation_score
from ..training import forward, head_attention, init_model, train

CONFIGS = {
    "one": dict(num_heads=1),
    "two": dict(num_heads=2),
    "loophole": dict(num_heads=1, keys_see_tokens=True),
    "qk_tokens": dict(num_heads=1, keys_see_tokens=True, values_see_positions=False),
    "v_positions": dict(num_heads=1, values_see_positions=True),
}
# chapter 13's sizes and schedule
SETTINGS = dict(vocab=8, n=12, segment=4, d_model=16, steps=400, lr=0.01, batch=64, eval_every=10, eval_batch=512)
SOLVED = 0.99  # "solved": both answers right at this fraction of the positions where the relations differ
TEST_SEED, TEST_BATCH = 5, 2000  # the new sequences on which the single head is examined position by position
LONG_STEPS = 1200  # the two models that let the weights see tokens are also trained this long
COLUMNS = ("config", "seed", "steps", "loss", "previous", "first", "both", "both_distinct", "solved_step",
           "score_previous_0", "score_first_0", "score_previous_1", "score_first_1",
           "same_right", "differ_right", "positions_agree")


def run(config, seed, **overrides):
    """Train one model of ``CONFIGS`` at one seed, as chapter 13 does.

    Parameters
    ----------
    config : str, a key of CONFIGS
    seed : int
        Seeds the initialisation and the batches (``init_model`` and ``train`` both get it).
    overrides
        Replacements for entries of SETTINGS (smaller runs in tests).

    Returns
    -------
    model : TinyModel, trained
    history : dict of lists, from ``train``
    summary : dict, one value per name of COLUMNS (NaN where a number does not apply):

        loss, previous, first, both, both_distinct
            the last evaluation of ``train`` (held-out batch);
        solved_step
            the first evaluated step from which both_distinct stays >= SOLVED, -1 if never;
        score_previous_ℓ, score_first_ℓ
            ``relation_score`` of head ℓ for each relation at the positions where they differ
            (models whose weights depend on positions only);
        same_right, differ_right
            one head with positions-only weights: both answers right, on TEST_BATCH new sequences at the
            positions where the relations differ, when the two tokens to name are equal, and when they differ;
        positions_agree
            one head with positions-only weights: at how many of those positions the relation the head
            serves better (higher accuracy) is the one it puts more weight on.

    Examples
    --------
    >>> _, history, summary = run("two", 0, steps=2, eval_every=1, eval_batch=8)
    >>> history["step"], summary["config"], summary["solved_step"]
    ([0, 1, 2], 'two', -1)
    """
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {sorted(CONFIGS)}, got {config!r}")
    settings = {**SETTINGS, **overrides}
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(SETTINGS)}")
    n, segment, vocab = settings["n"], settings["segment"], settings["vocab"]
    model = init_model(vocab, n, settings["d_model"], seed=seed, **CONFIGS[config])
    history = train(model, settings["steps"], segment=segment, batch=settings["batch"], lr=settings["lr"],
                    seed=seed, eval_every=settings["eval_every"], eval_batch=settings["eval_batch"])
    summary = dict.fromkeys(COLUMNS, float("nan"))
    summary.update(config=config, seed=seed, steps=settings["steps"])
    for name in ("loss", "previous", "first", "both", "both_distinct"):
        summary[name] = history[name][-1]
    below = np.flatnonzero(np.array(history["both_distinct"]) < SOLVED)
    steps = history["step"]
    summary["solved_step"] = steps[0] if below.size == 0 else (steps[below[-1] + 1] if below[-1] + 1 < len(steps)
                                                                 else -1)
    if not model.keys_see_tokens:
        weights = head_attention(model)  # (h, n, n)
        for head in range(model.num_heads):
            for relation in RELATIONS:
                marked = relation_mask(n, segment, relation, distinct_only=True)
                summary[f"score_{relation}_{head}"] = relation_score(weights[head], marked)
        if model.num_heads == 1:
            summary.update(single_head_by_position(model, weights[0], segment))
    return model, history, summary


def single_head_by_position(model, weights, segment):
    """For one head whose weights depend on positions only: how it answers at the positions where the relations differ.

    Parameters
    ----------
    model : TinyModel with one head and positions-only weights
    weights : ndarray, (n, n), its weights
    segment : int

    Returns
    -------
    dict with "same_right", "differ_right" and "positions_agree" (see ``run``), and "by_position", an (R, k)
    array of each relation's accuracy at each of the k positions where the relations differ.
    """
    n = model.n
    tokens, targets = make_task(TEST_BATCH, n, model.vocab, segment, seed=TEST_SEED)
    distinct = distinct_queries(n, segment)
    logits, _ = forward(model, tokens)  # (B, n, R, V)
    right = (logits.argmax(axis=-1) == targets)[:, distinct]  # (B, k, R)
    answers = targets[:, distinct]  # (B, k, R)
    same = answers[..., 0] == answers[..., 1]  # (B, k): the two tokens to name are equal
    both = right.all(axis=-1)  # (B, k)
    by_position = right.mean(axis=0).T  # (k, R) -> (R, k)
    queries = np.flatnonzero(distinct)
    previous_at, first_at = relation_positions(n, segment)
    omega = np.stack([weights[queries, previous_at[queries]], weights[queries, first_at[queries]]])  # (R, k)
    agree = np.argmax(by_position, axis=0) == np.argmax(omega, axis=0)  # (k,)
    return {"same_right": float(both[same].mean()), "differ_right": float(both[~same].mean()),
            "positions_agree": int(agree.sum()), "by_position": by_position}


def to_csv(rows):
    """The summaries as CSV text, columns in the order of COLUMNS."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def load_table(text=None):
    """The stored table of runs (``results/ch13_seeds.csv``) as a dict of numpy columns.

    Examples
    --------
    >>> table = load_table(to_csv([run("one", 0, steps=1, eval_batch=8)[2]]))
    >>> table["config"].tolist(), table["seed"].tolist(), table["steps"].tolist()
    (['one'], [0], [1])
    """
    if text is None:
        from .notebook import read_result

        text = read_result("ch13_seeds.csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows or set(rows[0]) != set(COLUMNS):
        raise ValueError(f"the table must have the columns {COLUMNS}")
    table = {}
    for name in COLUMNS:
        values = [row[name] for row in rows]
        if name == "config":
            table[name] = np.array(values)
        elif name in ("seed", "steps", "solved_step"):
            table[name] = np.array(values, dtype=int)
        else:
            table[name] = np.array([float(v) if v not in ("", "nan") else np.nan for v in values])
    return table


def seed_column(table, config, name, steps=None):
    """Column ``name`` of one configuration's runs, one value per seed, in the order of the seeds.

    ``steps`` picks the runs of that length (default: SETTINGS' steps). ValueError when no row matches.

    Examples
    --------
    >>> table = load_table(to_csv([run("one", s, steps=1, eval_batch=8)[2] for s in (1, 0)]))
    >>> seed_column(table, "one", "seed", steps=1).tolist()
    [0, 1]
    """
    steps = SETTINGS["steps"] if steps is None else steps
    rows = np.flatnonzero((table["config"] == config) & (table["steps"] == steps))
    if rows.size == 0 or name not in table:
        raise ValueError(f"no column {name!r} for config {config!r} at {steps} steps in the table")
    rows = rows[np.argsort(table["seed"][rows], kind="stable")]  # in the order of the seeds
    return table[name][rows]


def seed_range(table, config, name, steps=None):
    """The smallest and the largest value of column ``name`` over the seeds of one configuration: (lo, hi).

    Examples
    --------
    >>> table = load_table(to_csv([run("one", s, steps=1, eval_batch=8)[2] for s in (0, 1)]))
    >>> lo, hi = seed_range(table, "one", "both", steps=1)
    >>> bool(lo <= hi)
    True
    """
    values = seed_column(table, config, name, steps)
    return float(values.min()), float(values.max())


def load_induction_table(text=None):
    """Chapter 14's stored runs (``results/ch14_induction.csv``) as a dict of numpy columns, one row per seed.

    Examples
    --------
    >>> table = load_induction_table("seed,induction\\n0,0.9\\n1,0.8\\n")
    >>> table["seed"].tolist(), table["induction"].tolist()
    ([0, 1], [0.9, 0.8])
    """
    if text is None:
        from .notebook import read_result

        text = read_result("ch14_induction.csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("the induction table has no rows")
    return {name: np.array([float(row[name]) for row in rows], dtype=int if name in ("seed", "drop_start", "drop_step") else float)
            for name in rows[0]}
