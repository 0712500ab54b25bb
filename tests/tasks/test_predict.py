"""``privehr predict`` as a clinician's team uses it (issue 41 item 4): every stay of the file gets a row (a risk, or
no risk and the reason), each row names the bundle that scored it and when, and every bad input a partner will hit is
one line and exit status 2. The bundle is tests/oracles/small_bundle.py's, over three of MIMIC-Extract's variables."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from privehr.cli import main
from privehr.core.config import ScoringConfig, SignerTrust
from privehr.io.demo_data import write_extract
from privehr.io.release_bundle import calibration_text
from privehr.resources import mimic_extract_variables
from privehr.simulate.severity_simulator import simulate_extract
from oracles import small_bundle

STAYS = 40


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predict")
    variables = mimic_extract_variables().head(3)
    made = small_bundle.make_bundle(tmp, variables=list(variables["level2"]))
    sim = simulate_extract(variables, STAYS, seed=3)
    write_extract(sim, tmp / "new.h5")
    return {"tmp": tmp, "bundle": made["bundle"], "sim": sim, "data": tmp / "new.h5",
            "variables": list(variables["level2"]), "ledger": made["ledger"], "fingerprint": made["fingerprint"]}


@pytest.fixture(autouse=True)
def _the_hospitals_project(setup, monkeypatch):
    """``predict`` runs in the hospital's project: the signing key beside its ledger is the one it trusts."""
    monkeypatch.setenv("PRIVEHR_LEDGER", str(setup["ledger"]))


def _variant(setup, name: str, edit) -> str:
    """The extract with its ``patients`` table edited (``edit(frame) -> frame``), written beside the others."""
    sim = setup["sim"]
    path = setup["tmp"] / f"{name}.h5"
    write_extract(dataclasses.replace(sim, patients=edit(sim.patients.copy())), path)
    return str(path)


def test_every_stay_gets_a_row_with_a_risk_or_the_reason_and_the_bundle_and_time(setup, tmp_path, capsys):
    out = tmp_path / "risks.csv"
    out.write_text("old\n")
    os.chmod(out, 0o644)  # an existing file others can read: replaced by an owner-only one
    before = datetime.now(timezone.utc).replace(microsecond=0)
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert out.stat().st_mode & 0o777 == 0o600
    # beside the risks, how far to trust them: each model's DP calibration as its card prints it
    assert sorted(summary["calibration"]) == sorted(small_bundle.CELLS.values())
    assert all(t.startswith("calibration slope ") and "calibration intercept " in t
               for t in summary["calibration"].values())
    card = json.loads((setup["bundle"] / "card.json").read_text())
    texts = {m["cell_id"]: calibration_text(m["evaluation"]) for m in card["models"]}
    assert summary["calibration"] == texts  # the card's own words: 400 noisy test stays inform neither here
    assert all(t.count("not informative (interval [") == 2 for t in texts.values())
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(out)]) == 0
    human = capsys.readouterr().out
    assert "calibration on the training run's test split" in human
    assert all(f"  {cell}: {text}\n" in human for cell, text in texts.items())
    risks = pd.read_csv(out)
    patients = setup["sim"].patients.reset_index()
    assert list(risks["icustay_id"]) == list(patients["icustay_id"])  # every stay, in the file's order
    short = (patients["max_hours"] < 24).to_numpy()
    assert 0 < short.sum() < STAYS  # the simulated file has both
    # a long stay with no measurement of the bundle's three (rare) variables in its window: no risk, its reason
    silent = risks["reason"].str.contains("no measurement of the model's variables").fillna(False).to_numpy()
    scored = ~short & ~silent
    assert scored.sum() > 5 and not (silent & short).any()
    for cell in small_bundle.CELLS.values():
        column = risks[f"risk_{cell}"].to_numpy()
        assert np.isnan(column[~scored]).all() and ((column[scored] >= 0) & (column[scored] <= 1)).all()
    assert risks["reason"][short].str.contains("fewer than the model's 24 hours").all()
    assert risks["reason"][scored].isna().all()
    manifest = hashlib.sha256((setup["bundle"] / "manifest.json").read_bytes()).hexdigest()
    assert (risks["bundle_sha256"] == manifest).all()
    stamped = pd.to_datetime(risks["predicted_utc"]).dt.to_pydatetime()
    assert all(before <= t <= datetime.now(timezone.utc) for t in stamped)
    assert risks["in_cohort"].tolist() == (patients["max_hours"] > 30).tolist()


