"""A latent-severity generative model of ICU stays in MIMIC-Extract's shape.

Each stay i draws a general severity s_i ~ N(0, 1) and, for each of the six SOFA organ systems k
(respiration, coagulation, liver, cardiovascular, CNS, renal), a dysfunction o_ik = 0.5 s_i +
0.87 w_ik that drifts over the stay, o_ikh = o_ik + r_ik min(h, 48)/24 with r_ik ~ N(0, 0.6^2).
Organ k has failed by the end of the first day to the degree f_ik = softplus(2 (e_ik - 1))/2,
e_ik = o_ik + r_ik (a smooth max(0, e_ik - 1): only dysfunction beyond a threshold kills, as SOFA's
thresholds). Outcomes therefore depend on a few specific variables, their trend and a threshold,
not only on a shared severity that every variable shows: learning them takes data (and clean
gradients), as on real ICU data.

* stay length   L_i = exp(log 48 h - 0.2 + 0.55 s_i + 0.3 (f_resp + f_cardio + f_renal) + 0.7 z_i),
  resampled until 12 h <= L_i < 241 h;
* ICU death     P(mort_icu) = sigmoid(a + 0.5 s_i + sum_k f_ik + 0.025 (age - 65) + unit + admission
  effects), with a fitted so that the rate among the benchmark cohort (max_hours > 30) is
  ``mortality_rate``;
* hourly vitals and labs  x_ivh = mu_v + sd_v z_ivh on the natural or log scale, with
  z_ivh proportional to g_v s_ih + b_v o_ikh + 0.55 u_iv + 0.45 e_ivh, where
  s_ih = s_i + (0.8 if the stay ends in death else 0) h / max_hours; an organ's variables
  (``_ORGAN``) load on its dysfunction (b_v) and weakly on s (g_v = 0.2), the others on s alone (g_v
  = their direction of derangement); SIRS-like variables (``_TWO_SIDED``: temperature, white cells,
  glucose, sodium) move in a per-stay direction by (softplus(2 s_ih) - 1)/2, which grows with
  severity (and is slightly negative for the healthiest stays), so a linear model sees little of them; an hour is measured with probability (1 - missing_v) * first-day boost *
  exp(0.15 s_i), with 1 + Poisson(lambda_v) measurements whose mean and standard deviation
  MIMIC-Extract would store (count = 0 -> NaN, NaN; count = 1 -> std NaN), clipped to the
  variable's valid range;
* interventions  stay-level episodes switched on with P = sigmoid(logit(p_k) + 1.2 s_i), with the
  respiratory dysfunction in place of s_i for ventilation and the cardiovascular one for vasopressors.

No record of any real patient is used: only aggregate marginals published with MIMIC-Extract.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["SimulatedExtract", "simulate_extract", "INTERVENTIONS", "ORGANS", "PATIENT_COLUMNS"]

INTERVENTIONS = [
    "vent", "vaso", "adenosine", "dobutamine", "dopamine", "epinephrine", "isuprel", "milrinone",
    "norepinephrine", "phenylephrine", "vasopressin", "colloid_bolus", "crystalloid_bolus",
    "nivdurations",
]
# mean hours "on" per stay in the full extract (interventions_mean_hours_per_stay.txt)
_INTERVENTION_HOURS = {
    "vent": 12.2, "vaso": 8.1, "adenosine": 0.0015, "dobutamine": 0.36, "dopamine": 0.95,
    "epinephrine": 0.6, "isuprel": 0.0055, "milrinone": 0.87, "norepinephrine": 2.7,
    "phenylephrine": 4.06, "vasopressin": 0.9, "colloid_bolus": 0.16, "crystalloid_bolus": 2.16,
    "nivdurations": 25.8,
}
_VASOPRESSORS = ["dopamine", "epinephrine", "norepinephrine", "phenylephrine", "vasopressin"]
_BOLUSES = ["colloid_bolus", "crystalloid_bolus"]

PATIENT_COLUMNS = [
    "gender", "ethnicity", "age", "insurance", "admittime", "diagnosis_at_admission", "dischtime",
    "discharge_location", "fullcode_first", "dnr_first", "fullcode", "dnr", "dnr_first_charttime",
    "timecmo_chart", "cmo_first", "cmo_last", "cmo", "deathtime", "intime", "outtime", "los_icu",
    "admission_type", "first_careunit", "mort_icu", "mort_hosp", "hospital_expire_flag",
    "hospstay_seq", "readmission_30", "max_hours",
]

# direction in which the general severity moves a variable outside any organ system (in units of
# its sd); unlisted variables get a small name-seeded direction
_DIRECTION = {"hematocrit": -0.25, "hemoglobin": -0.25, "chloride": 0.1}
ORGANS = ["respiration", "coagulation", "liver", "cardiovascular", "cns", "renal"]
# variable -> (organ system, direction of derangement as the organ fails, in units of its sd)
_ORGAN = {
    "partial pressure of oxygen": ("respiration", -0.6), "fraction inspired oxygen": ("respiration", 0.5),
    "fraction inspired oxygen set": ("respiration", 0.5), "oxygen saturation": ("respiration", -0.5),
    "respiratory rate": ("respiration", 0.45), "positive end-expiratory pressure set": ("respiration", 0.4),
    "partial pressure of carbon dioxide": ("respiration", 0.3),
    "platelets": ("coagulation", -0.6), "prothrombin time inr": ("coagulation", 0.5),
    "prothrombin time pt": ("coagulation", 0.5), "partial thromboplastin time": ("coagulation", 0.4),
    "fibrinogen": ("coagulation", -0.3),
    "bilirubin": ("liver", 0.7), "alanine aminotransferase": ("liver", 0.5),
    "asparate aminotransferase": ("liver", 0.5), "albumin": ("liver", -0.35), "alkaline phosphate": ("liver", 0.3),
    "mean blood pressure": ("cardiovascular", -0.55), "systolic blood pressure": ("cardiovascular", -0.55),
    "diastolic blood pressure": ("cardiovascular", -0.45), "heart rate": ("cardiovascular", 0.5),
    "lactate": ("cardiovascular", 0.6), "lactic acid": ("cardiovascular", 0.6),
    "central venous pressure": ("cardiovascular", 0.25),
    "glascow coma scale total": ("cns", -0.75),
    "creatinine": ("renal", 0.65), "blood urea nitrogen": ("renal", 0.55), "potassium": ("renal", 0.3),
    "bicarbonate": ("renal", -0.4), "ph": ("renal", -0.35), "anion gap": ("renal", 0.4),
}
# SIRS-like variables that leave the normal range on either side: share of stays deviating upwards
_TWO_SIDED = {"temperature": 0.7, "white blood cell count": 0.7, "glucose": 0.8, "sodium": 0.5}
_ETHNICITY = {  # group -> (share, categories written)
    "WHITE": (0.715, ["WHITE", "WHITE - OTHER EUROPEAN", "WHITE - RUSSIAN"]),
    "OTHER": (0.150, ["UNKNOWN/NOT SPECIFIED", "OTHER", "UNABLE TO OBTAIN", "MULTI RACE ETHNICITY"]),
    "BLACK": (0.077, ["BLACK/AFRICAN AMERICAN", "BLACK/HAITIAN"]),
    "HISPANIC": (0.033, ["HISPANIC OR LATINO", "HISPANIC/LATINO - PUERTO RICAN"]),
    "ASIAN": (0.025, ["ASIAN", "ASIAN - CHINESE"]),
}
_CATEGORICAL = {
    "insurance": (["Medicare", "Private", "Medicaid", "Government", "Self Pay"],
                  [18317, 11846, 2782, 1050, 477]),
    "admission_type": (["EMERGENCY", "ELECTIVE", "URGENT"], [27830, 5705, 937]),
    "first_careunit": (["MICU", "CSRU", "SICU", "CCU", "TSICU"], [12207, 7050, 5520, 5193, 4502]),
}
_UNIT_EFFECT = {"MICU": 0.3, "CSRU": -1.1, "SICU": 0.2, "CCU": 0.0, "TSICU": 0.0}
_DIAGNOSES = ["SEPSIS", "PNEUMONIA", "CONGESTIVE HEART FAILURE", "CORONARY ARTERY DISEASE",
              "GASTROINTESTINAL BLEED", "INTRACRANIAL HEMORRHAGE", "ALTERED MENTAL STATUS", "FEVER"]


@dataclass
class SimulatedExtract:
    """The frames MIMIC-Extract writes: ``patients`` and the hourly ``vitals_labs``/``interventions``."""

    patients: pd.DataFrame
    vitals_labs: pd.DataFrame
    interventions: pd.DataFrame
    codes: pd.DataFrame | None = None

    @property
    def vitals_labs_mean(self) -> pd.DataFrame:
        """As MIMIC-Extract writes it: an iloc slice that keeps the unused column levels."""
        keep = self.vitals_labs.columns.get_level_values(-1) == "mean"
        return self.vitals_labs.iloc[:, keep]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _draw(rng, values, counts, size):
    p = np.asarray(counts, float)
    return rng.choice(np.asarray(values, dtype=object), size=size, p=p / p.sum())


def _softplus(x):
    return np.logaddexp(0.0, x)


def _stay_lengths(rng, severity: np.ndarray, failure: np.ndarray) -> np.ndarray:
    """Hours in the ICU, log-normal in severity and in respiratory, cardiovascular and renal failure,
    resampled into MIMIC-Extract's 12-240 h window."""
    hours = np.empty_like(severity)
    todo = np.arange(severity.size)
    prolonging = failure[:, [ORGANS.index(k) for k in ("respiration", "cardiovascular", "renal")]].sum(1)
    while todo.size:
        draw = np.exp(np.log(48.0) - 0.2 + 0.55 * severity[todo] + 0.3 * prolonging[todo]
                      + 0.7 * rng.standard_normal(todo.size))
        ok = (draw >= 12.0) & (draw < 241.0)
        hours[todo[ok]] = draw[ok]
        todo = todo[~ok]
    return hours


