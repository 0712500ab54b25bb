import hashlib

import numpy as np
import pandas as pd
import pytest

from privehr.models.data.cohort import select_cohort
from privehr.core.errors import InputError
from privehr.io.demo_data import write_demo_mimic
from privehr.io.mimic_extract import check_extract, inspect_extract, read_patients, read_window, read_window_pandas


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cohort_ids(path):
    return select_cohort(read_patients(path)).stays["icustay_id"].to_numpy()


def test_streaming_window_equals_pandas_on_the_real_demo_extract(real_demo_extract):
    before = _sha(real_demo_extract)
    ids = _cohort_ids(real_demo_extract)
    streamed = read_window(real_demo_extract, ids, 24, chunk_rows=300)  # many small reads
    assert streamed.equals(read_window_pandas(real_demo_extract, ids, 24))
    assert streamed.mean.shape == (57, 24, 93) and streamed.missing_rows == 0
    assert _sha(real_demo_extract) == before  # read only


def test_inspect_real_demo_extract(real_demo_extract):
    s = inspect_extract(real_demo_extract)
    assert s["stays"] == 84 and s["variables"] == 93 and s["patients_columns"] == 29
    assert s["codes_present"] and s["hourly_rows"] == 5175
    assert abs(s["cohort"]["missing_fraction_first_hours_means"] - 0.8877) < 1e-3


@pytest.mark.parametrize("options", [
    dict(),
    dict(n_variables=93, patients_columns=29, label_dtype="int32", datetime_unit="us", with_codes=True),
])
def test_streaming_window_equals_pandas_on_generated_files(tmp_path, options):
    path = tmp_path / "all_hourly_data.h5"
    write_demo_mimic(path, n_stays=120, seed=7, **options)
    ids = _cohort_ids(path)
    for chunk in (256, 100_000):
        assert read_window(path, ids, 24, chunk).equals(read_window_pandas(path, ids, 24))
    s = inspect_extract(path)
    assert s["stays"] == 120 and s["variables"] == options.get("n_variables", 104)
    assert s["codes_present"] == options.get("with_codes", False)


def test_window_of_a_subset_in_any_order_and_other_hours(small_extract):
    ids = _cohort_ids(small_extract)[::-3]
    a = read_window(small_extract, ids, 12, 500)
    assert a.equals(read_window_pandas(small_extract, ids, 12))
    assert a.mean.shape[:2] == (ids.size, 12)


def test_missing_file_names_path_and_fix(tmp_path):
    with pytest.raises(InputError, match=r"not found: .*nope\.h5.*privehr demo-data mimic --out"):
        check_extract(tmp_path / "nope.h5")


def test_truncated_and_non_hdf5_files(tmp_path, small_extract):
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(small_extract.read_bytes()[:100_000])
    with pytest.raises(InputError, match=r"truncated\.h5 .*not a readable HDF5 file.*Expected MIMIC-Extract"):
        check_extract(truncated)
    text = tmp_path / "notes.h5"
    text.write_text("subject_id,hours_in\n1,0\n")
    with pytest.raises(InputError, match="not a readable HDF5 file"):
        check_extract(text)


def test_missing_keys_lists_found_and_required(tmp_path):
    path = tmp_path / "partial.h5"
    pd.DataFrame({"a": [1.0]}).to_hdf(path, key="interventions")
    with pytest.raises(InputError, match=r"lacks the key\(s\) \['patients', 'vitals_labs'\]. Keys found: \['interventions'\]"):
        check_extract(path)


def test_nan_labels_and_duplicate_stays_are_excluded_and_counted(tmp_path, small_extract):
    patients = pd.read_hdf(small_extract, "patients")
    patients = patients.astype({"mort_icu": float})
    long = patients.index[patients["max_hours"] > 30]
    patients.loc[long[0], "mort_icu"] = np.nan
    patients = pd.concat([patients, patients.loc[[long[1]]]])
    path = tmp_path / "dirty.h5"
    path.write_bytes(small_extract.read_bytes())
    patients.to_hdf(path, key="patients", format="table")
    s = inspect_extract(path)
    assert s["cohort"]["exclusions"]["missing_labels"] == 1
    assert s["cohort"]["exclusions"]["duplicate_stays"] == 2
    assert s["cohort"]["stays"] == inspect_extract(small_extract)["cohort"]["stays"] - 2


def test_the_source_of_a_file_says_simulated_only_for_the_simulators_own(tmp_path):
    from privehr.io.mimic_extract import SIMULATED_ATTR, extract_source
    import h5py

    write_demo_mimic(tmp_path / "sim.h5", n_stays=20, seed=1)
    source = extract_source(tmp_path / "sim.h5")
    assert source["simulated"] and "simulator" in source["generator"] and source["file"] == "sim.h5"
    with h5py.File(tmp_path / "sim.h5", "a") as h5:  # the same file as MIMIC-Extract would write it: no mark
        del h5.attrs[SIMULATED_ATTR]
    assert extract_source(tmp_path / "sim.h5") == {"file": "sim.h5", "path": str(tmp_path / "sim.h5"),
                                                   "simulated": False, "generator": None}


def test_the_real_demo_extract_is_not_called_simulated(real_demo_extract):
    from privehr.io.mimic_extract import extract_source

    assert not extract_source(real_demo_extract)["simulated"]