def test_a_file_whose_stays_are_all_too_short_gets_every_row_and_no_risk(setup, tmp_path, capsys):
    data = _variant(setup, "short", lambda p: p.assign(max_hours=np.minimum(p["max_hours"], 12)))
    assert main(["predict", str(setup["bundle"]), "--data", data, "--out", str(tmp_path / "r.csv"), "--json"]) == 0
    assert '"scored": 0' in capsys.readouterr().out
    risks = pd.read_csv(tmp_path / "r.csv")
    assert len(risks) == STAYS and risks["reason"].notna().all()
    assert risks.filter(like="risk_").isna().all().all()


def test_a_stay_with_no_measurement_in_its_window_gets_a_reason_not_a_risk(setup, tmp_path, capsys):
    sim = setup["sim"]
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(tmp_path / "all.csv"),
                 "--json"]) == 0
    capsys.readouterr()
    before = pd.read_csv(tmp_path / "all.csv")
    long = before.loc[before["reason"].isna(), "icustay_id"].to_numpy()  # scored from the untouched file
    silent, scored = long[:2], long[2:]
    keep = lambda f: f[~f.index.get_level_values("icustay_id").isin(silent)]  # noqa: E731
    path = setup["tmp"] / "silent.h5"
    write_extract(dataclasses.replace(sim, vitals_labs=keep(sim.vitals_labs)), path)
    assert main(["predict", str(setup["bundle"]), "--data", str(path), "--out", str(tmp_path / "r.csv"),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scored"] == len(scored) and summary["stays"] == STAYS
    risks = pd.read_csv(tmp_path / "r.csv").set_index("icustay_id")
    assert risks.loc[silent, "reason"].str.contains("no measurement of the model's variables").all()
    assert risks.loc[silent].filter(like="risk_").isna().all().all()
    assert risks.loc[scored].filter(like="risk_").notna().all().all() and risks.loc[scored, "reason"].isna().all()


def _bad_inputs(setup) -> dict:
    tmp = setup["tmp"]
    (tmp / "text.h5").write_text("this is not HDF5\n")
    (tmp / "risks.csv").write_text("icustay_id,risk\n1,0.5\n")
    no_vitals = tmp / "no-vitals.h5"
    setup["sim"].patients.to_hdf(no_vitals, key="patients", format="table")
    return {
        "not_hdf5": (str(tmp / "text.h5"), "not a readable HDF5 file"),
        "a_csv": (str(tmp / "risks.csv"), "not a readable HDF5 file"),
        "no_vitals_labs": (str(no_vitals), "lacks the key(s) ['vitals_labs']"),
        "no_stays": (_variant(setup, "empty", lambda p: p.iloc[:0]), "lacks the key(s) ['patients']"),  # pandas
        "a_stay_twice": (_variant(setup, "twice", lambda p: pd.concat([p, p.iloc[:1]])), "share an icustay_id"),
        "text_max_hours": (_variant(setup, "text-hours", lambda p: p.assign(max_hours=["long"] * len(p))),
                           "max_hours of row(s) 1, 2, 3, 4, 5 ..."),
        "nan_hadm_id": (_variant(setup, "nan-hadm", lambda p: p.reset_index().assign(
            hadm_id=lambda f: f["hadm_id"].astype(float).where(f.index != 2)).set_index(p.index.names)),
            "hadm_id of row(s) 3 (1 in all)"),
        "text_ids": (_variant(setup, "text-ids", lambda p: p.reset_index().assign(
            icustay_id=lambda f: "stay-" + f["icustay_id"].astype(str)).set_index(p.index.names)),
            "icustay_id of row(s)"),
        # a review's finds: an id beyond int64 (written wrapped before), hours stored as durations (scored before)
        "id_beyond_int64": (_variant(setup, "huge-id", lambda p: p.reset_index().assign(
            icustay_id=lambda f: f["icustay_id"].astype(float).where(f.index != 1, 1e19)).set_index(p.index.names)),
            "icustay_id of row(s) 2 (1 in all)"),
        "max_hours_a_duration": (_variant(setup, "duration-hours", lambda p: p.assign(
            max_hours=pd.to_timedelta(p["max_hours"], unit="h"))), "max_hours of row(s) 1, 2, 3, 4, 5 ..."),
        # --format meds: each prediction's time is the end of the stay's window, from intime
        "meds_no_intime": (_variant(setup, "no-intime", lambda p: p.drop(columns="intime")), "lacks intime"),
        "meds_text_intime": (_variant(setup, "text-intime", lambda p: p.assign(intime="soon")),
                             "intime of row(s)"),
    }


@pytest.mark.parametrize("case", ["not_hdf5", "a_csv", "no_vitals_labs", "no_stays", "a_stay_twice", "text_max_hours",
                                  "nan_hadm_id", "text_ids", "id_beyond_int64", "max_hours_a_duration",
                                  "out_a_directory", "meds_no_intime", "meds_text_intime", "meds_out_a_file"])
def test_a_bad_input_is_one_line_and_exit_2(setup, tmp_path, capsys, case):
    if case == "out_a_directory":
        data, words, out = str(setup["data"]), "is a directory", tmp_path
    elif case == "meds_out_a_file":
        data, words, out = str(setup["data"]), "writes a directory", tmp_path / "risks.csv"
        out.write_text("kept\n")
    else:
        (data, words), out = _bad_inputs(setup)[case], tmp_path / ("meds" if case.startswith("meds") else "risks.csv")
    raw = open(data, "rb").read()
    meds = ["--format", "meds"] if case.startswith("meds") else []
    assert main(["predict", str(setup["bundle"]), "--data", data, "--out", str(out), *meds]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and words in err, err
    assert "stay-" not in err  # rows and columns named, never a value
    assert open(data, "rb").read() == raw
    assert out.read_text() == "kept\n" if case == "meds_out_a_file" else (case == "out_a_directory" or not out.exists())


def test_streamed_scoring_writes_what_one_chunk_writes(setup, tmp_path):
    """Stays are scored a chunk at a time (memory bounded by the chunk): chunks of 7 stays, some of them all too
    short, give the file one chunk gives, row for row, but for the time stamp."""
    from privehr.tasks.predict import score_stays

    trust = SignerTrust(None, setup["ledger"])
    whole = score_stays(setup["bundle"], setup["data"], tmp_path / "whole.csv", trust=trust)
    parts = score_stays(setup["bundle"], setup["data"], tmp_path / "parts.csv", trust=trust, chunk_stays=7)
    assert whole == parts | {"out": whole["out"]}
    one, many = (pd.read_csv(tmp_path / f"{n}.csv").drop(columns="predicted_utc") for n in ("whole", "parts"))
    pd.testing.assert_frame_equal(one, many)


# MEDS's prediction schema as meds-evaluation's PredictionSchema states it, written out here rather than read from
# the code under test: (type, nullable) per column; the two keys are never null in what privehr writes
MEDS_PREDICTION = {"subject_id": ("int64", False), "prediction_time": ("timestamp[us]", False),
                   "boolean_value": ("bool", True), "predicted_boolean_value": ("bool", True),
                   "predicted_boolean_probability": ("float", True)}  # pyarrow's name for float32


def test_format_meds_writes_the_meds_prediction_schema_per_model(setup, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(tmp_path / "r.csv"),
                 "--json"]) == 0
    capsys.readouterr()
    csv = pd.read_csv(tmp_path / "r.csv").set_index("icustay_id")
    out = tmp_path / "meds"
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(out), "--format",
                 "meds", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert out.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{c}.parquet" for c in small_bundle.CELLS.values()]
                                                          + ["not_scored.csv"])
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in out.iterdir())
    patients = setup["sim"].patients.reset_index().set_index("icustay_id")
    scored = csv.index[csv["reason"].isna()]
    manifest = hashlib.sha256((setup["bundle"] / "manifest.json").read_bytes()).hexdigest()
    for label, cell in small_bundle.CELLS.items():
        table = pq.read_table(out / f"{cell}.parquet")
        assert [f.name for f in table.schema] == list(MEDS_PREDICTION)
        assert {f.name: str(f.type) for f in table.schema} == {k: t for k, (t, _) in MEDS_PREDICTION.items()}
        assert table.schema.field("predicted_boolean_probability").type == pa.float32()
        assert table.schema.field("prediction_time").type == pa.timestamp("us")  # no time zone
        for name, (_, nullable) in MEDS_PREDICTION.items():
            assert table.schema.field(name).nullable or not nullable, name  # may hold no value where MEDS allows
            assert nullable or table.column(name).null_count == 0, name
        assert table.schema.metadata[b"privehr_bundle_sha256"].decode() == manifest
        rows = table.to_pandas()
        assert len(rows) == len(scored) == summary["scored"]
        expected = patients.loc[scored]
        assert rows["subject_id"].tolist() == expected["subject_id"].tolist()
        assert (rows["prediction_time"].to_numpy() == (expected["intime"] + pd.Timedelta(hours=24)).to_numpy()).all()
        truth = expected["mort_icu"] > 0 if label == "mort_icu" else expected["los_icu"] > 3
        assert rows["boolean_value"].tolist() == truth.tolist()
        np.testing.assert_allclose(rows["predicted_boolean_probability"], csv.loc[scored, f"risk_{cell}"], rtol=1e-6)
        assert rows["predicted_boolean_value"].isna().all()
    reasons = pd.read_csv(out / "not_scored.csv")
    assert sorted(reasons["icustay_id"]) == sorted(csv.index[csv["reason"].notna()])
    assert reasons["reason"].notna().all() and len(reasons) == summary["not_scored"]