def _fit_intercept(logit: np.ndarray, target: float) -> float:
    """Bisection for a with mean(sigmoid(a + logit)) = target."""
    lo, hi = -20.0, 20.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _sigmoid(mid + logit).mean() < target else (lo, mid)
    return (lo + hi) / 2


def simulate_extract(variables: pd.DataFrame, n_stays: int, seed: int = 0, *,
                     mortality_rate: float = 0.07, patients_columns: int = 28,
                     label_dtype: str = "int64", datetime_unit: str = "ns",
                     with_codes: bool = False) -> SimulatedExtract:
    """Draw ``n_stays`` ICU stays.

    Args:
        variables: one row per LEVEL2 variable, in MIMIC-Extract's column order, with columns
            level2, mean, sd, missing_percent, valid_low, valid_high (the bundled
            ``mimic_extract_variables.csv`` or a subset of its rows).
        n_stays: number of stays (one per subject, as in MIMIC-Extract's cohort).
        seed: seed of every random draw; the same arguments give the same frames.
        mortality_rate: ICU mortality among stays with max_hours > 30.
        patients_columns: 28 (GCP release) or 29 (HEAD, adds ``timecmo_chart``).
        label_dtype: dtype of the 0/1 label columns ("int64" as the full file, "int32" as the demo).
        datetime_unit: "ns" or "us" resolution of the datetime columns.
        with_codes: also build the optional ``codes`` frame (ICD-9 lists per stay hour).
    """
    if n_stays < 1:
        raise ValueError("n_stays must be positive")
    if patients_columns not in (28, 29):
        raise ValueError("patients_columns must be 28 or 29")
    rng = np.random.default_rng(seed)
    n = n_stays

    # --- stays and demographics -------------------------------------------------------------
    severity = rng.standard_normal(n)
    gender = rng.choice(np.array(["M", "F"], dtype=object), n, p=[19494 / 34472, 14978 / 34472])
    groups = list(_ETHNICITY)
    group = rng.choice(len(groups), n, p=np.array([_ETHNICITY[g][0] for g in groups]) / sum(
        _ETHNICITY[g][0] for g in groups))
    ethnicity = np.array([rng.choice(_ETHNICITY[groups[g]][1]) for g in group], dtype=object)
    age_bucket = rng.choice(4, n, p=np.array([1832, 5489, 12938, 14213]) / 34472)
    age = np.choose(age_bucket, [rng.uniform(15, 31, n), rng.uniform(31, 50, n),
                                 rng.uniform(50, 70, n), rng.uniform(70, 89.9, n)])
    shifted = (age_bucket == 3) & (rng.random(n) < 0.12)  # MIMIC's >89 date shift: ages near 300
    age = np.where(shifted, rng.uniform(299.5, 311.0, n), age)
    cats = {k: _draw(rng, v, c, n) for k, (v, c) in _CATEGORICAL.items()}
    effective_age = np.where(shifted, 91.0, age)
    severity = severity + 0.012 * (effective_age - 65) - 0.4 * (cats["admission_type"] == "ELECTIVE")

    organ = 0.5 * severity[:, None] + np.sqrt(0.75) * rng.standard_normal((n, len(ORGANS)))
    organ_trend = 0.6 * rng.standard_normal((n, len(ORGANS)))  # per 24 h, for the first 48 h
    failure = _softplus(2.0 * (organ + organ_trend - 1.0)) / 2.0  # at the end of the first day

    hours = _stay_lengths(rng, severity, failure)
    max_hours = np.floor(hours).astype(np.int64)
    in_cohort = max_hours > 30
    logit = (0.5 * severity + failure.sum(1) + 0.025 * (effective_age - 65)
             + np.vectorize(_UNIT_EFFECT.get)(cats["first_careunit"])
             - 1.5 * (cats["admission_type"] == "ELECTIVE"))
    a = _fit_intercept(logit[in_cohort], mortality_rate) if in_cohort.any() else 0.0
    mort_icu = rng.random(n) < _sigmoid(a + logit)
    mort_hosp = mort_icu | (rng.random(n) < _sigmoid(a + logit - 1.2))

    # --- times --------------------------------------------------------------------------------
    unit = f"datetime64[{datetime_unit}]"
    base = np.datetime64("2100-01-01T00:00:00", "s")
    admit = base + rng.integers(0, 100 * 365 * 86400, n).astype("timedelta64[s]")
    intime = admit + (rng.exponential(6 * 3600, n) + 60).astype("timedelta64[s]")
    stay = (hours * 3600).astype("timedelta64[s]")
    outtime = intime + stay
    dischtime = outtime + np.where(mort_icu, 0, rng.exponential(4 * 86400, n)).astype("timedelta64[s]")
    deathtime = np.where(mort_icu, outtime, np.where(mort_hosp, dischtime, np.datetime64("NaT")))
    dischtime = np.where(mort_hosp & ~mort_icu, deathtime, dischtime)
    dnr = (rng.random(n) < _sigmoid(-2.0 + 1.2 * severity + 2.0 * mort_hosp)).astype(float)
    dnr_time = np.where(dnr == 1, intime + (rng.random(n) * hours * 3600).astype("timedelta64[s]"),
                        np.datetime64("NaT"))
    cmo = (rng.random(n) < 0.5 * dnr * mort_hosp).astype(float)
    code_missing = rng.random(n) < 6310 / 34472
    nan_or = lambda x: np.where(code_missing, np.nan, x)  # noqa: E731

    def dt(x):
        return pd.Series(np.asarray(x, dtype="datetime64[s]").astype(unit))

    subject_id = np.sort(rng.choice(np.arange(10_000, 10_000 + 10 * n), n, replace=False))
    hadm_id = rng.choice(np.arange(100_000, 100_000 + 10 * n), n, replace=False)
    icustay_id = rng.choice(np.arange(200_000, 200_000 + 10 * n), n, replace=False)
    labels = {k: v.astype(label_dtype) for k, v in
              dict(mort_icu=mort_icu, mort_hosp=mort_hosp, readmission_30=rng.random(n) < 0.05).items()}
    patients = pd.DataFrame({
        "gender": pd.Categorical(gender),
        "ethnicity": pd.Categorical(ethnicity),
        "age": age,
        "insurance": pd.array(cats["insurance"], dtype="str"),
        "admittime": dt(admit),
        "diagnosis_at_admission": pd.array(rng.choice(_DIAGNOSES, n), dtype="str"),
        "dischtime": dt(dischtime),
        "discharge_location": pd.array(np.where(mort_hosp, "DEAD/EXPIRED", rng.choice(
            ["HOME", "HOME HEALTH CARE", "SNF", "REHAB/DISTINCT PART HOSP"], n)), dtype="str"),
        "fullcode_first": nan_or(1.0 - (dnr * (rng.random(n) < 0.5))),
        "dnr_first": nan_or(dnr * (rng.random(n) < 0.5)),
        "fullcode": nan_or(1.0 - dnr),
        "dnr": nan_or(dnr),
        "dnr_first_charttime": dt(dnr_time),
        "timecmo_chart": dt(np.where(cmo == 1, dnr_time, np.datetime64("NaT"))),
        "cmo_first": nan_or(np.zeros(n)),
        "cmo_last": nan_or(cmo),
        "cmo": nan_or(cmo),
        "deathtime": dt(deathtime),
        "intime": dt(intime),
        "outtime": dt(outtime),
        "los_icu": hours / 24.0,
        "admission_type": pd.Categorical(cats["admission_type"]),
        "first_careunit": pd.Categorical(cats["first_careunit"]),
        "mort_icu": labels["mort_icu"],
        "mort_hosp": labels["mort_hosp"],
        "hospital_expire_flag": labels["mort_hosp"].copy(),
        "hospstay_seq": np.ones(n, np.int64),
        "readmission_30": labels["readmission_30"],
        "max_hours": max_hours,
    })
    columns = [c for c in PATIENT_COLUMNS if patients_columns == 29 or c != "timecmo_chart"]
    patients = patients[columns]
    patients.index = pd.MultiIndex.from_arrays([subject_id, hadm_id, icustay_id],
                                               names=["subject_id", "hadm_id", "icustay_id"])

    # --- hourly rows ----------------------------------------------------------------------------
    rows_per_stay = max_hours + 1
    stay_of_row = np.repeat(np.arange(n), rows_per_stay)
    starts = np.concatenate([[0], np.cumsum(rows_per_stay)[:-1]])
    hour = np.arange(stay_of_row.size) - starts[stay_of_row]
    index = pd.MultiIndex.from_arrays(
        [subject_id[stay_of_row], hadm_id[stay_of_row], icustay_id[stay_of_row], hour],
        names=["subject_id", "hadm_id", "icustay_id", "hours_in"])
    progress = hour / np.maximum(max_hours[stay_of_row], 1)
    s_row = severity[stay_of_row] + 0.8 * mort_icu[stay_of_row] * progress

    organ_rows = organ[stay_of_row] + organ_trend[stay_of_row] * (np.minimum(hour, 48) / 24.0)[:, None]
    vitals_labs = _vitals_labs(rng, variables, n, stay_of_row, hour, s_row, organ_rows, severity, index)
    interventions = _interventions(rng, n, stay_of_row, hour, max_hours, severity, organ, index)
    codes = None
    if with_codes:
        pool = ["4019", "4280", "42731", "41401", "5849", "25000", "2724", "51881", "5990", "0389"]
        per_stay = [sorted(rng.choice(pool, rng.integers(1, 6), replace=False).tolist()) for _ in range(n)]
        codes = pd.DataFrame({"icd9_codes": [per_stay[i] for i in stay_of_row]},
                             index=index.droplevel("hours_in"))
    return SimulatedExtract(patients, vitals_labs, interventions, codes)


