"""Where a model card answers the reporting standards a partner's reviewers read it against.

* TRIPOD+AI: Collins, Moons, Dhiman, Riley, Beam, Van Calster, Ghassemi, Liu, Reitsma, van Smeden, Boulesteix et
  al., "TRIPOD+AI statement: updated guidance for reporting clinical prediction models that use regression or
  machine learning methods", BMJ 2024;385:e078378 (27 items; numbered as in its checklist).
* The CHAI Applied Model Card: Coalition for Health AI, "Applied Model Card" (2024 draft), by its sections.

Neither has fields for a differentially private release, so the map also lists those (unit, neighbouring relation,
accountants, sampler, epsilon, delta, whether tuning was charged, audit), each with its value on this card, and the
TRIPOD+AI items a model card cannot answer (they belong to a study report).

The map is derived from the card's own fields (:func:`card_reporting`): a card stores it, ``release verify``
derives it again and refuses a card whose map is not the one its fields make, and a test walks every path it
names (``tests/io/test_card_standards.py``), so the map cannot drift from the card. Pure data: no IO.
"""

from __future__ import annotations

__all__ = ["card_reporting", "TRIPOD_AI", "CHAI", "NOT_COVERED", "resolve"]

#: TRIPOD+AI items a model card answers: (item, topic, the card's fields that answer it)
TRIPOD_AI = [
    ("1", "Title: a prediction model, its population, outcome and approach", ["title", "summary"]),
    ("3b", "Target population and where in the care pathway", ["cohort.definition", "intended_use"]),
    ("5a", "Data sources", ["cohort.definition"]),
    ("6b", "Eligibility criteria", ["cohort.definition", "cohort.window_hours", "cohort.gap_hours"]),
    ("7", "Data preparation (cleaning, outliers)", ["cohort.definition"]),
    ("8a", "Outcome and how it is assessed", ["models.label", "models.label_definition"]),
    ("9a", "Predictors and when they are measured", ["cohort.variables", "cohort.window_hours"]),
    ("10", "Sample size", ["counts.stays", "counts.source"]),
    ("12c", "Model type, building steps and hyperparameter tuning", ["models.model", "models.loss", "models.plan",
                                                                     "models.tuning"]),
    ("12e", "Performance measures and their uncertainty", ["models.evaluation.auroc", "models.evaluation.auprc",
                                                           "models.evaluation.intervals",
                                                           "models.evaluation.confidence"]),
    ("12f", "Calibration", ["models.evaluation.calibration_slope", "models.evaluation.calibration_intercept",
                            "models.evaluation.ece", "models.evaluation.reliability"]),
    ("15", "Model output (a risk) and how it is used", ["intended_use"]),
    ("16", "Training versus evaluation data", ["counts.stays", "privacy.covers"]),
    ("22", "Model specification (full model, for use by others)", ["models.file", "models.plan"]),
    ("23a", "Model performance with intervals", ["models.evaluation.intervals", "models.evaluation.informative",
                                                 "models.evaluation.needed_records"]),
    ("26", "Limitations", ["intended_use", "privacy.not_covered"]),
    ("27a", "Usability: intended use and users", ["intended_use"]),
]

#: TRIPOD+AI items a model card does not answer (a study report must): (item, topic, why)
NOT_COVERED = [
    ("3c", "Health inequalities", "subgroup results stay in the internal report: exact, not released"),
    ("5b", "Dates of the data", "the card names no accrual dates"),
    ("13", "Class imbalance handling", "not applied; the prevalence is on the card"),
    ("14", "Fairness: subgroup performance", "the internal report holds subgroup AUROCs; they are not released"),
    ("17", "Ethical approval", "the hospital's study protocol"),
    ("18", "Open science: funding, protocol, registration, data and code sharing", "the study report"),
    ("19", "Patient and public involvement", "the study report"),
    ("20", "Participants' flow and characteristics", "exact counts stay in the hospital"),
    ("24", "Model updating", "each nightly run makes a new bundle; no updating within one"),
    ("-", "External validation (not a TRIPOD+AI item of its own)", "the card's evaluation is on a held-out split of "
                                                                   "the same source"),
]

#: CHAI Applied Model Card sections and the card's fields that fill them
CHAI = [
    ("Release and developer", ["title", "privacy.guarantee"]),
    ("Summary", ["summary"]),
    ("Uses and directions", ["intended_use", "cohort.definition"]),
    ("Warnings", ["intended_use", "privacy.not_covered"]),
    ("Trust ingredients: AI system facts", ["models.model", "models.plan", "cohort.variables",
                                            "cohort.window_hours"]),
    ("Trust ingredients: transparency information", ["privacy.covers", "privacy.not_covered", "counts.source"]),
    ("Key metrics: usefulness, usability and efficacy", ["models.evaluation.auroc", "models.evaluation.auprc",
                                                         "models.evaluation.intervals"]),
    ("Key metrics: safety and reliability", ["models.evaluation.calibration_slope", "models.evaluation.ece",
                                             "models.evaluation.reliability"]),
    ("Key metrics: fairness and equity", []),  # not released: see TRIPOD+AI item 14
]


def resolve(card: dict, path: str) -> list:
    """The values at a dotted ``path`` of the card (a list field such as ``models`` fans out over its entries)."""
    values = [card]
    for key in path.split("."):
        nxt = []
        for v in values:
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, dict) and key in item:
                    nxt.append(item[key])
        values = nxt
    return values


def _dp_fields(card: dict) -> list[dict]:
    privacy = card["privacy"]
    neighbours = privacy.get("neighbours") or {"relation": "add/remove one record"}
    tuning = sorted({m["tuning"]["method"] for m in card["models"] if isinstance(m.get("tuning"), dict)})
    return [
        {"field": "unit of privacy", "value": "one ICU stay (a record); a patient with k stays: group privacy of k",
         "where": "privacy.covers"},
        {"field": "neighbouring relation", "value": neighbours["relation"], "where": "privacy.neighbours"},
        {"field": "accountants", "value": "PRV (the claim), RDP (the budget's filter) and PLD, composed over the "
                                          "bundle's releases", "where": "privacy.epsilon_prv"},
        {"field": "sampler", "value": "Poisson sampling at each model's planned rate q (models.plan.sample_rate); "
                                      "the evaluation's Gaussian histograms use every test record",
         "where": "models.plan.sample_rate"},
        {"field": "epsilon", "value": privacy["epsilon_prv"], "where": "privacy.epsilon_prv"},
        {"field": "delta", "value": privacy["delta"], "where": "privacy.delta"},
        {"field": "tuning charged to the budget", "value": "no search (one configuration)" if tuning == ["none"]
         else "yes: DP dev scores, in the total" if "dp" in tuning else "searched on exact dev scores: not charged",
         "where": "models.tuning"},
        {"field": "membership-inference audit", "value": "not audited in this bundle (`privehr audit` runs one on "
                                                         "the run; its result is not released)", "where": None},
    ]


def card_reporting(card: dict) -> dict:
    """The card's map to TRIPOD+AI and the CHAI Applied Model Card, its DP fields with their values, and the
    TRIPOD+AI items it does not answer (a card without a ``reporting`` key: its stored map is ignored here)."""
    return {"tripod_ai": [{"item": i, "topic": t, "where": w} for i, t, w in TRIPOD_AI],
            "chai": [{"section": s, "where": w} for s, w in CHAI],
            "dp_fields": _dp_fields(card),
            "not_covered": [{"item": i, "topic": t, "why": y} for i, t, y in NOT_COVERED]}
