import numpy as np
import pandas as pd

from privehr.models.data.patient_split import split_subjects


def _stays(n_subjects=500, seed=0):
    rng = np.random.default_rng(seed)
    subjects = np.repeat(np.arange(n_subjects), rng.integers(1, 4, n_subjects))  # 1-3 stays each
    return pd.DataFrame({"subject_id": subjects, "mort_icu": (rng.random(subjects.size) < 0.08).astype(int),
                         "los_3": (rng.random(subjects.size) < 0.45).astype(int)})


def test_no_subject_crosses_splits_and_fractions_hold():
    stays = _stays()
    split = split_subjects(stays, ["mort_icu", "los_3"], (0.7, 0.1, 0.2), seed=1)
    assert split.notna().all()
    assert (stays.assign(split=split).groupby("subject_id")["split"].nunique() == 1).all()
    shares = stays.assign(split=split).groupby("split")["subject_id"].nunique() / stays["subject_id"].nunique()
    assert abs(shares["train"] - 0.7) < 0.02 and abs(shares["dev"] - 0.1) < 0.02 and abs(shares["test"] - 0.2) < 0.02


def test_stratification_balances_label_rates():
    stays = _stays(2000, seed=1)
    split = split_subjects(stays, ["mort_icu", "los_3"], seed=2)
    subject_mort = stays.groupby("subject_id")["mort_icu"].max()
    rates = subject_mort.groupby(stays.groupby("subject_id").size().index.map(
        dict(zip(stays["subject_id"], split)))).mean()
    assert rates.max() - rates.min() < 0.01


def test_seeded_and_seed_sensitive():
    stays = _stays()
    a = split_subjects(stays, ["mort_icu"], seed=5)
    assert a.equals(split_subjects(stays, ["mort_icu"], seed=5))
    assert not a.equals(split_subjects(stays, ["mort_icu"], seed=6))


def test_the_hash_split_keeps_subjects_whole_and_moves_no_one_when_a_patient_is_added_or_removed():
    from privehr.models.data.patient_split import hash_split

    stays = _stays(4000, seed=3)
    split = hash_split(stays["subject_id"], (0.7, 0.1, 0.2), seed=1)
    assert (stays.assign(split=split).groupby("subject_id")["split"].nunique() == 1).all()
    shares = split.groupby(stays["subject_id"]).first().value_counts(normalize=True)
    assert abs(shares["train"] - 0.7) < 0.03 and abs(shares["dev"] - 0.1) < 0.02 and abs(shares["test"] - 0.2) < 0.03
    # the attack on a stratified split: one patient more reshuffles its stratum and moves hundreds of others
    newcomer = pd.DataFrame({"subject_id": [10**6], "mort_icu": [1], "los_3": [1]})
    bigger = pd.concat([stays, newcomer], ignore_index=True)
    assert hash_split(bigger["subject_id"], (0.7, 0.1, 0.2), seed=1)[:len(stays)].equals(split)
    assert hash_split(stays["subject_id"][stays["subject_id"] != 7], (0.7, 0.1, 0.2), seed=1).equals(
        split[stays["subject_id"] != 7])
    stratified = split_subjects(stays, ["mort_icu", "los_3"], seed=1)
    moved = (split_subjects(bigger, ["mort_icu", "los_3"], seed=1)[:len(stays)] != stratified).sum()
    assert moved > 20  # (353 of 8,599 stays in the review that found it)
    assert not split.equals(hash_split(stays["subject_id"], (0.7, 0.1, 0.2), seed=2))
