"""A simulated hemodynamic EHR table of the shape of Harrod et al.'s (Su et al. 2023, Table 1).

References:
    Su, Wang, Schiavazzi, Liu (2023). Differentially Private Normalizing Flows for Density Estimation, Data Synthesis,
    and Variational Inference with Application to Electronic Health Records. arXiv:2302.05787.

Each patient has a latent pulmonary-pressure severity z ~ N(0, 1) and a cardiac-output factor
c ~ N(0, 1); attribute j is  lo_j + (hi_j - lo_j) * Phi(a_j z + b_j c + e_j),  e_j ~ N(0, s_j^2),
with [lo_j, hi_j] the range of Table 1, so pressures rise together and the hypertension label
(mean PAP > 20 mmHg) depends on the other attributes. Missingness is completely at random with
Table 1's observed counts among 82 patients, plus two patients with no value at all (84 columns, as
the real file). Only Table 1's published aggregates are used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import ndtr

__all__ = ["HARROD_TABLE1", "simulate_ehr_table"]

# name: (min, max, patients observed of 82, loading on severity z, loading on cardiac factor c)
HARROD_TABLE1 = {
    "heart_rate2": (69.0, 105.0, 81, 0.2, 0.3),
    "systolic_bp_2": (83.0, 180.0, 81, 0.3, 0.2),
    "diastolic_bp_2": (49.0, 102.0, 81, 0.3, 0.2),
    "cardiac_output": (3.3, 10.9, 65, -0.1, 0.9),
    "systemic_vascular_resistan": (668.6, 2046.8, 64, 0.2, -0.8),
    "pulmonary_vascular_resista": (5.0, 245.8, 50, 0.7, -0.3),
    "cvp": (2.0, 28.0, 30, 0.6, 0.0),
    "right_ventricle_diastole": (2.0, 10.0, 11, 0.5, 0.0),
    "right_ventricle_systole": (12.0, 45.0, 46, 0.8, 0.0),
    "rvedp": (1.0, 20.0, 46, 0.6, 0.0),
    "aov_mean_pg": (5.0, 10.0, 2, 0.0, 0.3),
    "aov_peak_pg": (3.0, 18.0, 37, 0.0, 0.3),
    "mv_decel_time": (88.0, 289.0, 41, -0.3, 0.0),
    "mv_e_a_ratio": (0.7, 20.9, 39, 0.3, 0.0),
    "pv_at": (53.0, 190.0, 18, -0.6, 0.0),
    "pv_max_pg": (1.0, 18.0, 31, 0.2, 0.3),
    "ra_pressure": (3.0, 15.0, 50, 0.7, 0.0),
    "ra_vol_a4c": (57.0, 173.0, 4, 0.4, 0.0),
    "la_vol_a4c": (69.0, 179.0, 7, 0.5, 0.0),
    "lv_esv": (32.0, 32.0, 1, 0.0, 0.0),
    "lv_vol_a4c": (59.0, 642.0, 5, 0.2, 0.2),
    "lvef": (12.5, 75.0, 53, -0.2, 0.4),
    "lvot_max_flow": (60.0, 150.0, 0, 0.0, 0.3),
    "pap_diastolic": (5.0, 36.0, 65, 0.9, 0.0),
    "pap_systolic": (10.0, 60.0, 65, 0.9, 0.0),
    "wedge_pressure": (2.0, 26.0, 50, 0.8, 0.0),
}


def simulate_ehr_table(seed: int = 0, n_patients: int = 82, n_empty: int = 2) -> pd.DataFrame:
    """Patients x 26 attributes (NaN = missing), rows in random order, no id column."""
    rng = np.random.default_rng(seed)
    z, c = rng.standard_normal(n_patients), rng.standard_normal(n_patients)
    columns = {}
    for name, (lo, hi, observed, a, b) in HARROD_TABLE1.items():
        noise = np.sqrt(max(1.0 - a * a - b * b, 0.15))
        value = lo + (hi - lo) * ndtr(a * z + b * c + noise * rng.standard_normal(n_patients))
        value = np.round(value, 1)
        missing = rng.permutation(n_patients) >= min(round(observed * n_patients / 82), n_patients)
        value[missing] = np.nan
        columns[name] = value
    table = pd.DataFrame(columns)
    empty = pd.DataFrame(np.nan, index=range(n_empty), columns=table.columns)
    table = pd.concat([table, empty], ignore_index=True)
    return table.iloc[rng.permutation(len(table))].reset_index(drop=True)
