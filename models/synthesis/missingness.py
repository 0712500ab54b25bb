"""Missingness inside the DP release: indicator columns a synthesizer learns, and a public placeholder value.

References:
    Su, Wang, Shi, Jiang, Zhang (2023). Differentially private normalizing flows for density estimation, data
    synthesis, and variational inference with application to electronic health records. (MICE first, then DP-NF.)
    Ponomareva et al. (2023). How to DP-fy ML: A Practical Guide to Machine Learning with Differential Privacy. JAIR.

The papers' order imputes the training patients by MICE and then trains a DP synthesizer on the completed table.
MICE's equations are fitted on every training patient, so one patient's values move every other patient's
imputations: the per-record sensitivity the accountant assumes does not hold, and the release is not DP end to end.

Here the synthesizer sees the table as delivered instead: each attribute ``a`` gets a binary column
``a__missing`` (1 where the value is missing), and the missing value itself is replaced by a **public placeholder**
(the centre of the spec's valid range, rounded for an integer column; code 0 for a discrete one). A patient's row
then depends on that patient alone, so DP-SGD's (or a marginal method's) per-record bound holds. Every attribute of
the spec gets an indicator, whatever the data say: which columns are ever missing would itself be a fact about the
patients. A synthetic table is decoded, its indicators put the missing values back (:func:`restore_missing`), and
it may then be imputed by MICE fitted on the synthetic table itself: post-processing, inside the guarantee.

>>> from privehr.core.specs import EHRTableSpec
>>> spec = EHRTableSpec(name="t", attributes=[{"name": "hr", "valid_low": 20, "valid_high": 220},
...                                           {"name": "sex", "kind": "binary"}])
>>> frame = pd.DataFrame({"hr": [80.0, np.nan], "sex": [np.nan, 1.0]})
>>> augmented = with_indicators(frame, spec, ["hr", "sex"])
>>> augmented.to_dict("list")
{'hr': [80.0, 120.0], 'sex': [0.0, 1.0], 'hr__missing': [0.0, 1.0], 'sex__missing': [1.0, 0.0]}
>>> restore_missing(augmented, ["hr", "sex"]).to_dict("list")
{'hr': [80.0, nan], 'sex': [nan, 1.0]}
>>> [a.name for a in missingness_spec(spec, ["hr", "sex"]).attributes]
['hr', 'sex', 'hr__missing', 'sex__missing']
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["INDICATOR_SUFFIX", "indicator", "indicator_names", "placeholder", "with_indicators", "restore_missing",
           "missingness_spec"]

INDICATOR_SUFFIX = "__missing"


def indicator(attribute: str) -> str:
    """The name of ``attribute``'s missingness indicator."""
    return attribute + INDICATOR_SUFFIX


def indicator_names(attributes: list[str]) -> list[str]:
    return [indicator(a) for a in attributes]


def placeholder(bounds) -> float:
    """The public value that stands in for a missing one: the centre of the valid range (rounded up to a whole
    number for an integer column, to the nearest level for a column with a ``step``), code 0 of a discrete column, 0
    where the spec gives no range.

    >>> from privehr.core.specs import VariableBounds
    >>> placeholder(VariableBounds(name="score", kind="integer", valid_low=5, valid_high=98, step=10))
    55.0
    """
    if bounds.discrete:
        return 0.0
    low, high = bounds.valid_low, bounds.valid_high
    if low is None or high is None:
        return 0.0 if low is None and high is None else float(low if high is None else high)
    centre = (low + high) / 2
    step = getattr(bounds, "step", None)
    if step:  # a column recorded in steps: the level nearest the centre, within the bounds
        return float(min(low + round((centre - low) / step) * step, low + np.floor((high - low) / step) * step))
    return float(np.ceil(centre)) if bounds.kind == "integer" else float(centre)


def with_indicators(frame: pd.DataFrame, spec, attributes: list[str]) -> pd.DataFrame:
    """``frame``'s ``attributes`` (frame units: values and codes), each missing value replaced by its placeholder,
    then one 0/1 indicator per attribute. An attribute the frame lacks (dropped as missing everywhere) is all
    missing: a column of placeholders with indicator 1."""
    bounds = spec.bounds()
    out = {}
    for a in attributes:
        values = frame[a].to_numpy(float) if a in frame else np.full(len(frame), np.nan)
        out[a] = np.where(np.isnan(values), placeholder(bounds[a]), values)
    for a in attributes:
        values = frame[a].to_numpy(float) if a in frame else np.full(len(frame), np.nan)
        out[indicator(a)] = np.isnan(values).astype(float)
    return pd.DataFrame(out, index=frame.index)


def restore_missing(frame: pd.DataFrame, attributes: list[str]) -> pd.DataFrame:
    """The attributes of a synthetic table with indicators, each value whose indicator rounds to 1 made missing;
    the indicators dropped."""
    out = frame[attributes].copy()
    for a in attributes:
        flag = np.rint(np.clip(frame[indicator(a)].to_numpy(float), 0, 1)) == 1
        out.loc[flag, a] = np.nan
    return out


def missingness_spec(spec, attributes: list[str]):
    """A copy of ``spec`` whose attributes are ``attributes`` then one binary indicator each (what the synthesizers'
    codecs read: kinds, bounds and categories are the spec's; the indicators are binary 0/1)."""
    from privehr.core.specs import VariableBounds

    bounds = spec.bounds()
    kept = [bounds[a] for a in attributes]
    flags = [VariableBounds(name=indicator(a), kind="binary", description=f"{a} is missing") for a in attributes]
    return spec.model_copy(update={"attributes": kept + flags})
