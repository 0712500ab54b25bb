"""A user's own mixed-type table, its spec in a directory outside the repository: `privehr spec draft`, then
`validate`, `ehr-prepare` and `synthesize` (MAF and DP-HFlow, and AIM/MST where private-pgm is installed) through
the command line, no code edited. Synthetic tables come back as the spec's types; the ledger follows
--artifacts-dir; a wrong target is one line before anything is spent."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privehr.cli import main
from privehr.core.specs import EHRTableSpec, load_ehr_spec
from privehr.io.spec_draft import spec_yaml
from privehr.io.ledger import read_ledger

REPO = Path(__file__).resolve().parents[2]


def _mixed_table(path: Path, n: int = 160, seed: int = 3) -> None:
    """Sex (text), NYHA class (ordinal text), diabetes (0/1), a count, two skewed labs and an outcome that depends
    on them: the shape of WHAS500 / GBSG2."""
    rng = np.random.default_rng(seed)
    age = rng.normal(65, 11, n).clip(30, 95).round()
    sex = rng.choice(["female", "male"], n)
    nyha = rng.choice(["I", "II", "III", "IV"], n, p=[0.3, 0.35, 0.25, 0.1])
    diabetes = (rng.random(n) < 0.3).astype(int)
    admissions = rng.poisson(1.5, n).clip(0, 12)
    creatinine = np.exp(rng.normal(0.1, 0.4, n)).round(2)
    risk = 0.04 * (age - 65) + 0.8 * (np.searchsorted(["I", "II", "III", "IV"], nyha) - 1) + 0.7 * diabetes
    died = (rng.random(n) < 1 / (1 + np.exp(-risk))).astype(int)
    frame = pd.DataFrame({"record": [f"p{i:04d}" for i in range(n)], "age": age.astype(int), "sex": sex,
                          "nyha": nyha, "diabetes": diabetes, "admissions": admissions,
                          "creatinine": creatinine, "died": died})
    frame.loc[rng.choice(n, 6, replace=False), "creatinine"] = np.nan  # a few missing labs: MICE fills them
    frame.insert(3, "karnofsky", rng.choice(np.arange(40, 101, 10), n))  # a score recorded in tens
    frame.to_csv(path, index=False)


@pytest.fixture(scope="module")
def own_table(tmp_path_factory):
    root = tmp_path_factory.mktemp("own-table")
    table, spec_path = root / "data" / "heart.csv", root / "specs" / "heart.yaml"
    table.parent.mkdir()
    _mixed_table(table)
    return root, table, spec_path, hashlib.sha256(table.read_bytes()).hexdigest()


def test_spec_draft_guesses_types_and_warns_that_they_came_from_the_data(own_table, capsys):
    root, table, spec_path, _ = own_table
    assert main(["spec", "draft", str(table), "--out", str(spec_path), "--target", "died"]) == 0
    err = capsys.readouterr().err
    assert "drafted from the table's own values" in err and "private" in err
    spec = load_ehr_spec(spec_path)
    kinds = {a.name: a.kind for a in spec.attributes}
    assert kinds == {"age": "integer", "sex": "binary", "karnofsky": "integer", "nyha": "categorical",
                     "diabetes": "binary", "admissions": "integer", "creatinine": "numeric", "died": "binary"}
    assert spec.bounds()["karnofsky"].step == 10 and spec.bounds()["admissions"].step is None
    assert spec.id_column == "record" and spec.drafted_from_data and spec.targets.classification == "died"
    assert spec.bounds()["nyha"].levels == ["I", "II", "III", "IV"]
    ages = pd.read_csv(table)["age"]
    assert spec.bounds()["age"].valid_low <= ages.min() and spec.bounds()["age"].valid_high >= ages.max()
    assert "drafted_from_data" in spec_path.read_text().split("name:")[0]  # the header comment says what to replace
    assert main(["spec", "draft", str(table), "--target", "age", "--json"]) == 2  # not binary: one message


def _drafted(tmp_path, columns: dict) -> tuple[dict, dict, list[str]]:
    from privehr.io.spec_draft import draft_spec

    path = tmp_path / "table.csv"
    pd.DataFrame(columns).to_csv(path, index=False)
    spec, notes = draft_spec(path)
    return spec, {a["name"]: a for a in spec["attributes"]}, notes


def test_spec_draft_gives_scores_recorded_in_steps_a_step_and_leaves_coincidences_alone(tmp_path):
    rng = np.random.default_rng(5)
    n = 40
    spec, attributes, notes = _drafted(tmp_path, {
        "karnofsky": rng.choice([40, 50, 60, 70, 80, 90, 100], n),   # a score in tens
        "bp": 2 * rng.integers(45, 90, n) + 1,                       # systolic recorded in twos from an odd start
        "tens": rng.choice([60, 70, 80], n),                         # three levels: the least that may have a step
        "evens": rng.choice([2, 4, 6], n),                           # step 2 from three values: may be chance
        "visits": rng.poisson(3, n),                                 # a count: no step
        "dose": rng.choice([0.5, 1.0, 1.5], n)})                     # not whole: numeric, no step
    karnofsky = attributes["karnofsky"]
    assert karnofsky["kind"] == "integer" and karnofsky["step"] == 10
    assert karnofsky["valid_low"] == 40 and karnofsky["valid_high"] == 100
    assert attributes["bp"]["step"] == 2 and attributes["bp"]["valid_low"] % 2 == 1  # valid_low on the step
    assert attributes["tens"]["step"] == 10
    for name, kind in (("evens", "integer"), ("visits", "integer"), ("dose", "numeric")):
        assert attributes[name]["kind"] == kind and "step" not in attributes[name], name
    assert not any(a["kind"] == "ordinal" for a in attributes.values())  # one rule: integer with a step
    assert any(note.startswith("karnofsky: whole numbers on a common step of 10") for note in notes)
    loaded = EHRTableSpec.model_validate(spec).bounds()
    assert loaded["karnofsky"].step == 10 and loaded["evens"].step is None
    text = spec_yaml(spec, notes).split("name:")[0]
    assert "step: 10" in text and "not drafted ordinal" in text


def test_spec_draft_takes_a_patient_number_as_the_id_and_not_a_repeated_number(tmp_path):
    n = 30
    spec, attributes, notes = _drafted(tmp_path, {
        "number": [1, 2, 3] * 10,                                    # named like an id, but its values repeat
        "Patient number": np.arange(1001, 1001 + n),                 # whole numbers, all distinct: the id
        "fluid": np.linspace(0.5, 3.4, n),                           # distinct numbers, ends in "id": data
        "age": np.arange(40, 40 + n)})
    assert spec["id_column"] == "Patient number" and "Patient number" not in attributes
    assert set(attributes) == {"number", "fluid", "age"} and attributes["number"]["kind"] == "integer"
    assert any(note.startswith("Patient number: its name looks like an identifier") and "id_column" in note
               for note in notes)
    assert any(note.startswith("number: named like an identifier, but its values repeat") for note in notes)
    spec, attributes, _ = _drafted(tmp_path, {"subject_id": [f"s{i}" for i in range(n)], "age": np.arange(n) + 40.0,
                                              "record_no": np.arange(n)})  # a second id: left out, with a note
    assert spec["id_column"] == "subject_id" and set(attributes) == {"age"}
    spec, attributes, _ = _drafted(tmp_path, {"No": list(range(n - 1)) + [None], "age": np.arange(n) + 40.0})
    assert spec["id_column"] is None and "No" in attributes  # a missing value: not an id


def test_validate_and_build_take_a_spec_outside_the_repository(own_table, capsys):
    root, table, spec_path, _ = own_table
    assert not spec_path.resolve().is_relative_to(REPO)
    assert main(["validate", str(table), "--ehr-spec", str(spec_path), "--artifacts-dir", str(root / "art"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["deliveries"][str(table)]
    assert report["passed"] and report["suite"] == "built from the spec at validation time"
    assert report["records_kept"] == 160 and report["attributes_kept"] == 8  # text categories are not "missing"
    assert main(["expectations", "build", "--spec", str(spec_path), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)["paths"]
    assert written == [str(spec_path.parent / "heart.json")]
    assert main(["validate", str(table), "--ehr-spec", str(spec_path), "--artifacts-dir", str(root / "art"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deliveries"][str(table)]["suite"] == str(spec_path.parent / "heart.json")


def test_ehr_prepare_imputes_codes_to_valid_categories(own_table, capsys):
    root, table, spec_path, _ = own_table
    assert main(["ehr-prepare", "--data", str(table), "--spec", str(spec_path), "--m", "2",
                 "--artifacts-dir", str(root / "art"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["imputation_summary"]
    assert summary["m"] == 2 and summary["missing_after"] == 0 and summary["within_bounds"]
    for path in summary["files"]:
        frame = pd.read_csv(path)
        assert set(frame["nyha"]) <= {0, 1, 2, 3} and set(frame["sex"]) <= {0, 1}
        assert (frame["age"] % 1 == 0).all()


def test_a_wrong_target_is_one_line_before_anything_is_read_or_spent(own_table, capsys):
    root, table, spec_path, _ = own_table
    art = root / "wrong-target"
    assert main(["synthesize", "--data", str(table), "--spec", str(spec_path), "--classification-target",
                 "hypertensive", "--artifacts-dir", str(art), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert "'hypertensive' is not a column of heart" in out["error"]
    assert not art.exists()  # no run directory, no ledger
    assert main(["synthesize", "--data", str(table), "--spec", str(spec_path), "--classification-target",
                 "creatinine", "--artifacts-dir", str(art), "--json"]) == 2
    assert "is numeric; it must be binary" in json.loads(capsys.readouterr().out)["error"]


@pytest.fixture(scope="module")
def synthesized(own_table):
    root, table, spec_path, digest = own_table
    synthesizers = ["maf", "hflow", "aim", "mst", "aim_dyadic"]  # private-pgm is a dependency: never left out
    config = root / "synthesis.yaml"
    config.write_text(yaml.safe_dump({"mice": {"m": 1, "max_iter": 3}, "dpnf": {"blocks": 2, "hidden_size": 16},
                                      "hflow": {"blocks": 2, "hidden_size": 16}, "marginal": {"bins": 8}}))
    argv = ["synthesize", "--data", str(table), "--spec", str(spec_path), "--config", str(config),
            "--synthesizers", *synthesizers, "--epsilon", "4", "--steps", "40", "--releases", "1",
            "--artifacts-dir", str(root / "art"), "--run-id", "synth", "--json"]
    assert main(argv) == 0
    return root, table, spec_path, digest, synthesizers


def test_synthetic_tables_come_back_as_the_specs_types(synthesized):
    root, table, spec_path, digest, synthesizers = synthesized
    spec = load_ehr_spec(spec_path)
    run_dir = root / "art" / "synth"
    decoded = sorted((run_dir / "intermediate" / "synthetic").glob("*-truncated.csv"))
    # the spec was drafted from the data: its scaling is private, so no table is releasable
    assert not (run_dir / "synthetic").exists() or not list((run_dir / "synthetic").iterdir())
    seen = set()
    for path in decoded:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        seen.add(path.name.split("-imp")[0] if "-imp" in path.name else "maf")
        assert len(frame) > 0
        for a in spec.attributes:
            values = frame[a.name]
            if a.discrete:
                assert set(values) <= {str(level) for level in a.levels}, (path.name, a.name)
            else:
                numbers = pd.to_numeric(values)
                assert numbers.between(a.valid_low, a.valid_high).all(), (path.name, a.name)
                if a.kind == "integer":
                    assert values.str.fullmatch(r"-?\d+").all(), (path.name, a.name)
                if a.step is not None:  # on the steps, never between them (no 87 for a score in tens)
                    assert ((numbers - a.valid_low) % a.step == 0).all(), (path.name, a.name)
    assert seen == set(synthesizers)
    assert hashlib.sha256(table.read_bytes()).hexdigest() == digest  # the raw input is only read


def test_every_release_enters_the_ledger_under_artifacts_dir_and_the_report_names_the_target(synthesized):
    root, _, _, _, synthesizers = synthesized
    run_dir = root / "art" / "synth"
    entries = [e for e in read_ledger(root / "art" / "privacy_ledger.jsonl") if e.status == "released"]
    whats = sorted(e.what for e in entries)
    assert whats.count("DP-HFlow flow") == 2 and whats.count("DP-NF flow") == 2  # non-private and epsilon 4
    hflow = [e for e in entries if e.what == "DP-HFlow flow" and e.mechanism == "dp_sgd"][0]
    assert hflow.epsilon_prv <= 4 and hflow.epsilon_rdp <= 4 and hflow.noise_multiplier > 0
    for name in ("aim", "mst"):
        if name in synthesizers:
            marginal = [e for e in entries if e.what == f"{name.upper()} synthetic data"]
            assert len(marginal) == 1 and marginal[0].mechanism == "dp" and marginal[0].epsilon == 4
    if "aim_dyadic" in synthesizers:  # the default for a mixed-type table: one (epsilon, delta) release
        hybrid = [e for e in entries if e.what == "AIM synthetic data with DP values within bins"]
        assert len(hybrid) == 1 and hybrid[0].mechanism == "dp" and hybrid[0].epsilon == 4
        within = json.loads((run_dir / "releases" / "aim_dyadic-imp0-epsilon4-run0.json").read_text())
        assert "within_bins" in json.dumps(within)
    report = (run_dir / "report.md").read_text()
    assert "TSTR panel, died" in report and "hypertension" not in report and "PAP" not in report
    record = json.loads((run_dir / "releases" / "hflow-imp0-epsilon4-run0.json").read_text())
    assert record["synthesizer"] == "hflow" and record["guarantee"] == "DP"
    assert record["scaling"]["drafted_from_data"] and not record["releasable"]
