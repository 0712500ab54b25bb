"""The synthesis report's table of results, on inputs the fuzz test once broke it with (kept as tests, as SQLite
keeps every input its fuzzers found)."""

import json

import numpy as np

from privehr.tasks.synthesis_report import FIDELITY, MIXED, synthesis_results


def test_a_release_whose_every_sampled_row_was_non_finite_has_empty_fidelity_not_a_crash(tmp_path):
    """Found by tests/flows/test_fuzz_inputs.py: a flow whose sampled rows were all non-finite left a table with no
    fidelity at all, and the report raised KeyError on its columns."""
    record = {"job": {"job_id": "imp0-eps1-run0", "imputation": 0, "run": 0}, "synthesizer": "maf",
              "budget_label": "eps 1", "mechanism": "dp_sgd", "guarantee": "DP", "nonfinite_rows_dropped": 25,
              "test_log_likelihood": None}
    path = tmp_path / "imp0-eps1-run0.json"
    path.write_text(json.dumps(record))
    path.with_suffix(".evaluation.json").write_text(json.dumps({"rows": [{"release": 0, "rows": 0}]}))
    tables, releases = synthesis_results([str(path)])
    assert set(FIDELITY + MIXED) <= set(tables.columns)
    assert np.isnan(tables[FIDELITY + MIXED].to_numpy(float)).all() and len(releases) == 1


def _panel_inputs(n: int, signal: float, seed: int = 0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"age": rng.normal(60, 10, n), "bmi": rng.normal(27, 4, n)})
    frame["died"] = (signal * (frame["age"] - 60) / 10 + rng.normal(size=n) > 0).astype(float)
    return frame


class _Config:
    """The one thing chance_baseline asks of a synthesis config: its targets."""

    def targets(self, spec):
        return "died", None, []


class _Spec:
    def kinds(self):
        return {"age": "numeric", "bmi": "numeric", "died": "binary"}

    def codes(self):
        return {"died": [0, 1]}


def test_the_shuffled_label_baseline_scores_chance_where_the_real_table_scores_its_signal():
    from privehr.tasks.synthetic_evaluation import chance_baseline

    train, test = _panel_inputs(300, 3.0), _panel_inputs(200, 3.0, seed=1)
    shuffled = chance_baseline(train, test, ["age", "bmi", "died"], _Config(), _Spec(), seed=0)
    assert len(shuffled) == 3 and all(0.3 < v < 0.7 for v in shuffled)


def test_tables_not_beating_the_shuffled_baseline_are_flagged_not_a_fixed_auroc():
    import pandas as pd

    from privehr.tasks.synthesis_report import _chance_lines, chance_threshold, flag_chance

    originals = pd.DataFrame([{"imputation": 0, "tstr_auroc_shuffled": [0.48, 0.55, 0.50],
                               "test_labels_imputed": {"imputed": 598, "of": 600}},
                              {"imputation": 1, "tstr_auroc_shuffled": [0.52, 0.47, 0.51],
                               "test_labels_imputed": {"imputed": 598, "of": 600}}])
    chance = chance_threshold(originals)
    assert chance["fits"] == 6 and 0.5 < chance["threshold"] < 0.6
    results = pd.DataFrame({"budget_label": ["eps 1e-09", "eps 1e-09", "eps 1", "eps 1"],
                            "tstr_auroc": [0.53, 0.56, 0.81, np.nan]})
    flagged = flag_chance(results, chance)
    assert flagged["tstr_no_better_than_chance"].tolist()[:3] == [True, True, False]
    assert pd.isna(flagged["tstr_no_better_than_chance"].iloc[3])
    lines = _chance_lines(flagged, originals, chance, "died", ["eps 1", "eps 1e-09"])
    assert "eps 1e-09 2 of 2" in lines[0] and "eps 1 " not in lines[0]
    assert "MICE imputed died for 598 of 600 test patients" in lines[1]
    strict = chance_threshold(originals.assign(tstr_auroc_shuffled=[[0.70, 0.72, 0.69], [0.71, 0.70, 0.73]]))
    assert flag_chance(results, strict)["tstr_no_better_than_chance"].tolist()[:3] == [True, True, False]


