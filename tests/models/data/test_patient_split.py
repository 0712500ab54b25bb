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
