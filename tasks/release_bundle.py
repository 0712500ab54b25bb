"""The release bundle: what may leave the hospital, and nothing else (``artifacts/<run-id>/release/``).

Every number in it is public (the code, the configuration's public settings, MIMIC-Extract's published statistics,
the spec's bounds) or the output of a DP mechanism that a budget check reserved and the ledger recorded:

* the bundled models (``release.include``, seed 0): weights trained by DP-SGD (a DP-trained ExpM flow's mean), by plans
  built from the DP record counts;
* ``counts.json``: those counts (geometric mechanism), or the exact ones where the run declared them public;
* ``featurizer.json``: the per-variable statistics (public, or a Gaussian mechanism on clipped values);
* ``evaluation.json``: per model, noisy per-class histograms of its test scores (a Gaussian mechanism, recorded here
  before anything is written) and the AUROC, AUPRC, prevalence and calibration computed from them alone;
* ``card.json`` / ``card.md``: the model card, post-processing of the above, rendered from the manifest's copy;
* ``manifest.json``: each file's sha256 and releases, those releases' ledger entries (a model's binds its file's
  sha256), their total by PRV, RDP and PLD, and the card;
* ``signature.json``: the hospital's Ed25519 signature of the manifest (:mod:`privehr.io.bundle_signature`).

A bundled model file is the run's model file byte for byte: the file whose sha256 its release bound in the ledger.

The rest of the run directory (exact metrics, cohort and split counts, the report) stays inside the hospital.
Ponomareva et al. 2023 ("How to DP-fy ML", JAIR) is the checklist: preprocessing, tuning and evaluation on private
data are part of the released procedure. A bundled model whose hyperparameters a search chose by DP dev scores
(``training.tuning: dp``) cites its cell's every search trial and search score beside its own release, so the
bundle's total composes the whole tuning procedure; one chosen by exact dev AUROC (``tuning: exact``) makes the
bundle NOT DP end to end.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime, timezone
from importlib.metadata import version

import numpy as np
import torch
from prefect import task

from privehr.core.config import PipelineConfig
from privehr.core.records import FitRow
from privehr.core.run_layout import RunLayout
from privehr.core.specs import load_mimic_spec
from privehr.core.strict_json import strict_dumps
from privehr.io.bundle_signature import fingerprint, hospital_key, signing_key_path
from privehr.io.ledger import read_ledger, record_release
from privehr.io.release_bundle import (BUNDLE_FILES, bundle_neighbours, bundle_total, dp_claim, public_entry,
                                       write_manifest)
from privehr.models.data.hourly_profile import outlier_bounds
from privehr.io.card_standards import card_reporting
from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms
from privehr.models.methods import create_method
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import Reserved
from privehr.tasks.features import load_split
from privehr.tasks.release_budget import evaluation_key
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger

__all__ = ["write_release_bundle", "signing_key", "LABEL_DEFINITIONS"]

LABEL_DEFINITIONS = {"mort_icu": "death in the ICU", "mort_hosp": "death in hospital",
                     "los_3": "ICU stay longer than 3 days", "los_7": "ICU stay longer than 7 days"}


def _featurizer(run: RunLayout, config: PipelineConfig) -> tuple[dict, list[str]]:
    """The bundle's featurizer: statistics, the window and the outlier bounds a new stay is masked by."""
    fitted = json.loads(run.featurizer.read_text())
    variables = fitted["variables"]
    masked = config.validation.enabled
    spec = str(config.validation.spec) if config.validation.spec else None
    low, high = outlier_bounds(variables, load_mimic_spec(spec).bounds()) if masked else (None, None)
    bundle = {"variables": variables, "mean": fitted["mean"], "std": fitted["std"], "delta_fill": fitted["delta_fill"],
              "source": fitted["source"], "window_hours": config.data.window_hours,
              "gap_hours": config.data.gap_hours, "mask_beyond_outlier_bounds": masked,
              "outlier_low": None if low is None else [None if np.isnan(v) else float(v) for v in low],
              "outlier_high": None if high is None else [None if np.isnan(v) else float(v) for v in high],
              "note": fitted["note"]}
    return bundle, [fitted["release"]] if fitted.get("release") else []


