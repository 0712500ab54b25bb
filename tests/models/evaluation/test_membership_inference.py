"""DOMIAS membership inference against synthetic tables (van Breugel et al. 2023): it must catch a generator that
copies its training rows, stay near chance on one that never saw them, and refuse FPRs its non-members cannot
resolve."""

import numpy as np
import pandas as pd
import pytest

from privehr.models.evaluation.membership_inference import (domias_attack, holdout_split, metric_key,
                                                            tpr_at_fpr)

COLUMNS = [f"x{i}" for i in range(13)]


def _population(rng, n):
    """A correlated mixed-type population the width of a clinical table: 10 numeric columns (correlation 0.3), a
    binary and two category codes. (In few columns Scott's bandwidth hides copies: see the module's docstring.)"""
    z = rng.normal(size=(n, 10)) @ np.linalg.cholesky(0.7 * np.eye(10) + 0.3).T
    binary = (z[:, 0] + rng.normal(size=n) > 0).astype(float)
    codes = np.clip(np.round(z[:, 1:3] + 1.5), 0, 3)
    return pd.DataFrame(np.c_[z, binary, codes], columns=COLUMNS)


@pytest.fixture(scope="module")
def real():
    rng = np.random.default_rng(11)
    return _population(rng, 500), _population(rng, 500), _population(rng, 500)  # members, non-members, reference


def test_a_synthesizer_that_copies_its_training_rows_is_caught(real):
    members, nonmembers, reference = real
    rng = np.random.default_rng(12)
    copied = members + rng.normal(scale=0.01, size=members.shape)
    result = domias_attack(copied, members, nonmembers, reference)
    assert result["auroc"] > 0.9
    assert result["tpr_at_1pct"] > 0.1  # chance is 0.01
    assert result["tpr_at_10pct"] > 0.5
    assert result["n_members"] == result["n_nonmembers"] == result["n_reference"] == 500


def test_a_synthesizer_independent_of_its_members_is_near_chance(real):
    members, nonmembers, reference = real
    independent = _population(np.random.default_rng(13), 500)
    result = domias_attack(independent, members, nonmembers, reference)
    # AUROC of two exchangeable samples of 500: SD sqrt((n+m+1)/(12nm)) ~ 0.018; 0.06 is > 3 SD
    assert abs(result["auroc"] - 0.5) < 0.06
    assert abs(result["syn_only_auroc"] - 0.5) < 0.06
    assert result["tpr_at_1pct"] < 0.05 and result["tpr_at_10pct"] < 0.2


def test_fpr_below_one_over_the_non_members_is_not_resolvable(real):
    members, nonmembers, reference = real
    result = domias_attack(members, members, nonmembers.iloc[:100], reference)
    assert result["n_nonmembers"] == 100 and result["min_resolvable_fpr"] == pytest.approx(0.01)
    assert result["tpr_at_0p1pct"] is None and result["syn_only_tpr_at_0p1pct"] is None
    assert result["unresolvable_fprs"] == [0.001]
    assert result["tpr_at_1pct"] is not None  # 1 % of 100 is one non-member
    assert tpr_at_fpr(np.ones(5), np.zeros(999), 0.001) is None and tpr_at_fpr(np.ones(5), np.zeros(1000), 0.001) == 1.0


def test_tpr_at_fpr_counts_ties_against_the_attacker():
    assert tpr_at_fpr(np.array([1.0, 1.0, 0.5]), np.zeros(100), 0.01) == 1.0
    assert tpr_at_fpr(np.array([1.0, 1.0, 0.5]), np.r_[np.ones(2), np.zeros(98)], 0.01) == 0.0  # 2 tied non-members


def test_missing_cells_are_filled_with_reference_means_and_empty_columns_dropped(real):
    members, nonmembers, reference = (f.copy() for f in real)
    members.iloc[::7, 0] = np.nan
    synthetic = members.copy()
    synthetic.iloc[::5, 3] = np.inf
    reference["x12"] = np.nan  # missing in every reference row: dropped
    result = domias_attack(synthetic, members, nonmembers, reference)
    assert np.isfinite(result["auroc"]) and result["auroc"] > 0.9


def test_holdout_split_and_metric_keys():
    frame = pd.DataFrame({"a": range(7)})
    reference, nonmembers = holdout_split(frame)
    assert list(reference["a"]) == [0, 2, 4, 6] and list(nonmembers["a"]) == [1, 3, 5]
    assert [metric_key(f) for f in (0.001, 0.01, 0.1)] == ["tpr_at_0p1pct", "tpr_at_1pct", "tpr_at_10pct"]


def test_member_subsampling_is_seeded(real):
    members, nonmembers, reference = real
    runs = [domias_attack(members, members, nonmembers, reference, max_members=100) for _ in range(2)]
    assert runs[0] == runs[1] and runs[0]["n_members"] == 100


def test_a_narrower_kernel_sharpens_the_synthetic_density_around_copies():
    """Few columns: Scott's bandwidth smooths a verbatim copy away; a tenth of it does not (p_syn alone)."""
    rng = np.random.default_rng(15)
    members, nonmembers, reference = (pd.DataFrame(rng.normal(size=(500, 2))) for _ in range(3))
    scott = domias_attack(members, members, nonmembers, reference)
    narrow = domias_attack(members, members, nonmembers, reference, bandwidth_factor=0.1)
    assert scott["syn_only_auroc"] < 0.75 < 0.9 < narrow["syn_only_auroc"]
    assert narrow["bandwidth_factor"] == 0.1 and scott["bandwidth_factor"] == 1.0


def test_the_report_table_marks_unresolvable_fprs_and_skips_unattacked_tables():
    from privehr.tasks.synthesis_report import membership_table

    results = pd.DataFrame({"budget_label": ["maf inf", "maf inf", "maf inf", "aim epsilon1"],
                            "truncated": [True, True, False, True],
                            "mia_auroc": [0.6, 0.7, np.nan, 0.5], "mia_syn_only_auroc": [0.5, 0.5, np.nan, 0.5],
                            "mia_tpr_at_10pct": [0.2, 0.3, np.nan, 0.1], "mia_tpr_at_1pct": [0.02, 0.04, np.nan, 0.01],
                            "mia_tpr_at_0p1pct": [None, None, None, None], "mia_n_nonmembers": [150, 150, np.nan, 150]})
    table = membership_table(results, ["maf inf", "aim epsilon1"]).set_index("budget_label")
    assert table.loc["maf inf", "tables"] == 2 and table.loc["maf inf", "AUROC"] == pytest.approx(0.65)
    assert table.loc["maf inf", "TPR @ FPR 1 %"] == pytest.approx(0.03)
    assert (table["TPR @ FPR 0.1 %"] == "not resolvable").all() and table.loc["aim epsilon1", "non-members"] == 150
