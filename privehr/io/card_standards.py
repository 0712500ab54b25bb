"""Where a model card answers the reporting standards a partner's reviewers read it against.

* TRIPOD+AI: Collins, Moons, Dhiman, Riley, Beam, Van Calster, Ghassemi, Liu, Reitsma, van Smeden, Boulesteix et
  al., "TRIPOD+AI statement: updated guidance for reporting clinical prediction models that use regression or
  machine learning methods", BMJ 2024;385:e078378: 27 main items, 52 subitems (:data:`TRIPOD_AI_ITEMS`), numbered
  as in its checklist.
* The CHAI Applied Model Card: Coalition for Health AI, "Applied Model Card" (draft of November 2024, schema v0.1),
  by its sections and their elements.

Neither has fields for a differentially private release, so the map also lists those (the unit, the neighbouring
relation, the accountants, the sampler, epsilon, delta, whether tuning was charged, the audit), each with its value
on this card, and every TRIPOD+AI subitem a model card does not answer, with why (most belong to a study report).
Each of the 52 subitems is either answered (:data:`TRIPOD_AI`) or not (:data:`NOT_COVERED`), never both.

A model card stores the map (``card["reporting"]``, built by :func:`card_reporting`); card.md prints it. ``release
verify`` checks it with :func:`reporting_problems`: every card field it names is on the card and the DP fields
carry the card's own epsilon, delta, relation and tuning. The wording of the tables is not checked, so a bundle
keeps verifying after this module's tables are reworded. A test walks every path on a real card
(``tests/io/test_card_standards.py``). A bundle of synthetic tables has no map: both standards are for prediction
models, and its Privacy section already names the unit, relation, accountants, epsilon and delta. Pure data: no IO.
"""

from __future__ import annotations

__all__ = ["card_reporting", "reporting_problems", "resolve", "TRIPOD_AI", "TRIPOD_AI_ITEMS", "CHAI", "NOT_COVERED",
           "CHECKED_DP_FIELDS"]

#: the 52 subitems of TRIPOD+AI's 27 main items, in the checklist's order
TRIPOD_AI_ITEMS = ("1", "2", "3a", "3b", "3c", "4", "5a", "5b", "6a", "6b", "6c", "7", "8a", "8b", "8c", "9a", "9b",
                   "9c", "10", "11", "12a", "12b", "12c", "12d", "12e", "12f", "12g", "13", "14", "15", "16", "17",
                   "18a", "18b", "18c", "18d", "18e", "18f", "19", "20a", "20b", "20c", "21", "22", "23a", "23b",
                   "24", "25", "26", "27a", "27b", "27c")

#: TRIPOD+AI subitems the card answers, in whole or in part: (item, topic, the card fields that answer it)
TRIPOD_AI = [
    ("1", "Title: a prediction model, its population and outcome", ["title", "summary"]),
    ("3b", "Target population, intended purpose and users", ["cohort.definition", "intended_use"]),
    ("5a", "Data source (MIMIC-Extract ICU stays)", ["cohort.definition"]),
    ("6b", "Eligibility criteria", ["cohort.definition", "cohort.window_hours", "cohort.gap_hours"]),
    ("7", "Data preparation (quarantine, outlier bounds)", ["cohort.definition"]),
    ("8a", "Outcome and its time horizon", ["models.label", "models.label_definition", "cohort.gap_hours"]),
    ("9b", "Predictors: how many, and when measured", ["cohort.variables", "cohort.window_hours"]),
    ("10", "Sample size", ["counts.stays", "counts.source"]),
    ("12a", "How the data were used: train, dev and test splits", ["counts.stays"]),
    ("12c", "Model type, building steps and hyperparameter tuning", ["models.model", "models.loss", "models.plan",
                                                                     "models.tuning"]),
    ("12e", "Performance measures: discrimination and calibration",
     ["models.evaluation.auroc", "models.evaluation.auprc", "models.evaluation.ece",
      "models.evaluation.calibration_slope", "models.evaluation.calibration_intercept",
      "models.evaluation.reliability"]),
    ("12f", "Model updating arising from the evaluation (recalibration)", ["models.evaluation.recalibration"]),
    ("12g", "How predictions are calculated (the model object)", ["models.file"]),
    ("15", "Model output: a risk at the end of the window", ["intended_use"]),
    ("16", "Development versus evaluation data (one source, split)", ["cohort.definition", "counts.stays"]),
    ("21", "Records and outcome events in the evaluation", ["models.evaluation.records",
                                                                 "models.evaluation.prevalence"]),
    ("22", "Model specification for use by others", ["models.file", "models.plan"]),
    ("23a", "Performance with intervals (overall; no subgroups)",
     ["models.evaluation.intervals", "models.evaluation.confidence", "models.evaluation.informative",
      "models.evaluation.needed_records"]),
    ("24", "Model updating: the recalibration released (no performance after it)",
     ["models.evaluation.recalibration"]),
    ("26", "Limitations", ["intended_use", "privacy.not_covered"]),
]

