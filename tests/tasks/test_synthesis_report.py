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
