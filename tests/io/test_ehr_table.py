"""Small EHR tables through their spec: Harrod's transposed file, the demo generator, and bad input."""

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from privehr.core.errors import InputError
from privehr.core.specs import load_ehr_spec
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ehr_table import ID, drop_by_missingness, read_ehr_table
from privehr.io.validation import validate_ehr

SPEC = load_ehr_spec("harrod_ehr")
SU_2023_DROPPED = {"right_ventricle_diastole", "aov_mean_pg", "ra_vol_a4c", "la_vol_a4c", "lv_esv", "lv_vol_a4c",
                    "lvot_max_flow"}


@pytest.fixture()
def demo(tmp_path) -> Path:
    return Path(write_demo_ehr(tmp_path / "ehr.csv", seed=0)["path"])


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_harrod_loads_into_82_patients_by_19_attributes(harrod):
    before = _sha(harrod)
    t = read_ehr_table(harrod, SPEC)
    assert _sha(harrod) == before
    assert t.frame.shape == (82, 26)  # every attribute: the missingness rule is applied to training patients
    assert set(t.decisions["dropped_attributes"]) == SU_2023_DROPPED  # Su et al. 2023, section 3.1 (whole table)
    kept, dropped, _ = drop_by_missingness(t.frame, SPEC, t.decisions["records_read"])
    assert kept.shape == (82, 19) and set(dropped) == SU_2023_DROPPED
    assert t.decisions["quarantined"] == {"no value in any kept attribute": 2}
    assert t.parsed.shape == (84, 27)  # every record and attribute as read, plus the generated id
    assert t.frame.index.is_unique and t.frame.notna().any(axis=1).all()


def test_demo_table_has_harrods_shape(demo):
    t = read_ehr_table(demo, SPEC)
    assert t.parsed.shape == (84, 27)
    assert t.frame.shape == (82, 26)
    assert set(t.decisions["dropped_attributes"]) == SU_2023_DROPPED


def test_harrod_validation_passes_with_data_docs(harrod, tmp_path):
    summary, _ = validate_ehr(harrod, tmp_path, SPEC)
    assert summary["passed"] and summary["failed_warning"] == []
    assert Path(summary["data_docs"]).is_file()
    q = pd.read_csv(Path(summary["quarantine_dir"]) / "harrod_ehr.csv")
    assert list(q["reason"]) == ["no value in any kept attribute"] * 2


def test_wrong_orientation_names_the_fix(demo, tmp_path):
    wrong = tmp_path / "columns.csv"
    pd.read_csv(demo, header=None, index_col=0).T.to_csv(wrong, index=False)
    with pytest.raises(InputError, match=r"harrod_ehr: .* attribute names in its first row, but the spec says "
                                         r"attributes_as_rows.*Transpose the file"):
        read_ehr_table(wrong, SPEC)


def test_unknown_and_absent_attributes(demo, tmp_path):
    lines = demo.read_text().splitlines()
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("\n".join(lines + ["shoe_size" + ",42" * 84]) + "\n")
    with pytest.raises(InputError, match=r"has 1 name\(s\) \(not shown: they may hold values\) that the spec does "
                                         r"not define") as err:
        read_ehr_table(unknown, SPEC)
    assert "shoe_size" not in str(err.value)
    absent = tmp_path / "absent.csv"
    absent.write_text("\n".join(l for l in lines if not l.startswith("lvef,")) + "\n")
    with pytest.raises(InputError, match=r"lacks the attribute\(s\) \['lvef'\]"):
        read_ehr_table(absent, SPEC)


def test_non_numeric_tokens_and_out_of_bounds_values_are_quarantined(demo, tmp_path):
    rows = [l.split(",") for l in demo.read_text().splitlines()]
    hr = next(r for r in rows if r[0] == "heart_rate2")
    observed = [i for i, v in enumerate(hr) if i and v != "none"]
    hr[observed[0]], hr[observed[1]] = "eighty", "950.0"
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(",".join(r) for r in rows) + "\n")
    before = _sha(bad)
    summary, t = validate_ehr(bad, tmp_path / "run", SPEC)
    assert _sha(bad) == before
    q = pd.read_csv(Path(summary["quarantine_dir"]) / "harrod_ehr.csv")
    cells = q[q["column"] == "heart_rate2"].sort_values("reason")
    assert list(cells["value"]) == ["950.0", "eighty"]
    assert list(cells["reason"]) == ["above physiological high 250.0",
                                     "non-numeric token (not a number and not an NA token of the spec)"]
    ids = [f"patient-{i:04d}" for i in observed[:2]]
    assert t.frame.loc[ids, "heart_rate2"].isna().all()  # masked, not dropped: the records stay
    assert summary["passed"]
    assert any(r["column"] == "heart_rate2" for r in summary["failed_warning"])