#: TRIPOD+AI subitems the card does not answer: (items, topic, why)
NOT_COVERED = [
    ("2", "Abstract", "the card's summary is not a TRIPOD+AI abstract"),
    ("3a", "Healthcare context, rationale, existing models", "the study report's"),
    ("3c", "Known health inequalities", "not described"),
    ("4", "Objectives", "the study report's"),
    ("5b", "Dates of the data", "the card names no accrual dates"),
    ("6a", "Setting: number and location of centres", "the card names the source, not its centres"),
    ("6c", "Treatments received", "not described"),
    ("8b, 8c, 9c", "Assessors of outcome and predictors, blinding", "not described (labels and predictors are "
                                                                    "derived from the record by MIMIC-Extract)"),
    ("9a", "Choice of initial predictors", "the card gives their number, not why they were chosen"),
    ("11", "Missing data", "the card names no imputation; featurizer.json holds the statistics new stays are "
                           "filled with"),
    ("12b", "Predictor handling (rescaling, standardisation)", "in featurizer.json, not on the card"),
    ("12d, 23b", "Heterogeneity across clusters", "one source; not examined"),
    ("13", "Class imbalance methods", "none is applied, but the card does not say so"),
    ("14", "Fairness", "subgroup results stay in the internal report: exact, not released"),
    ("17", "Ethical approval", "the hospital's study protocol"),
    ("18a, 18b, 18c, 18d, 18e, 18f", "Open science: funding, conflicts, protocol, registration, data, code",
     "the study report's"),
    ("19", "Patient and public involvement", "the study report's"),
    ("20a, 20b, 20c", "Participants' flow, characteristics, development versus evaluation",
     "exact counts and characteristics stay in the hospital"),
    ("25", "Interpretation", "the study report's"),
    ("27a", "Poor quality or unavailable input data in use", "not on the card (privehr predict masks values beyond "
                                                             "the bundled outlier bounds and scores no stay shorter "
                                                             "than the window)"),
    ("27b", "Users' interaction and expertise", "not described"),
    ("27c", "Next steps for research", "the study report's"),
    ("-", "External validation (not an item of its own)", "the evaluation is on a held-out split of the same source"),
]

#: CHAI Applied Model Card sections (and elements) and the card fields that fill them; an empty list: not on the
#: card, with why
CHAI = [
    ("Basic information: model name", ["title"], ""),
    ("Basic information: developer and contact", [], "the hospital's, not in the bundle"),
    ("Release information: stage, date, version, regulatory approval", [], "the manifest names the run; no stage "
                                                                            "or approval"),
    ("Model summary", ["summary"], ""),
    ("Uses and directions: intended use, users, patient population, out-of-scope settings",
     ["intended_use", "cohort.definition"], ""),
    ("Warnings: known risks and limitations, clinical risk level", ["intended_use", "privacy.not_covered"], ""),
    ("Warnings: known biases or ethical considerations", [], "subgroup results are not released"),
    ("Trust ingredients, AI system facts: outcomes and outputs, model type",
     ["models.label", "models.label_definition", "models.model"], ""),
    ("Trust ingredients, AI system facts: input data source and types, development data",
     ["cohort.definition", "cohort.variables", "cohort.window_hours", "counts.stays"], ""),
    ("Trust ingredients, AI system facts: security (here: the DP guarantee)",
     ["privacy.guarantee", "privacy.covers", "privacy.not_covered"], ""),
    ("Trust ingredients, AI system facts: bias mitigation, ongoing maintenance", [], "none applied; each run makes "
                                                                                     "a new bundle"),
    ("Trust ingredients: transparency information (funding, third parties, stakeholders)", [], "the study report's"),
    ("Key metrics: usefulness, usability and efficacy",
     ["models.evaluation.auroc", "models.evaluation.auprc", "models.evaluation.intervals",
      "models.evaluation.records"], ""),
    ("Key metrics: safety and reliability",
     ["models.evaluation.calibration_slope", "models.evaluation.calibration_intercept", "models.evaluation.ece",
      "models.evaluation.reliability"], ""),
    ("Key metrics: fairness and equity", [], "subgroup results are not released (TRIPOD+AI 14)"),
    ("Resources: publications, trials, patient consent", [], "the study report's"),
]

#: the DP fields whose values ``release verify`` checks against the card's own fields
CHECKED_DP_FIELDS = ("neighbouring relation", "epsilon", "delta", "tuning charged to the budget")


def resolve(card: dict, path: str) -> list:
    """The values at a dotted ``path`` of the card (a list field such as ``models`` fans out over its entries); an
    empty list where no entry holds it."""
    values = [card]
    for key in path.split("."):
        values = [item[key] for v in values for item in (v if isinstance(v, list) else [v])
                  if isinstance(item, dict) and key in item]
    return values


