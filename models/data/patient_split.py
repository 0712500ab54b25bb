"""Patient-level, label-stratified train/dev/test split.

Subjects (not stays) are assigned: every stay of a subject lands in the same split, so no patient
is seen in training and evaluated in test. Subjects are grouped into strata by the combination of
their labels (max over their stays); within each stratum a seeded permutation is cut at
round(n * cumsum(fractions)), which keeps label rates equal across splits up to rounding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["split_subjects", "SPLITS"]

SPLITS = ("train", "dev", "test")


def split_subjects(stays: pd.DataFrame, stratify_on: list[str], fractions=(0.7, 0.1, 0.2),
                   seed: int = 1) -> pd.Series:
    """Assign each stay to train/dev/test by its subject.

    Args:
        stays: one row per stay with ``subject_id`` and the label columns.
        stratify_on: label columns whose combination defines the strata.
        fractions: shares of subjects for train, dev and test (sum to 1).
        seed: seed of the permutation.
    Returns:
        A Series aligned with ``stays`` holding "train", "dev" or "test".
    """
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (3,) or (fractions < 0).any() or not np.isclose(fractions.sum(), 1.0):
        raise ValueError("fractions must be three non-negative shares summing to 1")
    subjects = stays.groupby("subject_id")[stratify_on].max() if stratify_on else \
        pd.DataFrame(index=pd.Index(stays["subject_id"].unique(), name="subject_id"))
    strata = subjects.astype(str).agg("|".join, axis=1) if stratify_on else pd.Series("all", subjects.index)
    rng = np.random.default_rng(seed)
    assignment = {}
    for stratum in sorted(strata.unique()):
        members = np.sort(strata.index[strata == stratum].to_numpy())
        members = rng.permutation(members)
        cuts = np.round(np.cumsum(fractions) * members.size).astype(int)
        for name, part in zip(SPLITS, np.split(members, cuts[:-1])):
            assignment.update(dict.fromkeys(part.tolist(), name))
    return stays["subject_id"].map(assignment).rename("split")