def _evaluate(run: RunLayout, row: FitRow, test: dict, config: PipelineConfig, reserved: Reserved | None,
              test_count: float | None) -> dict:
    """The model's DP evaluation on the test split: recorded in the ledger before it is written anywhere, and kept
    (``dp_evaluations/``) for a resumed run whose model did not change. ``test_count``: the test split's released
    record count (counts.json's), the size its intervals and needed counts are read at."""
    saved = run.dp_evaluation(row.cell_id, row.seed)
    if reserved is None:  # the budget check reserved none: an earlier attempt evaluated this very model
        evaluation = json.loads(saved.read_text())
        if evaluation["model_release"] != row.release:
            raise RuntimeError(f"{row.cell_id}: the saved DP evaluation is of another model release")
        return evaluation
    column = list(test["label_names"]).index(row.label)
    y = test["labels"][:, column].astype(int)
    probabilities = np.load(run.predictions(row.cell_id, row.seed))
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, row.cell_id, "DP evaluation")
    histograms = noisy_histograms(probabilities, y, config.release.evaluation_bins, reserved.plan.noise_multiplier,
                                  noise.numpy_generator("evaluation"))
    entry = reserved.plan.ledger_entry(noise.guarantee, "DP evaluation")
    release = record_release(config.privacy.ledger_path, reserved.reservation, entry).release
    metrics = metrics_from_histograms(histograms, config.evaluation.confidence, config.release.interval_resamples,
                                      records=test_count)
    # the evaluation's own epsilon beside its metrics: what the card's "not informative at epsilon ..." cites
    evaluation = {"release": release, "model_release": row.release, "histograms": histograms.as_dict(),
                  "metrics": metrics.as_dict() | {"epsilon": reserved.plan.epsilon}, "plan": reserved.plan.record()}
    saved.parent.mkdir(exist_ok=True)
    saved.write_text(strict_dumps(evaluation, indent=1))
    return evaluation


def signing_key(ledger_path):
    """The hospital's signing key (beside the ledger); its fingerprint logged when this call created it."""
    key, created = hospital_key(ledger_path)
    if created:
        run_logger().info("created the hospital's signing key %s (owner-only; keep it out of backups others read); "
                          "its fingerprint, which partners pin with `privehr release verify --key-fingerprint`: %s",
                          signing_key_path(ledger_path), fingerprint(key.public_key()))
    return key


def _bundle_model(run: RunLayout, row: FitRow, out, entries: dict) -> dict:
    """Copy the fit's model file into the bundle byte for byte, once its sha256 is the one its release bound in the
    ledger; return what it holds (weights only: never unpickled)."""
    data = run.model(row.cell_id, row.seed).read_bytes()
    bound = entries[row.release].sha256 if row.release in entries else None
    if bound != hashlib.sha256(data).hexdigest():
        raise RuntimeError(f"{row.cell_id}: the run's model file is not the one its release {row.release} bound in "
                           "the ledger" + (" (it predates file binding: run it again)" if bound is None else ""))
    out.write_bytes(data)
    return torch.load(out, weights_only=True)


def _search_releases(run: RunLayout, row: FitRow) -> tuple[list[str], int]:
    """The ledger releases of the DP search that chose ``row``'s hyperparameters (every trial, then every trial's
    DP dev score) and the number of trials, from ``search/<cell>.json``."""
    search = json.loads(run.search(row.cell_id).read_text())
    trials = search["trials"]
    releases = [t.get("release") for t in trials] + [t.get("score_release") for t in trials]
    if search.get("tuning") != "dp" or not trials or not all(releases):
        raise RuntimeError(f"{row.cell_id}: its search record does not name a DP search's trial and score releases")
    return releases, len(trials)


def _guarantee(total: dict, featurizer: str, counts: dict, split: str,
               exact_tuning: bool = False) -> tuple[str, list[str]]:
    reasons = []
    if split == "stratified":
        reasons.append("the split is label-stratified (split.method: stratified): one patient more or less moves "
                       "others between train, dev and test")
    if exact_tuning:
        reasons.append("the hyperparameters were chosen by the exact AUROC of private dev data among several "
                       "(training.tuning: exact)")
    if not total["dp"]:
        reasons += [f"{n} release(s) {label}" for label, n in total["not_dp"].items()]
    if featurizer == "exact":
        reasons.append("the featurizer's statistics are exact statistics of the training stays "
                       "(release.featurizer: exact)")
    neighbours = bundle_neighbours("ICU stay", counts, total)
    if neighbours.get("meaningful") is False:  # never "DP" beside a delta of 1/n or more
        reasons.append(neighbours["why"])
    if reasons:
        return "NOT DP end to end: " + "; ".join(reasons), reasons
    declared = " (the record counts declared public: release.record_count)" if counts["source"] == "public" else ""
    claim = dp_claim(total, neighbours)
    return f"DP end to end: {claim} over everything in this bundle{declared}", reasons