def test_imputed_test_labels_are_counted_from_the_split_as_delivered(tmp_path):
    import pandas as pd

    from privehr.core.run_layout import RunLayout
    from privehr.tasks.synthetic_evaluation import imputed_labels

    folder = RunLayout(tmp_path).split_tables
    folder.mkdir(parents=True)
    pd.DataFrame({"age": [60, 70, 80], "died": [1, None, None]}).to_csv(folder / "test.csv")
    assert imputed_labels(str(tmp_path), "died") == {"imputed": 2, "of": 3}
    assert imputed_labels(str(tmp_path), "derived_label") is None and imputed_labels(str(tmp_path), None) is None


def _release_without_tables(tmp_path, job_id: str = "imp0-epsilon2-run0"):
    """A release record whose every table ended with no rows (so no file, no evaluation row), as ``synthesize``
    writes it."""
    from privehr.tasks.synthesis import empty_note

    note = empty_note(job_id, [0], 1, 1.83, "dp")
    record = {"job": {"job_id": job_id, "imputation": 0, "run": 0}, "synthesizer": "maf", "budget_label": "epsilon2",
              "mechanism": "dp_sgd", "guarantee": "DP", "epsilon": 1.83, "nonfinite_rows_dropped": 84,
              "test_log_likelihood": -160.0, "files": [], "with_missing": [], "empty_tables": [0],
              "empty_note": note}
    path = tmp_path / f"{job_id}.json"
    path.write_text(json.dumps(record))
    path.with_suffix(".evaluation.json").write_text(json.dumps({"rows": []}))
    return path, note


def test_a_run_whose_every_table_ended_with_no_rows_reports_blank_cells_not_key_errors(tmp_path):
    """Before: a run of only such releases raised KeyError: 'tstr_auroc' in the report, after the budget was spent.
    The results have their columns and no row; every table the report builds from them is blank."""
    import pandas as pd

    from privehr.tasks.synthesis_report import (flag_chance, membership_table, raw_accuracy, su2023_table,
                                                synthesis_results, write_results_csv)

    path, note = _release_without_tables(tmp_path)
    assert "ended with no rows" in note and "epsilon 1.83 is spent" in note and "\n" not in note
    results, releases = synthesis_results([str(path)])
    assert results.empty and releases["empty_tables"].tolist() == [1]
    assert {"budget_label", "truncated", "imputation", "job_id", "release", "rows"} <= set(results.columns)
    originals = pd.DataFrame([{"imputation": 0, "tstr_auroc": 0.8, "tstr_macro_f1": 0.6, "svm_accuracy": 0.7,
                               "rf_mse": 1.0, "tstr_auroc_shuffled": [0.5, 0.52, 0.48]}])
    results = flag_chance(results, {"threshold": 0.6, "mean": 0.5, "sd": 0.02, "fits": 3})
    for metric in ("tstr_auroc", "tstr_macro_f1", "svm_accuracy", "rf_mse"):
        table = su2023_table(results, originals, metric)
        assert table["original"].tolist() == [f"{originals[metric].mean():.2f}"] * 2
    assert raw_accuracy(results, "tstr_auroc").empty and membership_table(results, []).empty
    assert results[~results["truncated"]].groupby("budget_label")[["ks_mean"]].mean().empty
    write_results_csv(results, tmp_path / "results.csv")  # the pipeline's report reads it back: header, no row
    back = pd.read_csv(tmp_path / "results.csv")
    assert back.empty and back["job_id"].nunique() == 0 and raw_accuracy(back, "tstr_auroc").empty


def test_synthesis_results_csv_is_escaped_for_a_spreadsheet_and_keeps_its_numbers(tmp_path):
    """results.csv is opened by people in a spreadsheet: formula-looking text is written as text; numbers, booleans
    and blanks read back as they were (the pipeline's report reads it back)."""
    import pandas as pd

    from privehr.tasks.synthesis_report import raw_accuracy, write_results_csv

    payloads = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)"]
    results = pd.DataFrame({"budget_label": ["epsilon1", "epsilon1", "epsilon2", "epsilon2"], "guarantee": payloads,
                            "truncated": [False, True, False, True], "tstr_auroc": [0.71, -3.5, np.nan, 0.5],
                            "rows": [84, 84, 0, 84]})
    write_results_csv(results, tmp_path / "results.csv")
    back = pd.read_csv(tmp_path / "results.csv")
    assert back["guarantee"].tolist() == ["'" + p for p in payloads]
    pd.testing.assert_frame_equal(back.drop(columns="guarantee"), results.drop(columns="guarantee"))
    assert raw_accuracy(back, "tstr_auroc").notna().tolist() == [False, True]  # still read back as results
