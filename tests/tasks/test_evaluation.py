"""The report's test-set evaluation on a hand-built run: subgroups aligned by stay id, intervals, privacy cost."""

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from privehr.core.config import Cell, EvaluationConfig
from privehr.tasks.evaluation import evaluate_cells, predictions_path, save_predictions
from privehr.tasks.report import curve_check_lines, evaluation_lines


def _run(tmp_path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    inter = tmp_path / "intermediate"
    inter.mkdir()
    ids = rng.permutation(np.arange(1000, 1000 + n))
    gender = np.where(rng.random(n) < 0.5, "F", "M")
    ethnicity = np.where(rng.random(n) < 0.03, "ASIAN", "WHITE")
    age = rng.uniform(20, 95, n)
    y = (rng.random(n) < 0.3).astype(int)
    np.savez(inter / "cohort.npz", icustay_id=ids, gender=gender, age=age, ethnicity=ethnicity)
    order = rng.permutation(n)  # the test split lists the stays in another order than the cohort
    np.savez(inter / "features_test.npz", icustay_id=ids[order], labels=np.stack([y[order], y[order]], 1),
             label_names=np.array(["mort_icu", "los_3"]))
    female = gender[order] == "F"
    runs, truth = [], {}
    for method, eps in (("non_private", None), ("dp_sgd", 1.0)):
        cell = Cell(label="mort_icu", model="logistic_regression", method=method, loss="bce", target_epsilon=eps)
        for s in range(2):
            signal = y[order] + rng.normal(0, 0.6, n)
            if method == "dp_sgd":  # privacy costs women everything and men nothing
                signal = np.where(female, rng.normal(0, 0.6, n), signal)
            p = 1 / (1 + np.exp(-signal))
            save_predictions(tmp_path, cell, s, p)
            truth.setdefault(method, []).append(p)
            runs.append({**cell.model_dump(), "seed": s})
    return runs, truth, y[order], female


def test_subgroups_intervals_and_privacy_cost(tmp_path):
    runs, truth, y, female = _run(tmp_path)
    config = EvaluationConfig(bootstrap_resamples=300)
    ev = evaluate_cells(tmp_path, runs, config)
    assert ev.missing == [] and ev.test_stays == 600
    rows = {(r["method"], r["attribute"], r["group"]): r for r in ev.subgroups}
    for method in ("non_private", "dp_sgd"):
        by_hand = np.median([roc_auc_score(y[female], p[female]) for p in truth[method]])
        r = rows[(method, "sex", "female")]
        # rounded: an exact AUROC's denominator (positives x negatives) would give the group's size away
        assert r["auroc"] == round(by_hand, 3) and r["auroc_ci"][0] < by_hand < r["auroc_ci"][1]
        assert "stays" not in r and "positives" not in r
    assert rows[("dp_sgd", "ethnicity", "asian")]["too_small"]  # ~18 stays
    assert rows[("dp_sgd", "ethnicity", "black")]["too_small"]  # empty: "too small" too, not absent
    cost = {(r["attribute"], r["group"]): r for r in ev.privacy_cost}
    assert cost[("sex", "female")]["cost"] > 0.2 and cost[("sex", "female")]["cost_beyond_noise"]
    assert not cost[("sex", "male")]["cost_beyond_noise"] and cost[("ethnicity", "asian")]["cost"] is None
    cell = ev.cells[("mort_icu", "logistic_regression", "dp_sgd", "bce", 1.0)]
    assert cell["seeds_evaluated"] == cell["seeds"] == 2 and cell["auroc_ci"][0] < cell["auroc_median"]
    text = evaluation_lines(ev, config)
    assert "too small" in text and "* [" in text and "## Privacy cost by subgroup" in text
    json.dumps(ev.subgroups + ev.privacy_cost)  # plain JSON


def test_the_intervals_of_one_label_do_not_depend_on_the_others(tmp_path):
    runs, *_ = _run(tmp_path)
    both = runs + [{**r, "label": "los_3"} for r in runs]
    for r in runs:
        cell = Cell(**{k: r[k] for k in Cell.model_fields})
        predictions_path(tmp_path, cell.model_copy(update={"label": "los_3"}), r["seed"]).write_bytes(
            predictions_path(tmp_path, cell, r["seed"]).read_bytes())
    config = EvaluationConfig(bootstrap_resamples=200)
    alone = evaluate_cells(tmp_path, runs, config).cells
    together = evaluate_cells(tmp_path, both, config).cells
    for key, c in alone.items():
        assert together[key]["auroc_ci"] == c["auroc_ci"]


def test_a_flag_is_not_hidden_by_a_median_above_the_baseline_within_noise():
    check = dict(label="mort_icu", model="grud", loss="bce", non_private_baseline=0.8, epsilons=[1.0, 10.0],
                 auroc_medians=[0.81, 0.9], not_finite=[], decreases=[], below_baseline=False, intervals=True,
                 at_or_above_baseline=[10.0], above_baseline_within_intervals=[1.0])
    line = curve_check_lines([check])
    assert "FLAGGED: at or above the baseline at epsilon 10" in line and "epsilon 1 within the bootstrap" in line
    line = curve_check_lines([dict(check, at_or_above_baseline=[])])
    assert "FLAGGED" not in line and "epsilon 1 within the bootstrap intervals (not flagged)" in line