def test_recalibrate_applies_the_released_recalibration_where_the_dp_slope_is_informative(setup, tmp_path, capsys):
    from privehr.tasks.predict import recalibrated

    informative = small_bundle.make_bundle(tmp_path / "big", variables=setup["variables"], test_records=100_000)
    for made, expect in ((informative, True), (setup, False)):
        out = tmp_path / f"r-{expect}.csv"
        assert main(["predict", str(made["bundle"]), "--data", str(setup["data"]), "--out", str(out), "--recalibrate",
                     "--key-fingerprint", made["fingerprint"], "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        risks = pd.read_csv(out)
        card = json.loads((made["bundle"] / "card.json").read_text())
        for m in card["models"]:
            cell, fitted, e = m["cell_id"], m["evaluation"]["recalibration"], m["evaluation"]
            (b_low, b_high), (a_low, a_high) = e["intervals"]["calibration_slope"], e["intervals"][
                "calibration_intercept"]
            shown = e["informative"]["calibration_slope"] and not (b_low <= 1 <= b_high and a_low <= 0 <= a_high)
            assert (fitted is not None) == shown  # informative, and shown miscalibrated
            if fitted is None:  # noise is not applied to the risks: said, and no column
                assert cell in summary["not_recalibrated"] and f"risk_recalibrated_{cell}" not in risks
                assert ("consistent with a calibrated model" in summary["not_recalibrated"][cell]) == \
                    e["informative"]["calibration_slope"]
                continue
            assert cell in summary["recalibrated"]
            np.testing.assert_allclose(risks[f"risk_recalibrated_{cell}"], recalibrated(risks[f"risk_{cell}"], fitted))
        assert bool(summary["recalibrated"]) == expect
    # the map itself: identity at (0, 1), monotone, a slope below 1 pulls risks towards the intercept's
    p = np.array([0.01, 0.2, 0.5, 0.9, np.nan])
    np.testing.assert_allclose(recalibrated(p, {"intercept": 0.0, "slope": 1.0}), p)
    shrunk = recalibrated(p, {"intercept": 0.0, "slope": 0.5})
    assert (np.diff(shrunk[:4]) > 0).all() and shrunk[0] > p[0] and shrunk[3] < p[3] and np.isnan(shrunk[4])


def test_the_summary_prints_the_cards_calibration_or_says_the_card_has_none(setup, tmp_path, monkeypatch, capsys):
    import privehr.tasks.predict as predict

    informative = small_bundle.make_bundle(tmp_path / "big", variables=setup["variables"], test_records=100_000)
    card = json.loads((informative["bundle"] / "card.json").read_text())
    out = tmp_path / "risks.csv"
    assert main(["predict", str(informative["bundle"]), "--data", str(setup["data"]), "--out", str(out),
                 "--key-fingerprint", informative["fingerprint"]]) == 0
    human = capsys.readouterr().out
    for m in card["models"]:
        e = m["evaluation"]
        slope, (low, high) = e["calibration_slope"], e["intervals"]["calibration_slope"]
        assert e["informative"]["calibration_slope"]  # 100,000 noisy test stays: numbers with their intervals
        assert f"  {m['cell_id']}: calibration slope {slope:.3f} [{low:.3f}, {high:.3f}], calibration intercept " \
            in human
    columns = pd.read_csv(out, nrows=1).columns
    assert any(c.startswith("risk_") for c in columns) and not any("calibration" in c for c in columns)  # summary's
    # a bundle made before calibration was released: its card has none, and the summary says so
    real = predict.score_stays
    monkeypatch.setattr(predict, "score_stays", lambda *a, **k: real(*a, **k) | {
        "calibration": {cell: None for cell in small_bundle.CELLS.values()}})
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(out)]) == 0
    human = capsys.readouterr().out
    assert all(f"  {cell}: not on its card (the bundle was made before calibration was released)" in human
               for cell in small_bundle.CELLS.values())


