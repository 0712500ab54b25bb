"""How far the bundle's DP evaluation is from the exact AUROC, by test-split size, prevalence, bins and epsilon.

Simulated binormal scores (exact AUROC about 0.8; not the data any default was chosen on, and no pipeline data),
20 test splits per setting: the DP AUROC from noisy score histograms (``models/evaluation/dp_evaluation``) against
the exact AUROC of the unbinned scores, and the width of its interval (test sampling and DP noise; the binning
error is outside the interval). Writes ``bench/results/dp_evaluation.json`` and prints it.

    python bench/dp_evaluation.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms
from privehr.models.privacy.release_plan import GaussianPlan

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    rows = []
    for epsilon in (0.5, 2.0):
        sigma = GaussianPlan.for_epsilon(epsilon, 1e-5).noise_multiplier
        for stays in (400, 4600):  # the demo's test split (2,000 stays), a full MIMIC-III test split
            for prevalence in (0.07, 0.3):  # mort_icu, los_3
                for bins in (10, 30):
                    errors, widths, undefined = [], [], 0
                    for repeat in range(20):
                        rng = np.random.default_rng(repeat)
                        y = (rng.random(stays) < prevalence).astype(int)
                        p = 1 / (1 + np.exp(-rng.normal(-1.5 + 1.2 * y, 1.0)))
                        m = metrics_from_histograms(noisy_histograms(p, y, bins, sigma, rng), resamples=200)
                        if not np.isfinite(m.auroc):
                            undefined += 1
                            continue
                        errors.append(abs(m.auroc - roc_auc_score(y, p)))
                        widths.append(m.intervals["auroc"][1] - m.intervals["auroc"][0])
                    rows.append({"epsilon": epsilon, "noise_multiplier": round(sigma, 3), "test_stays": stays,
                                 "prevalence": prevalence, "bins": bins, "undefined": undefined,
                                 "median_abs_error": round(float(np.median(errors)), 3) if errors else None,
                                 "median_interval_width": round(float(np.median(widths)), 3) if widths else None})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dp_evaluation.json").write_text(json.dumps(rows, indent=1))
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