def _vitals_labs(rng, variables: pd.DataFrame, n, stay_of_row, hour, s_row, organ_rows, severity, index):
    spec = variables.set_index("level2")
    names = list(spec.index)  # the bundled table is in MIMIC-Extract's column order
    rows = stay_of_row.size
    block = np.empty((rows, 3 * len(names)), dtype=np.float64)
    first_day = hour < 24
    for j, name in enumerate(names):
        v = spec.loc[name]
        mean, sd = float(v["mean"]), max(float(v["sd"]), 1e-6)
        lo, hi = float(v["valid_low"]), float(v["valid_high"])
        miss = float(v["missing_percent"]) / 100.0
        vital = miss < 0.5
        p = (1 - miss) * np.where(first_day, 1.6 if not vital else 1.05, 1.0)
        p_row = np.clip(p * np.exp(0.15 * severity[stay_of_row]), 0.0, 1.0)
        observed = rng.random(rows) < p_row
        count = np.where(observed, 1 + rng.poisson(0.35 if vital else 0.08, rows), 0).astype(np.float64)
        if name in _ORGAN:  # the organ's dysfunction, and a little of the general severity
            system, loading = _ORGAN[name]
            signal = 0.2 * np.sign(loading) * s_row + loading * organ_rows[:, ORGANS.index(system)]
            scale = 0.2**2 + loading**2
        elif name in _TWO_SIDED:  # deranged on a per-stay side, by how severe the stay is
            side = np.where(rng.random(n) < _TWO_SIDED[name], 1.0, -1.0)[stay_of_row]
            signal = side * 0.5 * (_softplus(2.0 * s_row) - 1.0)
            scale = 0.5**2
        else:  # the general severity, in the variable's direction (name-seeded when unlisted)
            direction = _DIRECTION.get(name)
            if direction is None:
                direction = np.random.default_rng(zlib.crc32(name.encode())).uniform(-0.25, 0.25)
            signal, scale = direction * s_row, direction**2
        z = signal + 0.55 * rng.standard_normal(n)[stay_of_row] + 0.45 * rng.standard_normal(rows)
        z /= np.sqrt(scale + 0.55**2 + 0.45**2)
        skewed = sd > 0.5 * mean and mean > 0
        if skewed:  # log-normal with the published mean and sd
            s2 = np.log1p((sd / mean) ** 2)
            true = np.exp(np.log(mean) - s2 / 2 + np.sqrt(s2) * z)
            within = 0.15 * true
        else:
            true = mean + sd * z
            within = np.full(rows, 0.25 * sd)
        noise = rng.standard_normal(rows) * within / np.sqrt(np.maximum(count, 1))
        value = np.clip(true + noise, lo, hi)
        dof = np.maximum(count - 1, 1)
        std = within * np.sqrt(rng.chisquare(dof) / dof)
        block[:, 3 * j] = count
        block[:, 3 * j + 1] = np.where(count > 0, value, np.nan)
        block[:, 3 * j + 2] = np.where(count > 1, std, np.nan)
    columns = pd.MultiIndex.from_tuples([(nm, agg) for nm in names for agg in ("count", "mean", "std")],
                                        names=["LEVEL2", "Aggregation Function"])
    return pd.DataFrame(block, index=index, columns=columns, copy=False)


