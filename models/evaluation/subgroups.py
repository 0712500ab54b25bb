"""Patient subgroups of MIMIC-Extract's ``patients`` table, for the evaluation by group.

DP-SGD is known to cost under-represented groups most (Suriyakumar, Papernot, Goldenberg, Ghassemi,
"Chasing Your Long Tails: Differentially Private Prediction in Health Care Settings", FAccT 2021, on
MIMIC-III), so every grid cell is evaluated by sex, age band and ethnicity. The groups are coarse on
purpose: MIMIC-III records some 40 ethnicity strings, most of them a handful of stays.

* sex: ``gender`` M / F; anything else "unknown";
* age band: <45, 45-64, 65-79, 80+ years at admission; MIMIC-III shifts the ages of patients over 89
  to about 300, and they fall in 80+; a missing age is "unknown";
* ethnicity: the first word of MIMIC-III's category (WHITE, BLACK, HISPANIC, ASIAN); everything
  else, including UNKNOWN/NOT SPECIFIED, is "other/unknown".

A group smaller than the minimum size, or with fewer than the minimum number of stays of either
class, is reported as too small and gets no number at all.

>>> import numpy as np
>>> groups = subgroups({"gender": np.array(["M", "F", "F"]), "age": np.array([30.0, 70.0, 300.2]),
...                     "ethnicity": np.array(["WHITE", "BLACK/AFRICAN AMERICAN", "UNKNOWN/NOT SPECIFIED"])})
>>> [(a, g, m.tolist()) for (a, g), m in groups.items() if a == "age band" and m.any()]
[('age band', '<45', [True, False, False]), ('age band', '65-79', [False, True, False]), ('age band', '80+', [False, False, True])]
"""

from __future__ import annotations

import numpy as np

__all__ = ["ATTRIBUTES", "AGE_BANDS", "subgroups", "large_enough"]

ATTRIBUTES = {"sex": "gender", "age band": "age", "ethnicity": "ethnicity"}
AGE_BANDS = [("<45", 0, 45), ("45-64", 45, 65), ("65-79", 65, 80), ("80+", 80, np.inf)]
_SEX = {"M": "male", "F": "female"}
_ETHNICITY = {"WHITE": "white", "BLACK": "black", "HISPANIC": "hispanic", "ASIAN": "asian"}


def _sex(values: np.ndarray) -> np.ndarray:
    return np.array([_SEX.get(str(v).strip().upper(), "unknown") for v in values], dtype=object)


def _age_band(values: np.ndarray) -> np.ndarray:
    age = np.asarray(values, float)
    out = np.full(age.shape, "unknown", dtype=object)
    for name, low, high in AGE_BANDS:
        out[(age >= low) & (age < high)] = name
    return out


def _ethnicity(values: np.ndarray) -> np.ndarray:
    first = [str(v).strip().upper().replace("/", " ").split(" ")[0] for v in values]
    return np.array([_ETHNICITY.get(f, "other/unknown") for f in first], dtype=object)


_GROUPINGS = {"sex": (_sex, [*_SEX.values(), "unknown"]),
              "age band": (_age_band, [b[0] for b in AGE_BANDS] + ["unknown"]),
              "ethnicity": (_ethnicity, [*_ETHNICITY.values(), "other/unknown"])}


def subgroups(demographics: dict[str, np.ndarray]) -> dict[tuple[str, str], np.ndarray]:
    """(attribute, group) -> boolean mask over the stays, for every attribute whose column is present."""
    out = {}
    for attribute, column in ATTRIBUTES.items():
        if column not in demographics:
            continue
        grouping, names = _GROUPINGS[attribute]
        labels = grouping(demographics[column])
        for name in names:
            out[(attribute, name)] = labels == name
    return out


def large_enough(y: np.ndarray, mask: np.ndarray, min_stays: int, min_per_class: int) -> bool:
    """Whether a group may be reported with numbers."""
    members = np.asarray(y)[mask]
    positives = int(members.sum())
    return members.size >= min_stays and positives >= min_per_class and members.size - positives >= min_per_class