def test_formula_looking_cells_are_written_as_text_in_the_quarantine_a_steward_opens(demo, tmp_path):
    """A spreadsheet runs a cell starting with = + - @ as a formula: such text gets a leading ', numbers stay."""
    rows = [l.split(",") for l in demo.read_text().splitlines()]
    hr = next(r for r in rows if r[0] == "heart_rate2")
    observed = [i for i, v in enumerate(hr) if i and v != "none"]
    payloads = ["=cmd|' /C calc'!A0", "@SUM(A1)", "+1+1", "-3.5"]
    for i, value in zip(observed, payloads):
        hr[i] = f'"{value}"' if "," in value else value
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(",".join(r) for r in rows) + "\n")
    summary, _ = validate_ehr(bad, tmp_path / "run", SPEC)
    q = pd.read_csv(Path(summary["quarantine_dir"]) / "harrod_ehr.csv", keep_default_na=False, dtype=str)
    values = sorted(q.loc[q["column"] == "heart_rate2", "value"])
    assert values == sorted(["'=cmd|' /C calc'!A0", "'@SUM(A1)", "'+1+1", "-3.5"])


def test_empty_table_and_empty_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match=r"harrod_ehr: .*empty\.csv is empty \(0 bytes\)"):
        read_ehr_table(empty, SPEC)
    names_only = tmp_path / "names.csv"
    names_only.write_text("\n".join(a.name for a in SPEC.attributes) + "\n")
    with pytest.raises(InputError, match="holds no records"):
        read_ehr_table(names_only, SPEC)


def test_a_column_missing_everywhere_is_dropped_as_a_recorded_decision(demo, tmp_path):
    rows = [l.split(",") for l in demo.read_text().splitlines()]
    for r in rows:
        if r[0] == "lvef":
            r[1:] = ["none"] * (len(r) - 1)
    path = tmp_path / "nolvef.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    no_threshold = SPEC.model_copy(update={"drop_attributes_missing_in_more_than": None})
    t = read_ehr_table(path, no_threshold)
    assert t.decisions["dropped_attributes"] == {"lvef": 82, "lvot_max_flow": 82}  # of the 82 kept records
    assert t.decisions["drop_rule"] == "missing in all records"
    kept, _, _ = drop_by_missingness(t.frame, no_threshold, t.decisions["records_read"])
    assert "lvef" not in kept and kept.shape[1] == 24


def test_a_semicolon_file_with_decimal_commas_is_named_as_such_and_no_value_is_echoed(demo, tmp_path):
    semi = tmp_path / "semi.csv"
    semi.write_text(demo.read_text().replace(",", ";").replace(".", ","))
    before = _sha(semi)
    with pytest.raises(InputError, match=r"looks semicolon-separated .*Re-export the table as CSV") as err:
        read_ehr_table(semi, SPEC)
    first_values = demo.read_text().splitlines()[0].split(",")[1:4]
    assert not any(v in str(err.value) or v.replace(".", ",") in str(err.value) for v in first_values)
    assert _sha(semi) == before


def test_unknown_names_are_counted_never_shown_and_close_ones_point_at_the_spec(demo, tmp_path):
    """A patient identifier or a value read as an attribute name never reaches the message; a typo of a spec
    attribute is named by the attribute it resembles."""
    lines = demo.read_text().splitlines()
    odd = tmp_path / "odd.csv"
    odd.write_text("\n".join(lines + ["heart rate;173.2468" + ",42" * 84, "MRN00417" + ",42" * 84,
                                      "Heart_Rate_2" + ",42" * 84]) + "\n")
    with pytest.raises(InputError, match=r"has 3 name\(s\) \(not shown: they may hold values; 1 resemble\(s\) "
                                         r"'heart_rate2'\)") as err:
        read_ehr_table(odd, SPEC)
    assert "173.2468" not in str(err.value) and "MRN" not in str(err.value) and "Heart_Rate_2" not in str(err.value)


def test_a_patient_delivered_twice_is_quarantined_not_counted_twice(demo, tmp_path):
    """Harrod's layout has one column per patient and no id: a copied column is the same person twice."""
    lines = [line.split(",") for line in demo.read_text().splitlines()]
    twice = tmp_path / "twice.csv"
    twice.write_text("\n".join(",".join(cells + [cells[5]]) for cells in lines) + "\n")
    before = _sha(twice)
    table = read_ehr_table(twice, SPEC)
    reasons = table.quarantine.loc[table.quarantine["reason"].str.startswith("identical"), ID]
    assert len(reasons) == 2  # the original (patient 5) and its copy (the last record)
    assert table.decisions["records_read"] == len(lines[0])  # 84 patients + the copy
    assert table.decisions["records_kept"] <= len(lines[0]) - 2
    assert _sha(twice) == before
    assert read_ehr_table(demo, SPEC).quarantine["reason"].str.startswith("identical").sum() == 0


