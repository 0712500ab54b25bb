"""GX validation of MIMIC-Extract deliveries: the demo passes; each bad input fails or is quarantined
with a message naming the table, the problem and the fix; raw inputs stay byte-identical."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privehr.simulate.severity_simulator import simulate_extract
from privehr.core.errors import InputError
from privehr.resources import mimic_extract_variables
from privehr.core.specs import load_mimic_spec
from privehr.io.demo_data import write_extract
from privehr.io.validation import EXCLUDED_STAYS, ValidationFailed, failure_message, validate_extract

SPEC = load_mimic_spec()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _validate(path, run_dir):
    before = _sha(path)
    summary = validate_extract(path, run_dir, SPEC, chunk_rows=4096)
    assert _sha(path) == before  # read only
    return summary


@pytest.fixture(scope="module")
def simulated():
    return simulate_extract(mimic_extract_variables(), 120, seed=11)


def _write(sim, path, **frames):
    import copy

    sim = copy.copy(sim)
    for key, frame in frames.items():
        setattr(sim, key, frame)
    write_extract(sim, path)
    return path


def _quarantine(summary, table):
    return pd.read_csv(Path(summary["quarantine_dir"]) / f"{table}.csv")


def test_real_demo_extract_passes_and_writes_data_docs(real_demo_extract, tmp_path):
    s = _validate(real_demo_extract, tmp_path)
    assert s["passed"] and s["failed_critical"] == [] and s["failed_warning"] == []
    assert (s["stays"], s["variables"], s["hourly_rows"]) == (84, 93, 5175)
    assert s["expectations"] == 30
    index = Path(s["data_docs"])
    assert index.is_file()
    assert json.loads((tmp_path / "validation" / "all_hourly_data" / "validation.json").read_text())["passed"]


def test_simulated_demo_passes(small_extract, tmp_path):
    s = _validate(small_extract, tmp_path)
    assert s["passed"], failure_message(s)
    assert s["stays"] == 300 and s["values_beyond_outlier"] == 0


def test_temperature_in_fahrenheit_is_a_critical_unit_failure(simulated, tmp_path):
    vitals = simulated.vitals_labs.copy()
    vitals[("temperature", "mean")] = vitals[("temperature", "mean")] * 9 / 5 + 32
    path = _write(simulated, tmp_path / "fahrenheit.h5", vitals_labs=vitals)
    s = _validate(path, tmp_path / "run")
    assert not s["passed"]
    failed = {r["column"]: r for r in s["failed_critical"]}
    assert "temperature" in failed["mean_in_valid_range"]["observed"]
    assert "degC" in failed["mean_in_valid_range"]["fix"]
    message = failure_message(s)
    assert "vitals_labs" in message and "temperature" in message and "unit" in message
    # every Fahrenheit value lies beyond the outlier bound 47: each is quarantined with its reason
    q = _quarantine(s, "vitals_labs")
    n_observed = int(vitals[("temperature", "mean")].notna().sum())
    assert (q["column"] == "temperature").sum() == n_observed > 0
    assert set(q["reason"]) == {"beyond outlier bounds (value treated as missing)"}


def test_nan_and_non_binary_labels_are_quarantined_with_a_warning(simulated, tmp_path):
    patients = simulated.patients.astype({"mort_icu": float}).copy()
    patients.iloc[0, patients.columns.get_loc("mort_icu")] = np.nan
    patients.iloc[1, patients.columns.get_loc("mort_icu")] = 2
    path = _write(simulated, tmp_path / "labels.h5", patients=patients)
    s = _validate(path, tmp_path / "run")
    assert s["passed"]  # isolated rows: quarantined, the delivery stays usable
    warned = {(r["column"], r["expectation"]) for r in s["failed_warning"]}
    assert ("mort_icu", "expect_column_values_to_be_in_set") in warned
    assert ("mort_icu", "expect_column_values_to_not_be_null") in warned
    q = _quarantine(s, "patients")
    assert sorted(q.loc[q["column"] == "mort_icu", "reason"]) == ["label not in [0, 1]", "missing label"]
    excluded = pd.read_csv(Path(s["quarantine_dir"]) / EXCLUDED_STAYS)
    ids = patients.index.get_level_values("icustay_id")[:2]
    assert set(ids) <= set(excluded["icustay_id"])


def test_duplicate_hourly_rows_quarantine_the_stay(simulated, tmp_path):
    vitals = simulated.vitals_labs
    vitals = pd.concat([vitals, vitals.iloc[[5]]]).sort_index()
    path = _write(simulated, tmp_path / "dup.h5", vitals_labs=vitals)
    s = _validate(path, tmp_path / "run")
    stay = vitals.index[5][2]
    assert any(r["column"] == "duplicate_rows" for r in s["failed_warning"])
    q = _quarantine(s, "vitals_labs")
    assert list(q.loc[q["reason"] == "duplicate (stay, hours_in) rows", "icustay_id"]) == [stay]
    excluded = pd.read_csv(Path(s["quarantine_dir"]) / EXCLUDED_STAYS)
    assert stay in set(excluded["icustay_id"])
    # as written: integer ids, ids first then column, value, reason; each cause once per stay
    text = (Path(s["quarantine_dir"]) / "vitals_labs.csv").read_text().splitlines()
    assert text[0].endswith(",column,value,reason") and f"{stay}.0" not in "\n".join(text)
    assert excluded["icustay_id"].dtype.kind == "i"
    for reasons in excluded["reason"]:
        assert len(reasons.split("; ")) == len(set(reasons.split("; ")))


def test_unknown_patients_column_is_critical(simulated, tmp_path):
    patients = simulated.patients.copy()
    patients["favourite_colour"] = "blue"
    patients["shoe_size"] = 42
    path = _write(simulated, tmp_path / "unknown.h5", patients=patients)
    s = _validate(path, tmp_path / "run")
    assert not s["passed"]
    rule = s["failed_critical"][0]
    assert rule["table"] == "patients" and "no column beyond the spec" in rule["rule"]


def test_wrong_column_level_names_the_table_and_fix(simulated, tmp_path):
    vitals = simulated.vitals_labs.copy()
    vitals.columns = vitals.columns.set_names(["LEVEL1", "agg"])
    path = _write(simulated, tmp_path / "levels.h5", vitals_labs=vitals)
    with pytest.raises(InputError, match=r"'vitals_labs' .* column levels \['LEVEL1', 'agg'\]; expected"):
        _validate(path, tmp_path / "run")


def test_truncated_file_and_missing_key(small_extract, tmp_path):
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(small_extract.read_bytes()[:50_000])
    with pytest.raises(InputError, match="not a readable HDF5 file"):
        validate_extract(truncated, tmp_path / "run", SPEC)
    partial = tmp_path / "partial.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pd.read_hdf(small_extract, "patients").to_hdf(partial, key="patients", format="table")
    with pytest.raises(InputError, match=r"lacks the key\(s\) \['vitals_labs'\]"):
        validate_extract(partial, tmp_path / "run2", SPEC)


def test_empty_hourly_table_is_critical(simulated, tmp_path):
    path = _write(simulated, tmp_path / "empty.h5", vitals_labs=simulated.vitals_labs.iloc[:0])
    s = _validate(path, tmp_path / "run")
    assert not s["passed"]
    assert [r["rule"] for r in s["failed_critical"]] == ["hourly rows for at least one stay"]
    assert "deliver a non-empty vitals_labs" in failure_message(s)


def test_validation_failed_is_an_input_error():
    assert issubclass(ValidationFailed, InputError)


def test_labels_delivered_as_text_fail_validation_naming_the_cause(simulated, tmp_path):
    """'0'/'1' strings quarantine every stay: that is one systematic cause, a critical failure with its fix,
    not a passed validation followed by an empty cohort."""
    patients = simulated.patients.astype({"mort_icu": str}).copy()
    path = _write(simulated, tmp_path / "text_labels.h5", patients=patients)
    s = _validate(path, tmp_path / "run")
    assert not s["passed"]
    (row,) = [r for r in s["failed_critical"] if r["expectation"] == "share_of_stays_quarantined"]
    assert "mort_icu hold text" in row["fix"] and f"of {len(patients)} stays" in row["observed"]


def test_a_few_quarantined_stays_do_not_fail_the_delivery(simulated, tmp_path):
    patients = simulated.patients.astype({"mort_icu": float}).copy()
    patients.iloc[0, patients.columns.get_loc("mort_icu")] = np.nan
    s = _validate(_write(simulated, tmp_path / "one.h5", patients=patients), tmp_path / "run")
    assert s["passed"] and not [r for r in s["failed_critical"] if r["expectation"] == "share_of_stays_quarantined"]


def test_data_docs_share_one_copy_of_the_static_assets_per_artifacts_directory(tmp_path):
    """Great Expectations' images and fonts (3.6 MB) once under <artifacts>/_static, not in every validation; every
    page's link to them resolves (from disk, and the served paths include them)."""
    import re

    from privehr.core.specs import load_ehr_spec
    from privehr.io.demo_data import write_demo_ehr
    from privehr.io.pages import is_page
    from privehr.io.validation import validate_ehr

    table = write_demo_ehr(tmp_path / "ehr.csv")["path"]
    artifacts = tmp_path / "artifacts"
    sites = []
    for run in ("r1", "r2"):
        (artifacts / run).mkdir(parents=True)
        (artifacts / run / "provenance.json").write_text("{}")
        summary, _ = validate_ehr(table, artifacts / run, load_ehr_spec("harrod_ehr"))
        sites.append(Path(summary["data_docs"]).parent)
    (shared,) = (artifacts / "_static").iterdir()
    assert any(shared.rglob("*.png")) and not any((site / "static").exists() for site in sites)
    linked = 0
    for site in sites:
        for page in site.rglob("*.html"):
            for link in re.findall(r'(?:href|src)="([^"#:?]+_static/[^"#?]+)"', page.read_text()):
                linked += 1
                target = (page.parent / link).resolve()
                assert target.is_file() and target.is_relative_to(shared.resolve()), link
                assert is_page(target.relative_to(artifacts.resolve()).parts)
    assert linked >= 2