def _interventions(rng, n, stay_of_row, hour, max_hours, severity, organ, index):
    length = max_hours + 1
    out = {}
    for name in INTERVENTIONS:
        frac = _INTERVENTION_HOURS[name] / 63.85
        if name in _BOLUSES:  # single charted hours
            p = _sigmoid(np.log(frac / (1 - frac)) + 0.8 * severity[stay_of_row])
            out[name] = (rng.random(stay_of_row.size) < p).astype(np.int64)
            continue
        span = 0.5 if name in ("vent", "nivdurations") else 1.0  # calibrates mean hours on
        p_on = np.clip(frac / span, 1e-5, 0.95)
        drive = (organ[:, ORGANS.index("respiration")] if name in ("vent", "nivdurations")
                 else organ[:, ORGANS.index("cardiovascular")] if name in _VASOPRESSORS else severity)
        on = rng.random(n) < _sigmoid(np.log(p_on / (1 - p_on)) + 1.2 * drive)
        start = np.floor(rng.uniform(0, 0.4, n) * length)
        end = start + np.ceil(rng.uniform(0.2, 0.8, n) * length)
        out[name] = (on[stay_of_row] & (hour >= start[stay_of_row]) & (hour <= end[stay_of_row])).astype(np.int64)
    out["vaso"] = np.maximum.reduce([out[k] for k in _VASOPRESSORS])  # any vasopressor
    return pd.DataFrame(out, index=index)[INTERVENTIONS]
