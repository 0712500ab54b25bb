"""Bundled aggregate resources (no patient-level data)."""

from importlib.resources import files

import pandas as pd


def mimic_extract_variables() -> pd.DataFrame:
    """The 104 LEVEL2 variables in MIMIC-Extract's column order with marginals and valid ranges.

    Derived from MLforHealth/MIMIC_Extract resources (MIT, (c) 2019 MLforHealth) by
    ``build_mimic_variables.py`` beside this file.
    """
    with files(__package__).joinpath("mimic_extract_variables.csv").open() as fh:
        return pd.read_csv(fh)
