"""Formula-looking text in the CSVs people open in a spreadsheet (privehr.io.spreadsheet), and the synthetic tables
that stay data: written as they are, with a warning where the spec's names or labels start like a formula."""

import pandas as pd
import pytest

from privehr.core.specs import EHRTableSpec, load_ehr_spec
from privehr.io.spreadsheet import escape_cell, spreadsheet_safe

PAYLOADS = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1)", "=HYPERLINK(\"http://x\")", "\t=1+1", "\r=1+1", "-"]


@pytest.mark.parametrize("cell", PAYLOADS)
def test_a_formula_looking_text_cell_gets_a_leading_quote(cell):
    assert escape_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-3.5", "+2e3", "1e-5", ".5", "text", "a=b", "", -3.5, 7, None])
def test_numbers_and_plain_text_stay_as_they_are(cell):
    assert escape_cell(cell) == cell


def test_a_frame_is_escaped_in_its_text_cells_and_headers_and_nowhere_else(tmp_path):
    frame = pd.DataFrame({"label": PAYLOADS[:4], "=x": [1.0, -2.0, 3.5, float("nan")],
                          "flag": [True, False, True, False]})
    spreadsheet_safe(frame).to_csv(tmp_path / "t.csv", index=False)
    back = pd.read_csv(tmp_path / "t.csv")
    assert list(back.columns) == ["label", "'=x", "flag"]
    assert back["label"].tolist() == ["'" + p for p in PAYLOADS[:4]]
    pd.testing.assert_series_equal(back["'=x"], frame["=x"], check_names=False)
    assert back["flag"].tolist() == frame["flag"].tolist()
    assert frame["label"].tolist() == PAYLOADS[:4]  # a copy: the frame code goes on using is untouched


def test_synthetic_tables_are_data_so_a_formula_looking_label_is_named_not_rewritten():
    """The synthetic tables are read back as data (the evaluation, a partner's code map the spec's labels back):
    they stay byte-faithful, and the bundle's log and card name the columns a spreadsheet would run."""
    from privehr.tasks.synthesis_bundle import _formula_like, _formula_note

    assert _formula_like(load_ehr_spec("harrod_ehr")) == []
    spec = EHRTableSpec.model_validate({
        "name": "t", "attributes": [
            {"name": "age", "kind": "integer", "valid_low": 0, "valid_high": 120},
            {"name": "ward", "kind": "categorical", "categories": ["a", "=cmd|' /C calc'!A0"]},
            {"name": "test", "kind": "binary", "categories": ["+", "neg"]},
            {"name": "score", "kind": "ordinal", "categories": [-1, 0, 1]}]})
    columns = _formula_like(spec)
    assert columns == ["ward", "test"]  # -1 is a number, not a formula
    note = _formula_note(columns)
    assert "ward, test" in note and "import them as text" in note and "cmd" not in note and "\n" not in note
