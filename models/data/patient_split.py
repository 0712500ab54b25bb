"""Patient-level train/dev/test splits: by each subject's own hash, or label-stratified.

Subjects (not stays) are assigned: every stay of a subject lands in the same split, so no patient
is seen in training and evaluated in test. Two rules:

* :func:`hash_split` (the default): a subject's split is a function of its id and the public seed alone,
  u = SHA-256("privehr-split-v1", seed, id) / 2^256 cut at the cumulative fractions. Adding or removing one
  patient moves no other patient between splits, so a neighbouring dataset gives neighbouring train, dev and
  test splits: what a DP release of any split (a model, its counts, its evaluation) assumes. Label rates then
  differ between splits by sampling alone.
* :func:`split_subjects` (``split.method: stratified``): subjects grouped into strata by the combination of
  their labels (max over their stays); within each stratum a seeded permutation is cut at
  round(n * cumsum(fractions)), which keeps label rates equal across splits up to rounding; but one patient
  more in a stratum reshuffles its permutation and moves hundreds of others (a release bundle made so is not
  DP end to end).

>>> ids = pd.Series(range(1000))
>>> before = hash_split(ids, (0.7, 0.1, 0.2), seed=1)
>>> after = hash_split(pd.Series(range(1001)), (0.7, 0.1, 0.2), seed=1)
>>> bool(after[:1000].equals(before)), before.value_counts().to_dict()["train"]
(True, 704)
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

__all__ = ["split_subjects", "hash_split", "SPLITS"]

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


def hash_split(subject_ids: pd.Series, fractions=(0.7, 0.1, 0.2), seed: int = 1) -> pd.Series:
    """Assign each row to train/dev/test by the hash of its subject id and ``seed`` (see the module docstring).

    Args:
        subject_ids: the subject of each row (a stay); every stay of a subject gets the same split.
        fractions: expected shares of subjects for train, dev and test (sum to 1).
        seed: public; part of the hash.
    Returns:
        A Series aligned with ``subject_ids`` holding "train", "dev" or "test".
    """
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (3,) or (fractions < 0).any() or not np.isclose(fractions.sum(), 1.0):
        raise ValueError("fractions must be three non-negative shares summing to 1")
    cuts = np.cumsum(fractions)[:-1]
    unique = pd.unique(subject_ids)
    u = np.array([int.from_bytes(hashlib.sha256(f"privehr-split-v1\n{seed}\n{s}".encode()).digest()[:8], "big")
                  for s in unique]) / 2.0 ** 64
    names = np.array(SPLITS)[np.searchsorted(cuts, u, side="right")]
    return subject_ids.map(dict(zip(unique.tolist(), names.tolist()))).rename("split")
