"""MICE on the Harrod table through its spec: 5 complete datasets within bounds, fitted on training patients."""

import json
from pathlib import Path

import pandas as pd

from privehr.config import EHRPrepareConfig
from privehr.specs import load_ehr_spec
from tasks.impute import impute_ehr


def test_harrod_mice_yields_five_complete_datasets_within_bounds(harrod, tmp_path):
    config = EHRPrepareConfig(path=harrod, mice={"m": 5, "max_iter": 4, "trace": True})
    summary = json.loads(Path(impute_ehr.fn(config, str(tmp_path))).read_text())
    assert summary["patients"] == {"train": 62, "test": 20}
    assert summary["m"] == 5 and summary["missing_after"] == 0 and summary["within_bounds"]
    assert len(summary["attributes"]) == 19 and summary["derived"] == ["mean_pap", "hypertensive"]
    assert set(summary["convergence"]["rhat"]) == {c for c, n in summary["missing_before"]["train"].items() if n}
    spec = load_ehr_spec("harrod_ehr")
    bounds = spec.bounds()
    train_ids = set()
    for i in range(5):
        train = pd.read_csv(tmp_path / "intermediate" / "imputed" / f"train_{i}.csv", index_col=0)
        test = pd.read_csv(tmp_path / "intermediate" / "imputed" / f"test_{i}.csv", index_col=0)
        assert train.shape == (62, 21) and test.shape == (20, 21)
        for frame in (train, test):
            assert not frame.isna().any().any()
            for c in summary["attributes"]:
                assert frame[c].between(bounds[c].valid_low, bounds[c].valid_high).all()
            mean_pap = 2 / 3 * frame["pap_diastolic"] + 1 / 3 * frame["pap_systolic"]
            assert ((mean_pap > 20).astype(int) == frame["hypertensive"]).all()
        train_ids |= set(train.index)
        assert not set(train.index) & set(test.index)  # whole patients on one side
    assert len(train_ids) == 62  # the same split for every imputation
    pooled = summary["pooled_train"]["mean_pap"]
    assert 10 < pooled["estimate"] < 50 and 0 <= pooled["fraction_missing_information"] < 1
