"""Columns recorded in steps (a score in tens): held as their values, a value off the step quarantined with a
reason that names the attribute and the record, never the value; a spec that says step loads and refuses nonsense."""

import pandas as pd
import pytest
import yaml

from privehr.core.errors import InputError
from privehr.core.specs import load_ehr_spec
from privehr.io.ehr_table import read_ehr_table


def _spec(tmp_path, attributes, **extra):
    path = tmp_path / "stepped.yaml"
    path.write_text(yaml.safe_dump({"name": "stepped", "id_column": "id", "attributes": attributes, **extra}))
    return load_ehr_spec(path)


ATTRIBUTES = [{"name": "score", "kind": "integer", "valid_low": 0, "valid_high": 100, "step": 10},
              {"name": "dose", "kind": "numeric", "valid_low": 0.5, "valid_high": 3.0, "step": 0.25},
              {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 100}]


def test_values_off_the_step_are_quarantined_and_those_on_it_kept_as_values(tmp_path):
    spec = _spec(tmp_path, ATTRIBUTES)
    csv = tmp_path / "t.csv"
    csv.write_text("id,score,dose,age\n"
                   "a,60,0.75,40\n"
                   "b,70.0,3,41\n"
                   "c,87,1.1,42\n"      # 87 is between the tens; 1.1 between the quarter steps
                   "d,110,2.5,43\n"     # 110 is on the step but beyond the bounds
                   "e,,0.5,44\n")
    table = read_ehr_table(csv, spec)
    frame = table.frame
    assert frame.loc["a"].tolist() == [60, 0.75, 40] and frame.loc["b"].tolist() == [70, 3.0, 41]
    assert pd.isna(frame.loc["c", "score"]) and pd.isna(frame.loc["c", "dose"]) and frame.loc["c", "age"] == 42
    assert pd.isna(frame.loc["d", "score"]) and frame.loc["d", "dose"] == 2.5
    reasons = table.quarantine.set_index(["patient_id", "column"])["reason"]
    assert reasons[("c", "score")] == "not on the spec's step (valid_low + k * 10)"
    assert reasons[("c", "dose")] == "not on the spec's step (valid_low + k * 0.25)"
    assert reasons[("d", "score")].startswith("above physiological high")
    assert ("a", "score") not in reasons and ("e", "score") not in reasons  # missing is not off the step
    assert "87" not in reasons[("c", "score")]


def test_a_delivery_mostly_off_the_step_stops_with_the_fix_and_no_value(tmp_path):
    spec = _spec(tmp_path, ATTRIBUTES[:1], max_quarantined_share=0.5)
    csv = tmp_path / "t.csv"
    csv.write_text("id,score\na,61\nb,73\nc,87\nd,90\n")
    with pytest.raises(InputError, match="'score' had 3 of its 4 non-missing values quarantined") as err:
        read_ehr_table(csv, spec)
    message = str(err.value)
    assert "step" in message and "remove the step" in message
    assert not any(v in message for v in ("61", "73", "87"))


def test_a_spec_step_must_make_sense(tmp_path):
    with pytest.raises(InputError, match="give valid_low"):
        _spec(tmp_path, [{"name": "score", "kind": "integer", "valid_high": 100, "step": 10}])
    with pytest.raises(InputError, match="positive"):
        _spec(tmp_path, [{"name": "score", "kind": "integer", "valid_low": 0, "step": -10}])
    with pytest.raises(InputError, match="step belongs to integer and numeric"):
        _spec(tmp_path, [{"name": "grade", "kind": "ordinal", "categories": ["I", "II"], "step": 1}])
    assert _spec(tmp_path, ATTRIBUTES).bounds()["score"].step == 10