def _without(demo: Path, tmp_path: Path, attribute: str) -> Path:
    lines = [line.split(",") for line in demo.read_text().splitlines()]
    out = tmp_path / f"no_{attribute}.csv"
    out.write_text("\n".join(",".join([c[0]] + ["none"] * (len(c) - 1) if c[0] == attribute else c) for c in lines)
                   + "\n")
    return out


def test_a_derived_column_whose_source_is_missing_fails_validation_with_the_fix(demo, tmp_path):
    with pytest.raises(InputError, match=r"derived column\(s\) cannot be computed: mean_pap needs pap_systolic; "
                                         r"hypertensive needs pap_systolic.*remove the derived column"):
        read_ehr_table(_without(demo, tmp_path, "pap_systolic"), SPEC)


def _typed_spec(tmp_path, attributes):
    import yaml

    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump({"name": "typed", "id_column": "id", "attributes": attributes}))
    return load_ehr_spec(path)


def test_column_kinds_read_categories_as_codes_and_quarantine_what_is_not_one(tmp_path):
    spec = _typed_spec(tmp_path, [
        {"name": "sex", "kind": "binary", "categories": ["F", "M"]},
        {"name": "grade", "kind": "ordinal", "categories": ["I", "II", "III"]},
        {"name": "nyha", "kind": "categorical", "categories": [1, 2, 3, 4]},
        {"name": "visits", "kind": "integer", "valid_low": 0, "valid_high": 20},
        {"name": "flag", "kind": "binary"}])
    csv = tmp_path / "t.csv"
    csv.write_text("id,sex,grade,nyha,visits,flag\n"
                   "a,F,I,1,3,0\n"
                   "b,M,III,4.0,0,1\n"
                   "c,X,II,2,2.5,1\n"      # X is no category; 2.5 is no whole number
                   "d,M,,3,21,2\n")         # missing grade; 21 beyond bounds; 2 is not 0/1
    table = read_ehr_table(csv, spec)
    frame = table.frame
    assert frame.loc["a"].tolist() == [0, 0, 0, 3, 0] and frame.loc["b"].tolist() == [1, 2, 3, 0, 1]
    assert pd.isna(frame.loc["c", "sex"]) and pd.isna(frame.loc["c", "visits"]) and frame.loc["c", "grade"] == 1
    assert pd.isna(frame.loc["d", "grade"]) and pd.isna(frame.loc["d", "visits"]) and pd.isna(frame.loc["d", "flag"])
    reasons = table.quarantine.set_index(["patient_id", "column"])["reason"]
    assert reasons[("c", "sex")] == "not one of the spec's categories"
    assert reasons[("c", "visits")].startswith("not a whole number")
    assert reasons[("d", "flag")] == "not one of the spec's categories"
    assert reasons[("d", "visits")].startswith("above physiological high")
    assert table.decisions["attributes_kept"] == 5  # text categories are values, not "missing"


def test_a_text_column_declared_numeric_is_one_message_naming_the_fix(tmp_path):
    spec = _typed_spec(tmp_path, [{"name": "therapy", "valid_low": 0, "valid_high": 1},
                                  {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 100}])
    csv = tmp_path / "t.csv"
    csv.write_text("id,therapy,age\na,yes,50\nb,no,60\nc,,70\n")
    with pytest.raises(InputError, match="'therapy' holds no number in any of its 2 non-missing record") as err:
        read_ehr_table(csv, spec)
    assert "kind: categorical" in str(err.value) and "yes" not in str(err.value)  # no cell value in the message


def test_spec_kinds_are_checked_when_the_spec_is_read(tmp_path):
    with pytest.raises(InputError, match="list its categories"):
        _typed_spec(tmp_path, [{"name": "grade", "kind": "ordinal"}])
    with pytest.raises(InputError, match="exactly two categories"):
        _typed_spec(tmp_path, [{"name": "sex", "kind": "binary", "categories": ["F", "M", "X"]}])
    with pytest.raises(InputError, match="remove the bounds"):
        _typed_spec(tmp_path, [{"name": "sex", "kind": "binary", "valid_low": 0, "valid_high": 1}])
