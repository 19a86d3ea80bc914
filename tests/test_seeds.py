"""Chapter 13's runs over seeds: the summary of one run, and the stored table the chapter states its claims from.

Oracles: the run's own history and weights, read independently of ``seeds.run``'s code; loops over positions
and sequences written here; and the table stored by scripts/ch13_seeds.py, whose seed-0 rows a fresh run
must reproduce (to a tolerance: training amplifies each machine's rounding).
"""

import math

import numpy as np
import pytest

from mha_lessons import seeds
from mha_lessons.task import RELATIONS, distinct_queries, make_task, relation_positions
from mha_lessons.training import forward, head_attention


def test_a_run_summarises_its_last_evaluation_and_its_heads():
    model, history, summary = seeds.run("two", 1, steps=60, eval_every=10, eval_batch=64)
    for name in ("loss", "previous", "first", "both", "both_distinct"):
        assert summary[name] == history[name][-1]
    below = [s for s, a in zip(history["step"], history["both_distinct"]) if a < seeds.SOLVED]
    later = [s for s in history["step"] if not below or s > below[-1]]
    assert summary["solved_step"] == (later[0] if later else -1)
    weights = head_attention(model)
    previous_at, first_at = relation_positions(12, 4)
    queries = np.flatnonzero(distinct_queries(12, 4))
    for head in range(2):
        assert summary[f"score_previous_{head}"] == pytest.approx(weights[head, queries, previous_at[queries]].mean())
        assert summary[f"score_first_{head}"] == pytest.approx(weights[head, queries, first_at[queries]].mean())
    assert math.isnan(summary["same_right"]) and summary["config"] == "two" and summary["steps"] == 60


def test_the_single_head_is_examined_position_by_position_as_a_loop_would():
    model, _, summary = seeds.run("one", 0, steps=30, eval_batch=32)
    weights = head_attention(model)[0]
    tokens, targets = make_task(seeds.TEST_BATCH, 12, 8, 4, seed=seeds.TEST_SEED)
    predicted = forward(model, tokens)[0].argmax(axis=-1)
    previous_at, first_at = relation_positions(12, 4)
    agree, same, differ = 0, [], []
    for i in np.flatnonzero(distinct_queries(12, 4)):
        right = [np.mean(predicted[:, i, r] == targets[:, i, r]) for r in range(len(RELATIONS))]
        omega = [weights[i, previous_at[i]], weights[i, first_at[i]]]
        agree += int(np.argmax(right) == np.argmax(omega))
        for b in range(seeds.TEST_BATCH):
            both = bool(np.all(predicted[b, i] == targets[b, i]))
            (same if targets[b, i, 0] == targets[b, i, 1] else differ).append(both)
    assert summary["positions_agree"] == agree
    assert summary["same_right"] == pytest.approx(np.mean(same))
    assert summary["differ_right"] == pytest.approx(np.mean(differ))


def test_the_table_round_trips_through_csv():
    rows = [seeds.run(config, 0, steps=2, eval_batch=8)[2] for config in ("one", "loophole")]
    table = seeds.load_table(seeds.to_csv(rows))
    assert table["config"].tolist() == ["one", "loophole"]
    for name in ("both_distinct", "loss"):
        np.testing.assert_allclose(table[name], [r[name] for r in rows], rtol=1e-15)
    assert np.isnan(table["score_previous_0"][1]) and not np.isnan(table["score_previous_0"][0])


def test_the_stored_table_holds_every_configuration_at_five_seeds_or_more():
    table = seeds.load_table()
    for config in seeds.CONFIGS:
        rows = (table["config"] == config) & (table["steps"] == seeds.SETTINGS["steps"])
        assert len(set(table["seed"][rows])) >= 5, config
    for config in ("loophole", "qk_tokens"):
        rows = (table["config"] == config) & (table["steps"] == seeds.LONG_STEPS)
        assert len(set(table["seed"][rows])) >= 5, config


@pytest.mark.parametrize("config", ["two", "qk_tokens"])
def test_a_fresh_run_reproduces_the_stored_row_for_seed_0(config):
    _, _, summary = seeds.run(config, 0)
    table = seeds.load_table()
    row = (table["config"] == config) & (table["seed"] == 0) & (table["steps"] == seeds.SETTINGS["steps"])
    for name in ("previous", "first", "both_distinct"):
        assert abs(table[name][row][0] - summary[name]) < 0.15, name  # other rounding moves a run this much


def test_a_column_and_its_range_follow_the_seeds_of_one_configuration():
    table = seeds.load_table()
    rows = [i for i in range(len(table["seed"])) if table["config"][i] == "one" and table["steps"][i] == 400]
    by_seed = sorted((table["seed"][i], table["both"][i]) for i in rows)
    np.testing.assert_array_equal(seeds.seed_column(table, "one", "both"), [v for _, v in by_seed])
    assert seeds.seed_range(table, "one", "both") == (min(v for _, v in by_seed), max(v for _, v in by_seed))
    long = seeds.seed_column(table, "loophole", "both_distinct", steps=seeds.LONG_STEPS)
    assert len(long) >= 5 and not np.array_equal(long, seeds.seed_column(table, "loophole", "both_distinct"))
    with pytest.raises(ValueError, match="no column 'both' for config 'three'"):
        seeds.seed_range(table, "three", "both")


def test_bad_configurations_and_settings_are_named():
    with pytest.raises(ValueError, match="config must be one of"):
        seeds.run("three", 0)
    with pytest.raises(ValueError, match=r"unknown settings \['stepz'\]"):
        seeds.run("one", 0, stepz=3)
    with pytest.raises(ValueError, match="the table must have the columns"):
        seeds.load_table("a,b\n1,2\n")