def _card(config: PipelineConfig, models: list[dict], counts: dict, featurizer: dict, total: dict,
          guarantee: str) -> dict:
    data = config.data
    covers = ["the models' weights (DP-SGD), their plans (built from the released record counts), the featurizer's "
              f"statistics ({featurizer['source']}), the record counts ({counts['source']}) and every evaluation "
              "number in this bundle (noisy score histograms)",
              "the unit is one ICU stay (a record), and the cohort keeps one stay per patient (each patient's earliest "
              "eligible stay): one patient"]
    not_covered = ["the run's internal report, exact metrics, cohort and split counts: they stay in the hospital",
                   "other releases from the same dataset (other grid cells, earlier runs): the hospital's privacy "
                   "ledger composes them all",
                   "the choice of cohort rules, variables, window and settings, which are public by assumption"]
    tuned = [m for m in models if m["tuning"]["method"] == "dp"]
    if tuned:
        covers.append(
            "the choice of hyperparameters of " + ", ".join(m["cell_id"] for m in tuned) + ": chosen among "
            + ", ".join(sorted({str(m["tuning"]["trials"]) for m in tuned})) + " configurations trained by DP-SGD on "
            "the train split, by DP dev scores (the AUROC of noisy per-class dev score histograms, epsilon "
            f"{config.training.search_score_epsilon:g} each; training.tuning: dp); every trial and every score is "
            "a release of this bundle, in its total")
    if config.training.search_budget > 1 and config.training.tuning == "exact":
        not_covered.append("hyperparameters were searched on private dev data by exact dev AUROC "
                           "(training.search_budget > 1, training.tuning: exact)")
    card = {"title": ", ".join(m["cell_id"] for m in models), "privacy": {
                "guarantee": guarantee, "releases": total["releases"], "delta": total["delta"],
                "epsilon_prv": total["epsilon_prv"], "epsilon_rdp": total["epsilon_rdp"],
                "epsilon_pld": total["epsilon_pld"], "neighbours": bundle_neighbours("ICU stay", counts, total),
                "covers": covers, "not_covered": not_covered},
            "summary": (f"{len(models)} model(s) predicting from the first {data.window_hours} hours of an ICU stay, "
                        "trained with differential privacy by privehr; every number in this bundle is public or "
                        "differentially private."),
            "cohort": {"window_hours": data.window_hours, "gap_hours": data.gap_hours,
                       "variables": len(featurizer["variables"]),
                       "definition": f"MIMIC-Extract ICU stays lasting more than {data.window_hours + data.gap_hours}"
                                     f" hours (a {data.gap_hours}-hour gap after the window), with their outcome "
                                     "labels" + ("; stays the validation quarantined were left out and hourly values "
                                                 "beyond the spec's outlier bounds treated as missing"
                                                 if config.validation.enabled else "")},
            "counts": counts, "models": models,
            "intended_use": ["research and model development on MIMIC-III-like ICU data in the MIMIC-Extract format; "
                             "not validated for clinical decisions about individual patients",
                             "scores are risks at the end of the window for the cohort above; stays outside it "
                             "(shorter, other units, other hospitals) are out of distribution",
                             "the DP evaluation's intervals include the DP noise; the internal exact evaluation "
                             "stays with the hospital that trained the model"]}
    card["reporting"] = card_reporting(card)  # TRIPOD+AI, CHAI and the DP fields they lack; verify checks it
    return card


