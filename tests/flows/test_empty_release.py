"""A DP release whose synthetic tables end with no rows (every sampled row non-finite) after its budget was spent:
recorded in the privacy ledger as spent all the same, never scored or bundled as a table, said in one line, and
nothing downstream raises (before: empty tables were bundled as a DP release, and a run of only such releases ended
in ``KeyError: 'tstr_auroc'``)."""

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from privehr.core.config import SynthesisConfig
from privehr.flows.synthesis import synthesize_ehr
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import read_ledger
from privehr.models.synthesis.flow_synthesizers import FlowSynthesizer

EMPTY = {2.0: {0, 1}, 3.0: {1}}  # epsilon -> the sampled tables forced empty (every value NaN)


def test_a_release_that_ends_with_no_rows_is_spent_said_once_and_neither_scored_nor_bundled(tmp_path, monkeypatch,
                                                                                          caplog):
    fit = FlowSynthesizer.fit

    def sampled_nothing_finite(self, job, data, plan, noise):  # the release is made (and spent) as ever
        done = fit(self, job, data, plan, noise)
        done.tables = [t.assign(**{c: np.nan for c in t}) if k in EMPTY[job["budget"]["value"]] else t
                       for k, t in enumerate(done.tables)]
        return done

    monkeypatch.setattr(FlowSynthesizer, "fit", sampled_nothing_finite)
    table = tmp_path / "EHR_dataset.csv"
    write_demo_ehr(table, seed=0)
    ledger = tmp_path / "ledger.jsonl"
    config = SynthesisConfig(path=table, mice={"m": 1, "max_iter": 2, "trace": False}, mus=[], epsilons=[2.0, 3.0],
                             non_private=False, runs=1, releases=2, dpnf={"steps": 20, "blocks": 1, "hidden_size": 8},
                             artifacts_dir=tmp_path / "a", run_id="empty", privacy={"ledger_path": ledger})
    with caplog.at_level(logging.INFO):
        summary = synthesize_ehr(config, "cpu")  # no KeyError, no traceback
    run_dir = Path(summary["run_dir"])
    gone, half = (json.loads((run_dir / "releases" / f"imp0-epsilon{e}-run0.json").read_text()) for e in (2, 3))

    # spent: both flows entered the ledger as released, the empty one included
    released = {e.release for e in read_ledger(ledger) if e.status == "released"}
    assert gone["ledger_release"] in released and half["ledger_release"] in released
    # said in one line each: in the log as it happens, in the report and in the run's summary
    assert gone["empty_tables"] == [0, 1] and gone["files"] == [] and gone["with_missing"] == []
    assert half["empty_tables"] == [1] and {f["release"] for f in half["files"]} == {0}
    note = gone["empty_note"]
    assert note.startswith("imp0-epsilon2-run0 ended with no rows") and "\n" not in note
    assert f"its epsilon {gone['epsilon']:.3g} is spent (recorded in the privacy ledger)" in note
    assert "neither scored nor in the bundle" in note
    assert "synthetic table(s) r1 of 2 ended with no rows" in half["empty_note"]
    assert summary["empty_releases"] == [note, half["empty_note"]]
    logged = [r.getMessage() for r in caplog.records if "ended with no rows" in r.getMessage()]
    assert sum(note in m for m in logged) == 1 and any(r.levelno == logging.WARNING for r in caplog.records
                                                       if note in r.getMessage())
    report = (run_dir / "report.md").read_text()
    assert note in report and half["empty_note"] in report
    # not scored: no file, no evaluation row, no row of results.csv for a table with no rows
    assert not list((run_dir / "synthetic").glob("imp0-epsilon2-*")) and \
        not list((run_dir / "synthetic").glob("imp0-epsilon3-run0-r1-*"))
    assert json.loads((run_dir / "releases" / "imp0-epsilon2-run0.evaluation.json").read_text())["rows"] == []
    results = pd.read_csv(run_dir / "results.csv")
    assert set(results["job_id"]) == {"imp0-epsilon3-run0"} and set(results["release"]) == {0}
    assert len(results) == 2 and (results["rows"] > 0).all()
    # not bundled: the bundle holds the other release's table that has rows, and cites only that release
    bundle = run_dir / "release"
    assert sorted(p.name for p in (bundle / "tables").iterdir()) == ["imp0-epsilon3-run0-r0-missing.csv",
                                                                      "imp0-epsilon3-run0-r0.csv"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    cited = {r for f in manifest["files"].values() for r in f["releases"]}
    assert half["ledger_release"] in cited and gone["ledger_release"] not in cited
    assert summary["release"]["tables"] == 2