@pytest.mark.parametrize("form", ["aware_datetimes", "iso_text_with_offsets", "naive_iso_text"])
def test_format_meds_reads_intime_with_a_time_zone_as_utc_and_without_one_as_it_is(setup, tmp_path, capsys, form):
    """The simulated intimes are naive; taken as UTC and written in New York's zone (its offset changes with daylight
    saving), as aware datetimes or as ISO text with the offset, they give the same prediction times in UTC, without
    a zone; naive text gives them unchanged."""
    import pyarrow.parquet as pq

    utc = lambda s: s.dt.tz_localize("UTC").dt.tz_convert("America/New_York")  # noqa: E731
    edit = {"aware_datetimes": utc,
            "iso_text_with_offsets": lambda s: utc(s).map(lambda t: t.isoformat()),
            "naive_iso_text": lambda s: s.dt.strftime("%Y-%m-%dT%H:%M:%S")}[form]
    data = _variant(setup, f"intime-{form}", lambda p: p.assign(intime=edit(p["intime"])))
    if form == "iso_text_with_offsets":
        assert pd.read_hdf(data, "patients")["intime"].str[-6:].nunique() == 2  # -05:00 and -04:00
    times = {}
    for name, path in (("as_simulated", str(setup["data"])), (form, data)):
        assert main(["predict", str(setup["bundle"]), "--data", path, "--out", str(tmp_path / name), "--format",
                     "meds", "--json"]) == 0, capsys.readouterr().err
        capsys.readouterr()
        cell = next(iter(small_bundle.CELLS.values()))
        times[name] = pq.read_table(tmp_path / name / f"{cell}.parquet").column("prediction_time").to_pylist()
    assert times[form] == times["as_simulated"] and len(times[form]) > 5
    assert all(t.tzinfo is None for t in times[form])


