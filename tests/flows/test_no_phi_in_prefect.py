"""Canary values planted in the input never reach Prefect's database, result storage, logs or artifacts."""

import logging
import os
from pathlib import Path

import numpy as np
import pytest
from prefect.settings import get_current_settings

from privehr.flows.pipeline import pipeline
from privehr.flows.steward import validate
from privehr.simulate.severity_simulator import simulate_extract
from privehr.core.config import PipelineConfig, StewardConfig
from privehr.resources import mimic_extract_variables
from privehr.io.demo_data import write_demo_ehr, write_extract
from privehr.io.validation import ValidationFailed

CANARY_SUBJECT = 97531864
CANARY_VALUE = 173.2468  # a heart rate no simulator draws
CANARY_AGE = 61.97531  # and the canary patient's age and ethnicity, which only the subgroup evaluation reads
CANARY_ETHNICITY = "CANARYLAND ISLANDER"


def _plant(path: Path) -> None:
    sim = simulate_extract(mimic_extract_variables(), 160, seed=5)
    long_stay = sim.patients.index[np.argmax(sim.patients["max_hours"].to_numpy() > 30)][0]

    def rename(frame):
        return frame.rename(index={long_stay: CANARY_SUBJECT}, level="subject_id")

    sim.patients, sim.vitals_labs, sim.interventions = map(rename, (sim.patients, sim.vitals_labs, sim.interventions))
    rows = sim.vitals_labs.index.get_level_values("subject_id") == CANARY_SUBJECT
    canary = sim.patients.index.get_level_values("subject_id") == CANARY_SUBJECT
    sim.patients["age"] = sim.patients["age"].where(~canary, CANARY_AGE)
    sim.patients["ethnicity"] = sim.patients["ethnicity"].astype(object).where(~canary, CANARY_ETHNICITY)
    sim.vitals_labs.loc[rows, ("heart rate", "mean")] = CANARY_VALUE
    sim.vitals_labs.loc[rows, ("heart rate", "count")] = 1.0
    sim.vitals_labs = sim.vitals_labs.sort_index()
    sim.interventions = sim.interventions.sort_index()
    sim.patients = sim.patients.sort_index()
    write_extract(sim, path)


def _plant_ehr(path: Path) -> None:
    """The demo EHR table (attributes as rows) with the canary as the first patient's heart rate."""
    write_demo_ehr(path, seed=1)
    lines = path.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("heart_rate2,"))
    cells = lines[row].split(",")
    cells[1] = f"{CANARY_VALUE}"
    lines[row] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def _scan_prefect_stores(needles: list[bytes], positive: bytes, caplog) -> None:
    """No needle in Prefect's database (with -wal, -shm), result storage, PREFECT_HOME or the captured logs."""
    settings = get_current_settings()
    database = Path(settings.server.database.connection_url.get_secret_value().split("///")[-1])
    database_files = [p for p in database.parent.glob(database.name + "*") if p.is_file()]
    # positive control: the scan reads the database this run wrote to (the run id is a parameter there)
    assert any(positive in p.read_bytes() for p in database_files)
    stores = database_files + [p for p in Path(settings.results.local_storage_path).rglob("*") if p.is_file()]
    stores += [p for p in Path(os.environ["PREFECT_HOME"]).rglob("*") if p.is_file()]
    for store in stores:
        blob = store.read_bytes()
        for needle in needles:
            assert needle not in blob, f"{needle!r} found in {store}"
    for needle in needles:
        assert needle.decode() not in caplog.text


def test_a_misread_delivery_leaks_no_value_into_prefect(tmp_path, caplog):
    """A ';'-separated table with decimal commas (a canary among its values) fails validation with one message;
    its values reach no message, state, log or event (they once did, read as 'unknown attribute names')."""
    ehr = tmp_path / "EHR_dataset.csv"
    _plant_ehr(ehr)
    semi = tmp_path / "semi.csv"
    semi.write_text(ehr.read_text().replace(",", ";").replace(".", ","))
    config = StewardConfig(paths=[semi], artifacts_dir=tmp_path / "artifacts", run_id="semicolon-canary")
    with caplog.at_level(logging.DEBUG), pytest.raises(ValidationFailed, match="semicolon-separated"):
        validate(config)
    comma_value = f"{CANARY_VALUE}".replace(".", ",")
    _scan_prefect_stores([comma_value.encode(), comma_value[:6].encode(), b"heart_rate2;"],
                         b"semicolon-canary", caplog)


