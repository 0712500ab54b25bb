"""The model card prints a DP metric as a number only when its interval is informative (issue 41, item 1)."""

import numpy as np

from privehr.io.release_bundle import render_card
from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms


def _card(evaluation: dict) -> dict:
    return {"title": "t", "summary": "s",
            "privacy": {"guarantee": "DP", "releases": 3, "delta": 1e-5, "epsilon_prv": 1.0, "epsilon_rdp": 1.1,
                        "epsilon_pld": 0.9, "covers": [], "not_covered": []},
            "cohort": {"window_hours": 24, "variables": 104, "definition": "d"},
            "counts": {"source": "dp", "stays": {"test": 400}},
            "models": [{"cell_id": "mort_icu-grud-dp_sgd-bce-eps1", "label": "mort_icu", "label_definition": "x",
                        "model": "grud", "plan": {"noise_multiplier": 1.0, "sample_rate": 0.05, "steps": 100,
                                                  "max_grad_norm": 1.0, "epsilon": 1.0},
                        "evaluation": evaluation}],
            "intended_use": []}


def _evaluation(n, sigma, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(int)
    p = 1 / (1 + np.exp(-rng.normal(-2 + 1.5 * y, 1.0)))
    m = metrics_from_histograms(noisy_histograms(p, y, 30, sigma, np.random.default_rng(seed + 1)), resamples=300)
    return m.as_dict() | {"epsilon": 0.5}


def test_an_uninformative_metric_is_said_to_be_so_and_never_printed_as_a_result():
    noisy = _evaluation(300, 5.0, 1)
    assert noisy["informative"]["auroc"] is False
    text = render_card(_card(noisy))
    assert "AUROC not informative (interval [" in text and "test stays would narrow it to 0.2" in text
    assert f"AUROC {noisy['auroc']:.3f} [" not in text  # the noisy point estimate is not presented as a result
    assert "at epsilon 0.500" in text and "they are not results" in text


def test_an_informative_metric_is_printed_with_its_interval():
    clear = _evaluation(20000, 1.0, 3)
    assert clear["informative"]["auroc"] is True
    low, high = clear["intervals"]["auroc"]
    text = render_card(_card(clear))
    assert f"AUROC {clear['auroc']:.3f} [{low:.3f}, {high:.3f}]" in text and "AUROC not informative" not in text


def test_the_card_prints_calibration_slope_and_intercept_or_why_not():
    clear = _evaluation(200000, 0.5, 3)
    assert clear["informative"]["calibration_slope"]
    low, high = clear["intervals"]["calibration_slope"]
    text = render_card(_card(clear))
    assert f"calibration slope {clear['calibration_slope']:.3f} [{low:.3f}, {high:.3f}]" in text
    assert "calibration intercept " in text
    noisy = render_card(_card(_evaluation(300, 5.0, 1)))
    assert "calibration slope not informative (interval [" in noisy
    # a card made before calibration was released prints what it holds, and no calibration
    old = {k: v for k, v in clear.items() if not k.startswith("calibration")}
    old["intervals"] = {k: v for k, v in clear["intervals"].items() if not k.startswith("calibration")}
    assert "calibration" not in render_card(_card(old))


def test_a_calibration_the_noisy_counts_leave_undefined_is_said_so_also_from_card_json():
    import json

    from privehr.core.strict_json import strict_dumps
    from privehr.models.evaluation.dp_evaluation import NoisyHistograms, score_edges

    one = np.zeros(30)
    one[10] = 1.0  # every test stay in one score bin: no calibration slope
    m = metrics_from_histograms(NoisyHistograms(score_edges(30), 50_000 * one, 30_000 * one, 1e-9), resamples=50)
    evaluation = json.loads(strict_dumps(m.as_dict() | {"epsilon": 0.5}))  # as card.json holds it: null, not NaN
    assert evaluation["calibration_slope"] is None
    line = next(t for t in render_card(_card(evaluation)).splitlines() if t.startswith("- DP evaluation"))
    assert "calibration slope not informative (undefined on these noisy counts" in line
    assert "n/a" not in line.split("calibration slope")[1].split(", calibration intercept")[0]
    assert f"calibration intercept {evaluation['calibration_intercept']:.3f} [" in line  # in the large: defined


def test_an_undefined_metric_says_how_many_test_stays_it_needs_and_how_that_was_made():
    import json

    from privehr.core.strict_json import strict_dumps
    from privehr.models.evaluation.dp_evaluation import NoisyHistograms, score_edges

    rng = np.random.default_rng(34)
    thin = NoisyHistograms(score_edges(30), 20 + rng.normal(0, 7.7, 30), rng.normal(0, 7.7, 30) - 30, 7.7)
    m = metrics_from_histograms(thin, resamples=100, records=600)
    evaluation = json.loads(strict_dumps(m.as_dict() | {"epsilon": 0.5}))
    line = next(t for t in render_card(_card(evaluation)).splitlines() if t.startswith("- DP evaluation"))
    needed = evaluation["needed_records"]["auroc"]
    assert (f"AUROC not informative (undefined on these noisy counts: a class or score range too thin; at least about "
            f"{needed:,} test stays would be needed") in line
    for name in ("AUPRC", "calibration slope", "calibration intercept"):
        assert line.split(f"{name} not informative (")[1].split(")")[0].count("test stays would be needed") == 1, name