@pytest.mark.parametrize("out_format", ["meds", "csv"])
def test_an_input_error_while_scoring_leaves_no_directory_it_made_and_keeps_one_that_was_there(
        setup, tmp_path, capsys, out_format):
    """The bundle's variables are checked against the file's as its stays are read, after --out is made: a file
    with a fourth variable fails there, and the directories this command made for --out are gone again."""
    other = setup["tmp"] / "four-variables.h5"
    if not other.exists():
        write_extract(simulate_extract(mimic_extract_variables().head(4), STAYS, seed=3), other)
    name = "meds" if out_format == "meds" else "risks.csv"
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("kept\n")
    for out in (tmp_path / "new" / "deeper" / name, existing / name, *([existing] if out_format == "meds" else [])):
        assert main(["predict", str(setup["bundle"]), "--data", str(other), "--out", str(out), "--format",
                     out_format]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err and "has 4 hourly variables" in err, err
        assert out == existing or not out.exists()
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt"]
    assert (existing / "notes.txt").read_text() == "kept\n"


def test_format_meds_labels_follow_the_cohort_rules_no_label_where_the_cohort_has_none(setup, tmp_path, capsys):
    """boolean_value is the cohort's label (models/data/cohort.py): a death flag that is neither 0 nor 1, or a
    missing length of stay, is no label (the cohort leaves such a stay out), not a guess."""
    import pyarrow.parquet as pq

    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(tmp_path / "r.csv"),
                 "--json"]) == 0
    capsys.readouterr()
    csv = pd.read_csv(tmp_path / "r.csv")
    first, second = np.flatnonzero(csv["reason"].isna().to_numpy())[:2]  # two scored stays, by row

    def edit(p):
        p = p.copy()
        p.iloc[first, p.columns.get_loc("mort_icu")] = 2
        p.iloc[second, p.columns.get_loc("los_icu")] = np.nan
        return p

    data = _variant(setup, "odd-labels", edit)
    assert main(["predict", str(setup["bundle"]), "--data", data, "--out", str(tmp_path / "meds"), "--format", "meds",
                 "--json"]) == 0
    capsys.readouterr()
    rows = {label: pq.read_table(tmp_path / "meds" / f"{cell}.parquet").column("boolean_value").to_pylist()
            for label, cell in small_bundle.CELLS.items()}
    assert rows["mort_icu"][0] is None and rows["mort_icu"][1] is not None
    assert rows["los_3"][1] is None and rows["los_3"][0] is not None