@task(name="release-bundle")
def write_release_bundle(run_dir: str, rows: list[dict], config: PipelineConfig,
                         reserved: dict[str, Reserved]) -> dict | None:
    """Write ``release/`` for the seed-0 fits of the cells ``release.include`` matches; return its manifest's
    summary, or None when no fit matched. The DP evaluations are recorded in the ledger before anything is written."""
    run = RunLayout(run_dir)
    bundled = [FitRow.model_validate(r) for r in rows if r["seed"] == 0]
    bundled = [r for r in bundled if config.release.bundles(r.cell_id)]
    if not bundled:
        run_logger().info("release bundle: no fit matched release.include %s; no bundle written",
                          config.release.include)
        return None
    test = load_split(str(run.intermediate), "test")
    recorded = read_summary(run_dir, "record_counts")  # released (DP, or public by the spec) before any fit
    evaluations = {r.cell_id: _evaluate(run, r, test, config, reserved.get(evaluation_key(r.cell)),
                                        recorded.stays.get("test")) for r in bundled}
    out = run.release_bundle
    if out.exists():
        shutil.rmtree(out)  # a resumed run writes its bundle again, from its new evaluations
    (out / "models").mkdir(parents=True)
    featurizer, featurizer_releases = _featurizer(run, config)
    counts = {"source": recorded.source, "stays": recorded.stays, "epsilon": recorded.epsilon}
    sources = {"featurizer.json": {"source": featurizer["source"], "releases": featurizer_releases},
               "counts.json": {"source": counts["source"], "releases": [recorded.release] if recorded.release else []}}
    models, cited = [], set(featurizer_releases) | set(sources["counts.json"]["releases"])
    in_ledger = read_ledger(config.privacy.ledger_path)
    ledger = {e.release: e for e in in_ledger}
    for row in bundled:
        path = f"models/{row.cell_id}.pt"
        model_file = _bundle_model(run, row, out / path, ledger)
        evaluation = evaluations[row.cell_id]
        searched, trials = [], 0
        if create_method(row.method, config.training, config.privacy).scores_search_privately():
            searched, trials = _search_releases(run, row)  # the tuning is part of the model's release
        tuning = {"method": "dp" if searched else ("exact" if config.training.search_budget > 1 else "none"),
                  "trials": trials if searched else config.training.search_budget}
        sources[path] = {"source": "dp" if row.guarantee == "DP" else row.guarantee,
                         "releases": [row.release, *searched]}
        cited |= {row.release, evaluation["release"], *searched}
        plan = {k: getattr(row, k) for k in ("noise_multiplier", "sample_rate", "steps")}
        plan |= {"max_grad_norm": model_file["hyperparameters"].get("max_grad_norm"),
                 "epsilon": row.epsilon_prv if row.epsilon_prv is not None else row.epsilon_rdp}
        models.append({"cell_id": row.cell_id, "file": path, "label": row.label,
                       "label_definition": LABEL_DEFINITIONS[row.label], "model": row.model, "loss": row.loss,
                       "target_epsilon": row.target_epsilon, "release": row.release, "plan": plan, "tuning": tuning,
                       "evaluation": evaluation["metrics"], "evaluation_release": evaluation["release"]})
    (out / "featurizer.json").write_text(strict_dumps(featurizer, indent=1))
    (out / "counts.json").write_text(strict_dumps(counts, indent=1))
    (out / "evaluation.json").write_text(strict_dumps(
        {k: {"release": v["release"], "histograms": v["histograms"], "metrics": v["metrics"], "plan": v["plan"]}
         for k, v in evaluations.items()}, indent=1))
    evaluation_releases = [v["release"] for v in evaluations.values()]
    sources["evaluation.json"] = {"source": "dp", "releases": evaluation_releases}
    entries = [e for e in in_ledger if e.release in cited]
    total = bundle_total([public_entry(e) for e in entries], config.privacy.delta)
    exact_tuning = any(m["tuning"]["method"] == "exact" for m in models)
    guarantee, _ = _guarantee(total, featurizer["source"], counts, config.split.method, exact_tuning)
    card = _card(config, models, counts, featurizer, total, guarantee)
    every = sorted(cited)
    sources["card.json"], sources["card.md"] = ({"source": "derived", "releases": every} for _ in range(2))
    for name, about in sources.items():
        about["about"] = BUNDLE_FILES.get(name, "a bundled model: weights trained by DP-SGD (a DP-trained ExpM "
                                                    "flow's mean) and its architecture")
    # the date alone (a time of day would time the run, whose length follows the data's size); the package's
    # version, not the working tree's commit (a project that commits its data.dvc commits the delivery's hash)
    header = {"run_id": run.root.name, "created": datetime.now(timezone.utc).date().isoformat(),
              "code": {"privehr": version("privehr")}, "guarantee": guarantee}
    manifest = write_manifest(out, sources, entries, config.privacy.delta, header, card,
                              signing_key(config.privacy.ledger_path))
    run_logger().info("release bundle: %d model(s), %d release(s); %s", len(models), len(entries), guarantee)
    return {"path": str(out), "models": [m["cell_id"] for m in models], "releases": len(entries),
            "guarantee": guarantee, "total": manifest["total"]}
