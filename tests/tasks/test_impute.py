"""MICE on the Harrod table through its spec: 5 complete datasets within bounds, fitted on training patients."""

import json
from pathlib import Path

import pandas as pd

from privehr.core.config import EHRPrepareConfig
from privehr.core.specs import load_ehr_spec
from privehr.tasks.impute import impute_ehr


def test_harrod_mice_yields_five_complete_datasets_within_bounds(harrod, tmp_path):
    config = EHRPrepareConfig(path=harrod, mice={"m": 5, "max_iter": 4, "trace": True})
    summary = json.loads(Path(impute_ehr.fn(config, str(tmp_path))).read_text())
    assert summary["patients"] == {"train": 69, "test": 13}  # each patient's split is a hash of its record
    assert summary["m"] == 5 and summary["missing_after"] == 0 and summary["within_bounds"]
    assert len(summary["attributes"]) == 19 and summary["derived"] == ["mean_pap", "hypertensive"]
    assert set(summary["convergence"]["rhat"]) == {c for c, n in summary["missing_before"]["train"].items() if n}
    spec = load_ehr_spec("harrod_ehr")
    bounds = spec.bounds()
    train_ids = set()
    for i in range(5):
        train = pd.read_csv(tmp_path / "intermediate" / "imputed" / f"train_{i}.csv", index_col=0)
        test = pd.read_csv(tmp_path / "intermediate" / "imputed" / f"test_{i}.csv", index_col=0)
        assert train.shape == (69, 21) and test.shape == (13, 21)
        for frame in (train, test):
            assert not frame.isna().any().any()
            for c in summary["attributes"]:
                assert frame[c].between(bounds[c].valid_low, bounds[c].valid_high).all()
            mean_pap = 2 / 3 * frame["pap_diastolic"] + 1 / 3 * frame["pap_systolic"]
            assert ((mean_pap > 20).astype(int) == frame["hypertensive"]).all()
        train_ids |= set(train.index)
        assert not set(train.index) & set(test.index)  # whole patients on one side
    assert len(train_ids) == 69  # the same split for every imputation
    pooled = summary["pooled_train"]["mean_pap"]
    assert 10 < pooled["estimate"] < 50 and 0 <= pooled["fraction_missing_information"] < 1


def test_the_missingness_rule_is_decided_on_training_patients_only(tmp_path):
    """An attribute measured only in test patients is dropped (the training patients decide), although on the
    whole table it would be kept; the whole-table verdict stays in the report for the steward."""
    from privehr.io.demo_data import write_demo_ehr

    import yaml

    from privehr.core.specs import SPEC_DIR

    table = tmp_path / "ehr.csv"
    write_demo_ehr(table, seed=0)
    spec = yaml.safe_load((SPEC_DIR / "harrod_ehr.yaml").read_text()) | {"drop_attributes_missing_in_more_than": None}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))  # the rule "missing in all records" alone
    config = EHRPrepareConfig(path=table, spec=str(tmp_path / "spec.yaml"), mice={"m": 1, "max_iter": 2, "trace": False})
    first = json.loads(Path(impute_ehr.fn(config, str(tmp_path / "a"))).read_text())
    assert "cvp" in first["attributes"]
    test_ids = set(pd.read_csv(tmp_path / "a" / "intermediate" / "imputed" / "test_0.csv", index_col=0).index)
    rows = [line.split(",") for line in table.read_text().splitlines()]
    ids = [f"patient-{i + 1:04d}" for i in range(len(rows[0]) - 1)]  # the spec numbers patients by column
    for r in rows:
        if r[0] == "cvp":
            r[1:] = [v if pid in test_ids else "none" for pid, v in zip(ids, r[1:])]
    edited = tmp_path / "edited.csv"
    edited.write_text("\n".join(",".join(r) for r in rows) + "\n")
    summary = json.loads(Path(impute_ehr.fn(config.model_copy(update={"path": edited}),
                                            str(tmp_path / "b"))).read_text())
    decisions = summary["decisions"]
    assert decisions["drop_decided_on"] == "training patients"
    assert "cvp" in decisions["dropped_attributes"] and "cvp" not in summary["attributes"]
    assert "cvp" not in decisions["dropped_on_whole_delivery"]  # the whole table would have kept it


def test_a_patients_split_key_is_its_own_record_whatever_the_others_hold():
    """In a table without ids the split hashes each record's own values: another patient with a missing value (which
    turns an integer column into floats) or with the only value of an otherwise empty attribute changes no one
    else's key (a review found int64 80 and float64 80.0 hashed apart: one patient moved every other)."""
    from privehr.core.specs import EHRTableSpec
    from privehr.tasks.impute import _split_keys

    spec = EHRTableSpec(name="t", attributes=[{"name": "hr"}, {"name": "bp"}, {"name": "sex", "kind": "binary"}])
    alone = _split_keys(pd.DataFrame({"hr": [80, 90], "sex": [0, 1]}, index=["p1", "p2"]), spec)
    with_one_more = _split_keys(pd.DataFrame({"hr": [80.0, 90.0, None], "bp": [None, None, 120.0],
                                              "sex": [0.0, 1.0, None]}, index=["p1", "p2", "p3"]), spec)
    assert alone.tolist() == with_one_more.iloc[:2].tolist() and alone.iloc[0] != alone.iloc[1]
    ids = EHRTableSpec(name="t", id_column="pid", attributes=[{"name": "hr"}])
    assert _split_keys(pd.DataFrame({"hr": [1.0]}, index=["A7"]), ids).tolist() == ["A7"]