def test_predict_takes_its_settings_and_their_defaults_from_scoring_config(tmp_path, monkeypatch):
    """The command line, the privehr-score flow and its deployment share ScoringConfig: one default per setting."""
    import privehr.tasks.predict as predict
    from privehr.core.config import ScoringConfig

    seen = []
    monkeypatch.setattr(predict, "score_stays", lambda *a, **k: seen.append((a, k)) or {
        "scored": 0, "stays": 0, "in_cohort": 0, "not_scored": 0, "models": [], "out": str(a[2]), "guarantee": "",
        "calibration": {}, "recalibrated": [], "not_recalibrated": {}, "signer": "", "signed_by": ""})
    data = tmp_path / "new.h5"
    data.write_bytes(b"")
    assert main(["predict", str(tmp_path / "bundle"), "--data", str(data), "--out", str(tmp_path / "r.csv")]) == 0
    defaults = ScoringConfig(bundle=tmp_path, data=data, out=tmp_path / "r.csv")
    assert seen[-1][1] == {"out_format": defaults.format, "recalibrate": defaults.recalibrate, "models": None,
                           "chunk_rows": defaults.chunk_rows, "trust": defaults.signer_trust()}
    assert main(["predict", str(tmp_path / "bundle"), "--data", str(data), "--out", str(tmp_path / "m"),
                 "--format", "meds", "--recalibrate", "--key-fingerprint", "ab" * 32]) == 0
    assert seen[-1][1] | {"trust": None} == {"out_format": "meds", "recalibrate": True, "models": None,
                                             "chunk_rows": defaults.chunk_rows, "trust": None}
    assert seen[-1][1]["trust"].pinned == "ab" * 32


def _resigned(setup, tmp_path) -> str:
    """The bundle with a model's weights negated (its risks turned over) and the manifest rehashed and re-signed by
    another key: an insider's forgery whose every hash and signature verify, only the signer differs."""
    import shutil

    import torch
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    forged = tmp_path / "forged"
    shutil.copytree(setup["bundle"], forged)
    cell = small_bundle.CELLS["mort_icu"]
    state = torch.load(forged / "models" / f"{cell}.pt", weights_only=False)
    state["state_dict"] = {k: -v for k, v in state["state_dict"].items()}
    torch.save(state, forged / "models" / f"{cell}.pt")
    small_bundle.forge(forged, small_bundle.rebind(forged, cell), Ed25519PrivateKey.generate())
    return str(forged)


