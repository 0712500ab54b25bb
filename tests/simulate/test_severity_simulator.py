import numpy as np
import pandas as pd

from privehr.models.data.cohort import select_cohort
from privehr.simulate.severity_simulator import INTERVENTIONS, simulate_extract
from privehr.resources import mimic_extract_variables


def test_structure_and_marginals_follow_mimic_extract():
    variables = mimic_extract_variables()
    sim = simulate_extract(variables, 1500, seed=0)
    x = sim.vitals_labs
    assert x.shape[1] == 3 * 104 and list(x.columns.names) == ["LEVEL2", "Aggregation Function"]
    assert list(x.columns.get_level_values(0)[::3]) == variables["level2"].tolist()
    assert list(x.index.names) == ["subject_id", "hadm_id", "icustay_id", "hours_in"]
    assert all(x.index.get_level_values(i).dtype == np.int64 for i in range(4))
    # hours_in runs 0..max_hours for every stay
    hours = x.index.to_frame(index=False).groupby("icustay_id")["hours_in"].agg(["min", "max", "count"])
    max_hours = sim.patients.reset_index().set_index("icustay_id")["max_hours"]
    assert (hours["min"] == 0).all() and (hours["max"] == max_hours[hours.index]).all()
    assert (hours["count"] == hours["max"] + 1).all()
    assert max_hours.between(12, 240).all()
    count, mean, std = (x.xs(a, axis=1, level=1) for a in ("count", "mean", "std"))
    c, m, s = count.to_numpy(), mean.to_numpy(), std.to_numpy()
    assert np.isnan(m[c == 0]).all() and np.isnan(s[c <= 1]).all()
    assert np.isfinite(m[c > 0]).all() and np.isfinite(s[c > 1]).all()
    spec = variables.set_index("level2")
    assert (mean.min() >= spec["valid_low"][mean.columns] - 1e-9).all()
    assert (mean.max() <= spec["valid_high"][mean.columns] + 1e-9).all()
    assert list(sim.interventions.columns) == INTERVENTIONS
    assert set(np.unique(sim.interventions.to_numpy())) <= {0, 1}
    assert sim.patients.shape[1] == 28

    cohort = select_cohort(sim.patients)
    rates = cohort.label_rates()
    assert 0.04 < rates["mort_icu"] < 0.10
    assert 0.38 < rates["los_3"] < 0.52
    first_day = x.index.get_level_values("hours_in") < 24
    in_cohort = x.index.get_level_values("icustay_id").isin(cohort.stays["icustay_id"])
    missing = mean[first_day & in_cohort].isna().to_numpy().mean()
    assert 0.86 < missing < 0.92


def test_options_and_determinism():
    variables = mimic_extract_variables().iloc[:93]
    a = simulate_extract(variables, 40, seed=1, patients_columns=29, label_dtype="int32",
                         datetime_unit="us", with_codes=True)
    b = simulate_extract(variables, 40, seed=1, patients_columns=29, label_dtype="int32",
                         datetime_unit="us", with_codes=True)
    pd.testing.assert_frame_equal(a.vitals_labs, b.vitals_labs)
    assert a.patients.shape[1] == 29 and "timecmo_chart" in a.patients
    assert a.patients["mort_icu"].dtype == np.int32
    assert str(a.patients["intime"].dtype) == "datetime64[us]"
    assert a.vitals_labs.shape[1] == 3 * 93 and a.vitals_labs_mean.shape[1] == 93
    assert len(a.codes) == len(a.vitals_labs) and a.codes.index.nlevels == 3


def test_outcomes_depend_on_organ_systems_and_two_sided_derangement():
    """Variables of one organ system move together; a two-sided variable predicts death by its distance from
    normal, not by its value (what a linear model on the raw values cannot use)."""
    variables = mimic_extract_variables()
    sim = simulate_extract(variables, 3000, seed=2)
    cohort = select_cohort(sim.patients).stays.set_index("icustay_id")
    x = sim.vitals_labs.xs("mean", axis=1, level=1)
    first_day = x[x.index.get_level_values("hours_in") < 24]
    means = first_day.groupby(level="icustay_id").mean().loc[cohort.index]
    z = (means - means.mean()) / means.std()

    def corr(a, b):
        ok = a.notna() & b.notna()
        return float(np.corrcoef(a[ok], b[ok])[0, 1])

    same_organ = corr(z["creatinine"], z["blood urea nitrogen"])  # renal
    other_organ = corr(z["creatinine"], z["platelets"])  # renal vs coagulation
    assert same_organ > 0.3 and same_organ > abs(other_organ) + 0.15
    died = cohort["mort_icu"].astype(float)
    assert abs(corr(z["sodium"], died)) < 0.1  # deranged up or down with equal odds
    assert corr(z["sodium"].abs(), died) > 0.15
