import numpy as np
import pandas as pd

from privehr.models.data.cohort import select_cohort


def _patients(rows):
    df = pd.DataFrame(rows, columns=["subject_id", "hadm_id", "icustay_id", "max_hours", "los_icu", "mort_icu"])
    df["mort_hosp"] = df["mort_icu"]
    return df.set_index(["subject_id", "hadm_id", "icustay_id"])


def test_rule_labels_and_exclusions_are_counted():
    patients = _patients([
        (1, 10, 100, 31, 1.5, 0),    # kept, los_3 = 0
        (2, 20, 200, 30, 1.3, 1),    # max_hours = 30: not > 24 + 6
        (3, 30, 300, 190, 7.8, 1),   # kept, los_3 = los_7 = 1
        (4, 40, 400, 90, np.nan, 0),  # missing label
        (5, 50, 500, 90, 3.8, 2),    # non-binary label
        (6, 60, 600, 90, 3.8, 0),    # duplicated stay: both copies excluded
        (6, 60, 600, 91, 3.8, 0),
        (3, 31, 301, 90, 3.8, 0),    # subject 3's second stay: one stay per patient, the earliest
    ])
    cohort = select_cohort(patients)
    assert cohort.stays["icustay_id"].tolist() == [100, 300]
    assert cohort.stays["los_3"].tolist() == [0, 1]
    assert cohort.stays["los_7"].tolist() == [0, 1]
    assert cohort.stays["mort_icu"].tolist() == [0, 1]
    assert cohort.exclusions == {"duplicate_stays": 2, "missing_labels": 1, "non_binary_labels": 1,
                                 "max_hours_le_30": 1, "later_stays_of_a_subject": 1}
    assert len(cohort.stays) + sum(cohort.exclusions.values()) == len(patients)


def test_stay_labels_are_the_cohort_rules_with_no_label_where_a_value_is_missing_or_not_binary():
    from privehr.models.data.cohort import stay_labels

    table = pd.DataFrame({"mort_icu": [0, 1, 2, np.nan, "x"], "los_icu": [2.9, 3.0, 3.1, 7.5, np.nan]})
    labels = stay_labels(table)
    assert sorted(labels) == ["los_3", "los_7", "mort_icu"]  # mort_hosp: no column, no label
    np.testing.assert_array_equal(labels["mort_icu"], [0, 1, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(labels["los_3"], [0, 0, 1, 1, np.nan])  # more than 3 days
    np.testing.assert_array_equal(labels["los_7"], [0, 0, 0, 1, np.nan])