def test_a_bundle_resigned_with_another_key_is_refused_by_predict_and_the_score_flow(setup, tmp_path, capsys):
    """Issue 54.2: a forged bundle that verifies under its own new key scores nothing, by the command or the flow;
    the honest bundle is scored and the signer printed; a pin or a first use names whom to trust."""
    from privehr.flows.score import score
    from privehr.io.release_bundle import verify_bundle

    forged = _resigned(setup, tmp_path)
    assert verify_bundle(forged)["ok"]  # unpinned, the forgery verifies: only the signer tells
    out = tmp_path / "risks.csv"
    assert main(["predict", forged, "--data", str(setup["data"]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not the hospital's own key" in err and not out.exists()
    with pytest.raises(Exception, match="not the hospital's own key"):
        score(ScoringConfig(bundle=forged, data=setup["data"], out=out))
    assert not out.exists()
    assert main(["predict", forged, "--data", str(setup["data"]), "--out", str(out), "--key-fingerprint",
                 setup["fingerprint"]]) == 2 and "not by the pinned key" in capsys.readouterr().err
    assert main(["predict", str(setup["bundle"]), "--data", str(setup["data"]), "--out", str(out)]) == 0
    assert f"signed by the hospital's own signing key {setup['fingerprint']}" in capsys.readouterr().out
    assert main(["release", "verify", forged]) == 1 and "not the hospital's own key" in capsys.readouterr().out


def test_outside_the_hospital_a_signer_is_pinned_or_trusted_once_on_first_use(setup, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVEHR_LEDGER", str(tmp_path / "partner" / "ledger.jsonl"))  # no signing key of its own
    out, bundle = tmp_path / "risks.csv", str(setup["bundle"])
    assert main(["predict", bundle, "--data", str(setup["data"]), "--out", str(out)]) == 2
    assert "not pinned" in capsys.readouterr().err and not out.exists()
    assert main(["release", "verify", bundle]) == 1 and "not pinned" in capsys.readouterr().out
    assert main(["predict", bundle, "--data", str(setup["data"]), "--out", str(out), "--key-fingerprint",
                 setup["fingerprint"].upper()]) == 0
    assert f"signed by the pinned key {setup['fingerprint']}" in capsys.readouterr().out
    assert main(["predict", bundle, "--data", str(setup["data"]), "--out", str(out), "--trust-on-first-use"]) == 0
    assert "trusted on first use now" in capsys.readouterr().out
    recorded = tmp_path / "partner" / "ledger.jsonl.trusted-signers"
    assert json.loads(recorded.read_text()).keys() == {setup["fingerprint"]} and recorded.stat().st_mode & 0o077 == 0
    assert main(["release", "verify", bundle]) == 0  # recorded: trusted from now on
    forged = _resigned(setup, tmp_path)  # a later bundle by another key is refused, first use or not
    assert main(["predict", forged, "--data", str(setup["data"]), "--out", str(out), "--trust-on-first-use"]) == 2
    assert "not a signer trusted on first use" in capsys.readouterr().err


def test_a_model_swapped_after_the_bundle_verified_is_never_loaded(setup, tmp_path, monkeypatch):
    """Review of issue 54: the bundle was verified, then its files read again by path, so weights swapped in between
    were loaded unverified. What is verified now is a private copy, and the models are the bytes verified."""
    import shutil

    from privehr.io import release_bundle

    bundle = tmp_path / "bundle"
    shutil.copytree(setup["bundle"], bundle)
    cell = small_bundle.CELLS["mort_icu"]
    honest_verify = release_bundle.verify_bundle

    def verify_then_swap(path, *args, **kwargs):  # the race: the original's weights change right after the check
        report = honest_verify(path, *args, **kwargs)
        (bundle / "models" / f"{cell}.pt").write_bytes(small_bundle.weights("mort_icu", 99))
        return report

    monkeypatch.setattr(release_bundle, "verify_bundle", verify_then_swap)
    read = release_bundle.read_bundle(bundle)
    assert hashlib.sha256(read.models()[cell]).hexdigest() == read.manifest["files"][f"models/{cell}.pt"]["sha256"]
    assert read.models()[cell] != (bundle / "models" / f"{cell}.pt").read_bytes()  # the swapped file was not read