def test_canaries_stay_out_of_prefect(tmp_path, caplog):
    path = tmp_path / "all_hourly_data.h5"
    _plant(path)
    ehr = tmp_path / "EHR_dataset.csv"
    _plant_ehr(ehr)
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(path)}, "artifacts_dir": str(tmp_path / "artifacts"), "run_id": "canary",
        "split": {"method": "stratified"},  # 160 stays: a hash split can leave the dev split without a death
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        # every method and every output once, not the numbers: one epsilon each (dp_expm_nf too, not its four
        # defaults), DP batches of 16 (q about 1/5, not the whole training split), 100 bootstrap resamples
        "training": {"models": ["logistic_regression"], "seeds": 1, "non_private": {"max_epochs": 2},
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0], "batch_size": 16},
                     "expm_nf": {"epsilons": [1.0], "steps": 2, "eval_samples": 2, "seeds": 1},
                     "dp_expm_nf": {"epochs": 1, "epsilons": [1.0], "eval_samples": 2, "batch_size": 16}},
        "evaluation": {"bootstrap_resamples": 100}, "release": {"interval_resamples": 100},
        "synthesis": {"path": str(ehr), "mice": {"m": 1, "max_iter": 2, "trace": False}, "mus": [2.0], "runs": 1,
                      "releases": 1, "dpnf": {"steps": 20, "blocks": 1, "hidden_size": 8}}})
    with caplog.at_level(logging.DEBUG):
        summary = pipeline(config)
    run_dir = Path(summary["run_dir"])
    manifest = (run_dir / "intermediate" / "split_manifest.json").read_text()
    assert str(CANARY_SUBJECT) in manifest  # the canary is in the input and in the run's patient-level files
    assert str(CANARY_SUBJECT) not in (run_dir / "split_summary.json").read_text()  # what DVC versions
    imputed = run_dir / "synthesis" / "intermediate" / "imputed" / "train_0.csv"
    assert f"{CANARY_VALUE}" in imputed.read_text() or f"{CANARY_VALUE}" in imputed.with_name("test_0.csv").read_text()

    needles = [str(CANARY_SUBJECT).encode(), f"{CANARY_VALUE}".encode(), str(CANARY_VALUE)[:6].encode(),
               str(CANARY_AGE)[:6].encode(), CANARY_ETHNICITY.encode()]
    cohort = np.load(run_dir / "intermediate" / "cohort.npz")
    assert CANARY_ETHNICITY in cohort["ethnicity"].tolist()  # read, for the subgroups
    _scan_prefect_stores(needles, b"canary", caplog)
    # nor the run's own outputs outside its patient-level directories: what DVC versions and privehr serve shows
    # (report.html, results.md, metrics.json, the figures, the models, Data Docs)
    outputs = [p for p in run_dir.rglob("*") if p.is_file()
               and not {"intermediate", "quarantine", ".lock"} & set(p.relative_to(run_dir).parts)]
    assert {"report.html", "metrics.json", "calibration.png"} <= {p.name for p in outputs}
    # the synthetic tables (and their copies in the synthesis run's release bundle, release/tables/) are DP releases
    # of values drawn near the real ones: a synthetic heart rate printed with 15 digits starts with "173.24" now and
    # then, so there only the full values are looked for
    exact = [str(CANARY_SUBJECT).encode(), f"{CANARY_VALUE}".encode(), f"{CANARY_AGE}".encode(),
             CANARY_ETHNICITY.encode()]
    for p in outputs:
        content = p.read_bytes()
        parts = p.relative_to(run_dir).parts
        for needle in exact if "synthetic" in parts or parts[-3:-1] == ("release", "tables") else needles:
            assert needle not in content, (needle, str(p.relative_to(run_dir)))
