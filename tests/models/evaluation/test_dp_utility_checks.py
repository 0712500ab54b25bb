import numpy as np
import pandas as pd

from privehr.models.evaluation.dp_utility_checks import check_dp_sgd_curves


def _runs(dp: dict[float, list[float]], baseline: list[float], baseline_l2: list[float] | None = None):
    rows = [dict(label="mort_icu", model="grud", method="dp_sgd", loss="bce", target_epsilon=e, seed=s, auroc=a)
            for e, values in dp.items() for s, a in enumerate(values)]
    rows += [dict(label="mort_icu", model="grud", method="non_private", loss="bce", target_epsilon=np.nan, seed=s,
                  auroc=a) for s, a in enumerate(baseline)]
    rows += [dict(label="mort_icu", model="grud", method="non_private", loss="l2", target_epsilon=np.nan, seed=s,
                  auroc=a) for s, a in enumerate(baseline_l2 or [])]
    return pd.DataFrame(rows)


def test_a_rising_curve_below_the_baseline_passes():
    (check,) = check_dp_sgd_curves(_runs({0.1: [0.60, 0.70, 0.65], 1.0: [0.78, 0.80, 0.74],
                                          10.0: [0.79, 0.76, 0.83]}, [0.86, 0.85, 0.87]))
    assert check["below_baseline"] and check["no_decrease_beyond_seed_noise"]
    assert check["auroc_medians"] == [0.65, 0.78, 0.79] and check["non_private_baseline"] == 0.86


def test_overlapping_seeds_are_noise_separated_seeds_are_a_decrease():
    noise = check_dp_sgd_curves(_runs({1.0: [0.80, 0.78, 0.74], 3.5: [0.75, 0.77, 0.76]}, [0.9]))[0]
    assert noise["no_decrease_beyond_seed_noise"]  # 0.77 at 3.5 lies inside 1.0's seeds
    drop = check_dp_sgd_curves(_runs({1.0: [0.80, 0.78, 0.79], 3.5: [0.75, 0.77, 0.76], 10.0: [0.81, 0.8, 0.82]},
                                     [0.9]))[0]
    assert not drop["no_decrease_beyond_seed_noise"]
    assert [(d["from"], d["to"]) for d in drop["decreases"]] == [(1.0, 3.5)]


def test_dp_at_or_above_the_baseline_is_flagged_and_the_baseline_is_the_best_loss():
    (check,) = check_dp_sgd_curves(_runs({0.1: [0.7], 10.0: [0.85]}, [0.84], baseline_l2=[0.86]))
    assert check["non_private_baseline"] == 0.86 and check["below_baseline"]
    (check,) = check_dp_sgd_curves(_runs({0.1: [0.7], 10.0: [0.86]}, [0.84], baseline_l2=[0.86]))
    assert not check["below_baseline"] and check["at_or_above_baseline"] == [10.0]
    (check,) = check_dp_sgd_curves(_runs({0.1: [0.7]}, []))
    assert check["non_private_baseline"] is None and not check["below_baseline"]


def test_a_diverged_seed_fails_both_checks_and_stays_valid_json():
    import json

    (check,) = check_dp_sgd_curves(_runs({0.1: [0.6, 0.62, 0.61], 10.0: [0.8, np.nan, 0.82]}, [0.9]))
    assert check["not_finite"] == [10.0]
    assert not check["below_baseline"] and not check["no_decrease_beyond_seed_noise"]
    json.loads(json.dumps(check, allow_nan=False))
    (check,) = check_dp_sgd_curves(_runs({0.1: [np.nan], 10.0: [np.nan]}, [np.nan]))
    assert check["auroc_medians"] == [None, None] and check["non_private_baseline"] is None


def test_with_bootstrap_replicates_a_flag_needs_the_interval_too():
    rng = np.random.default_rng(0)
    runs = _runs({1.0: [0.80, 0.78, 0.79], 3.5: [0.75, 0.77, 0.76]}, [0.9], baseline_l2=[0.76])
    inf = float("inf")
    base = ("mort_icu", "grud", "non_private", "bce", inf)
    wide = {("mort_icu", "grud", "dp_sgd", "bce", 1.0): 0.79 + rng.normal(0, 0.05, 1000),
            ("mort_icu", "grud", "dp_sgd", "bce", 3.5): 0.76 + rng.normal(0, 0.05, 1000), base: 0.9 + rng.normal(0, 0.05, 1000)}
    (check,) = check_dp_sgd_curves(runs, wide)
    assert check["intervals"] and check["decreases"] == [] and check["no_decrease_beyond_seed_noise"]
    shared = rng.normal(0, 0.05, 1000)  # the same resamples move every cell together: a narrow difference
    narrow = {k: v.mean() + shared + rng.normal(0, 0.002, 1000) for k, v in wide.items()}
    (check,) = check_dp_sgd_curves(runs, narrow)
    assert [(d["from"], d["to"]) for d in check["decreases"]] == [(1.0, 3.5)]
    lo, hi = check["decreases"][0]["difference_interval"]
    assert lo < -0.03 < hi < 0
    # a DP median above the baseline within the intervals is listed, not flagged
    above = _runs({1.0: [0.91]}, [0.9])
    (check,) = check_dp_sgd_curves(above, {("mort_icu", "grud", "dp_sgd", "bce", 1.0): 0.91 + rng.normal(0, .03, 999),
                                           base: 0.9 + rng.normal(0, .03, 999)})
    assert not check["below_baseline"] and check["at_or_above_baseline"] == [] and \
        check["above_baseline_within_intervals"] == [1.0]