def _tuning(card: dict) -> tuple[str, str]:
    methods = {m["tuning"]["method"] for m in card["models"] if isinstance(m.get("tuning"), dict)}
    if "exact" in methods:
        return "no", "hyperparameters searched on exact dev AUROC: not DP, and the guarantee says so"
    if "dp" in methods:
        return "yes", "every search trial (DP-SGD) and its DP dev score (Gaussian) is a release in the total"
    return "no search", "one configuration per model: nothing to charge"


def _dp_fields(card: dict) -> list[dict]:
    privacy = card["privacy"]
    n = privacy.get("neighbours") or {}
    claimed = "epsilon_prv" if privacy.get("epsilon_prv") is not None else "epsilon_rdp"
    if "epsilon" in n:  # replace-one neighbours: the group-privacy total is the claim
        epsilon, delta = (n["epsilon"], ["privacy.neighbours.epsilon"]), (n["delta"], ["privacy.neighbours.delta"])
    else:
        epsilon, delta = (privacy[claimed], [f"privacy.{claimed}"]), (privacy["delta"], ["privacy.delta"])
    tuned, why = _tuning(card)
    return [
        {"field": "unit of privacy", "value": "one ICU stay", "note": "the cohort keeps one stay per patient (each "
         "patient's earliest eligible stay), so one patient", "where": ["privacy.covers"]},
        {"field": "neighbouring relation", "value": n.get("relation", "add/remove one ICU stay"), "note": "",
         "where": ["privacy.neighbours.relation"] if n else ["privacy.guarantee"]},
        {"field": "epsilon", "value": "none" if epsilon[0] is None else epsilon[0],
         "note": "the claim, under the relation above" if epsilon[0] is not None else "no meaningful guarantee under "
         "the relation above: group privacy's delta is 1/n or more", "where": epsilon[1]},
        {"field": "delta", "value": "none" if delta[0] is None else delta[0], "note": "", "where": delta[1]},
        {"field": "accountants", "value": "PRV, RDP, PLD", "note": "each composes the bundle's releases under "
         "add/remove-one neighbours; the claim is PRV's (RDP's where PRV has none)",
         "where": ["privacy.epsilon_prv", "privacy.epsilon_rdp", "privacy.epsilon_pld"]},
        {"field": "sampler", "value": "Poisson", "note": "each DP-SGD step keeps every training stay with the "
         "model's planned probability q; the DP evaluation counts every test stay",
         "where": ["models.plan.sample_rate"]},
        {"field": "tuning charged to the budget", "value": tuned, "note": why, "where": ["models.tuning"]},
        {"field": "membership-inference audit", "value": "not audited in this bundle", "note": "privehr audit "
         "audits a run apart from its bundle (LiRA, one-run); no audit result is released", "where": []},
    ]


def card_reporting(card: dict) -> dict:
    """The card's map to TRIPOD+AI and the CHAI Applied Model Card, its DP fields with their values, and the
    TRIPOD+AI subitems it does not answer (a ``reporting`` key already on the card is ignored)."""
    return {"tripod_ai": [{"item": i, "topic": t, "where": w} for i, t, w in TRIPOD_AI],
            "chai": [{"section": s, "where": w, "why": y} for s, w, y in CHAI],
            "dp_fields": _dp_fields(card),
            "not_covered": [{"item": i, "topic": t, "why": y} for i, t, y in NOT_COVERED]}


def reporting_problems(card: dict) -> list[str]:
    """What ``release verify`` finds wrong with a card's stored map (nothing for a card made before it had one):
    its shape, a card field it names that the card does not hold, and a checked DP field (:data:`CHECKED_DP_FIELDS`)
    whose value is not the one the card's own fields make."""
    reporting = card.get("reporting")
    if reporting is None:
        return []
    sections = ("tripod_ai", "chai", "dp_fields", "not_covered")
    if not (isinstance(reporting, dict) and all(isinstance(reporting.get(s), list) for s in sections)
            and all(isinstance(r, dict) and isinstance(r.get("where", []), list) for s in sections
                    for r in reporting[s])):
        return ["the card's reporting map is not shaped as card_reporting makes one"]
    named = {p for s in ("tripod_ai", "chai", "dp_fields") for r in reporting[s] for p in r.get("where", [])}
    problems = [f"the card's reporting map names {p!r}, a field the card does not hold" for p in sorted(named)
                if not isinstance(p, str) or not resolve(card, p)]
    stated = {r.get("field"): r.get("value") for r in reporting["dp_fields"]}
    derived = {r["field"]: r["value"] for r in _dp_fields(card)}
    problems += [f"the card's reporting map says {field} {stated.get(field)!r}; the card's fields make "
                 f"{derived[field]!r} (the card was rewritten)" for field in CHECKED_DP_FIELDS
                 if stated.get(field) != derived[field]]
    return problems
