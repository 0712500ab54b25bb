"""DP hyperparameter selection (``training.tuning``), run end to end on a small simulated extract.

With ``tuning: dp`` a DP-SGD search scores each trial by a DP release of its dev scores (noisy per-class score
histograms), so the final fit is DP by composition: the ledger holds the K trials, the K scores and the fit, the
bundle cites all of them and its total is the ledger's composition of exactly those. With ``tuning: exact`` the
final fit is recorded as not DP and the bundle says so. The budget check reserves one Gaussian entry per trial's
score, and the search chooses by the noisy scores alone (a fake score proves it).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from privehr.core.config import Cell, PipelineConfig
from privehr.core.run_layout import RunLayout
from privehr.flows.pipeline import pipeline
from privehr.io.demo_data import write_extract
from privehr.io.ledger import read_ledger
from privehr.io.release_bundle import verify_bundle
from privehr.models.privacy.ledger import compose_entries
from privehr.resources import mimic_extract_variables
from privehr.simulate.severity_simulator import simulate_extract

CELL = "los_3-logistic_regression-dp_sgd-bce-eps1"
K = 3
# los_3 has both classes in a 600-stay extract's 47 dev stays (30 and 17). At a score epsilon of 2 (sigma 2.16 per
# bin, 10 bins) a class's noisy total falls under one record, and its trial's noisy AUROC is nan (stored as None, ranked
# last), in about 1 % of trials: the tests below accept that and check the rule, not the luck
SETTINGS = {"labels": ["los_3"], "data": {"chunk_rows": 4096},
            "training": {"models": ["logistic_regression"], "methods": ["dp_sgd"], "seeds": 1, "search_budget": K,
                         "search_score_epsilon": 2.0,
                         "dp_sgd": {"epochs": 1, "epsilons": [1.0], "batch_size": 200}},
            "release": {"evaluation_epsilon": 10.0, "evaluation_bins": 10, "interval_resamples": 200},
            "versioning": {"dvc": False}, "device": "cpu", "validation": {"enabled": False}}  # GX: not the claim


def _config(tmp: Path, run_id: str, tuning: str, ledger: Path, **training) -> PipelineConfig:
    return PipelineConfig.model_validate({
        **SETTINGS, "data": {**SETTINGS["data"], "hdf5_path": str(tmp / "extract.h5")},
        "training": {**SETTINGS["training"], "tuning": tuning, **training},
        "artifacts_dir": str(tmp / "artifacts"), "run_id": run_id, "privacy": {"ledger_path": str(ledger)}})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tuning")
    write_extract(simulate_extract(mimic_extract_variables(), 600, 5), tmp / "extract.h5")
    out = {"tmp": tmp}
    for tuning in ("dp", "exact"):
        ledger = tmp / f"ledger-{tuning}.jsonl"
        summary = pipeline(_config(tmp, tuning, tuning, ledger))
        assert summary["release"]["models"] == [CELL]
        out[tuning] = {"run": Path(summary["run_dir"]), "ledger": ledger}
    return out


def _released(ledger: Path):
    return [e for e in read_ledger(ledger) if e.status == "released"]


def _row(run: Path) -> dict:
    return json.loads(RunLayout(run).fit_result(CELL, 0).read_text())["value"]


def test_dp_tuning_composes_trials_scores_and_the_fit_into_the_bundle(runs):
    run, ledger = runs["dp"]["run"], runs["dp"]["ledger"]
    released = _released(ledger)
    by_what = {e.what: e for e in released}
    trials = [by_what[f"search trial {k}"] for k in range(K)]
    scores = [by_what[f"search score {k}"] for k in range(K)]
    fit = by_what["final fit"]
    assert len([e for e in released if e.what.startswith("search ")]) == 2 * K
    assert {e.mechanism for e in trials} == {"dp_sgd"} and {e.mechanism for e in scores} == {"gaussian"}
    assert fit.mechanism == "dp_sgd"
    assert {e.guarantee for e in [*trials, *scores, fit]} == {"dp"}
    assert all(e.epsilon <= 2.0 for e in scores) and all(e.epsilon <= 1.0 for e in [*trials, fit])
    assert _row(run)["guarantee"] == "DP"

    search = json.loads(RunLayout(run).search(CELL).read_text())
    assert search["tuning"] == "dp" and len(search["trials"]) == K
    assert [t["release"] for t in search["trials"]] == [e.release for e in trials]
    assert [t["score_release"] for t in search["trials"]] == [e.release for e in scores]
    noisy = [t["noisy_dev_auroc"] for t in search["trials"]]
    assert all(v is None or 0 <= v <= 1 for v in noisy)  # None: a class's noisy dev total under one record
    assert noisy != [t["exact_dev_auroc_unused"] for t in search["trials"]]  # a DP release, not the exact AUROC
    ranked = [-np.inf if v is None else v for v in noisy]  # a trial without a finite score ranks last
    assert search["chosen"] == search["trials"][int(np.argmax(ranked))]["hyperparameters"]
    assert "DP dev AUROC" in search["note"]

    bundle = run / "release"
    manifest = json.loads((bundle / "manifest.json").read_text())
    model = manifest["files"][f"models/{CELL}.pt"]
    assert model["source"] == "dp"
    assert sorted(model["releases"]) == sorted(e.release for e in [fit, *trials, *scores])
    cited = {r for f in manifest["files"].values() for r in f["releases"]}
    entries = [e for e in read_ledger(ledger) if e.release in cited]
    # the model, its K trials and K scores, its DP evaluation, the record counts: the ledger's every release
    assert len(entries) == len(cited) == 2 * K + 3 and cited == {e.release for e in released}
    total = compose_entries(entries, 1e-5)
    card = json.loads((bundle / "card.json").read_text())
    privacy = card["privacy"]
    assert total.dp and privacy["guarantee"].startswith("DP end to end") and privacy["releases"] == 2 * K + 3
    for mine, ledgers in (("epsilon_prv", total.epsilon_dp_prv), ("epsilon_rdp", total.epsilon_dp_rdp),
                          ("epsilon_pld", total.epsilon_dp_pld)):
        assert privacy[mine] == pytest.approx(ledgers, rel=1e-12)
        assert manifest["total"][mine] == pytest.approx(ledgers, rel=1e-9)  # composed in release-id order
    # the tuning costs: more than the model and its evaluation alone
    alone = compose_entries([e for e in entries if not e.what.startswith("search ")], 1e-5)
    assert privacy["epsilon_prv"] > alone.epsilon_dp_prv + 0.5
    assert any("DP dev scores" in c and f"among {K} configurations" in c for c in privacy["covers"])
    assert not any("searched on private dev data" in c for c in privacy["not_covered"])
    assert card["models"][0]["tuning"] == {"method": "dp", "trials": K}
    report = verify_bundle(bundle, read_ledger(ledger))
    assert report["ok"], report["problems"]


def test_a_forged_manifest_that_drops_a_search_release_does_not_verify(runs, tmp_path):
    from privehr.io.release_bundle import bundle_total

    bundle = tmp_path / "bundle"
    shutil.copytree(runs["dp"]["run"] / "release", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    score = next(e["release"] for e in manifest["releases"] if e["what"] == "search score 1")
    manifest["releases"] = [e for e in manifest["releases"] if e["release"] != score]
    for about in manifest["files"].values():
        about["releases"] = [r for r in about["releases"] if r != score]
    manifest["total"] = bundle_total(manifest["releases"], manifest["delta"])
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    report = verify_bundle(bundle)
    assert not report["ok"] and any("search score" in p for p in report["problems"]), report["problems"]


def test_exact_tuning_is_recorded_not_dp_and_the_bundle_says_so(runs):
    run, ledger = runs["exact"]["run"], runs["exact"]["ledger"]
    released = _released(ledger)
    assert sorted(e.what for e in released if e.what.startswith("search ")) == [f"search trial {k}" for k in range(K)]
    fit = next(e for e in released if e.what == "final fit")
    assert fit.guarantee == "tuned"
    assert _row(run)["guarantee"] == "not DP (hyperparameters chosen on private dev data)"
    search = json.loads(RunLayout(run).search(CELL).read_text())
    assert search["tuning"] == "exact" and "exact dev AUROC" in search["note"]
    scores = [t["dev_auroc"] for t in search["trials"]]
    assert search["chosen"] == search["trials"][int(np.argmax(scores))]["hyperparameters"]
    card = json.loads((run / "release" / "card.json").read_text())
    assert card["privacy"]["guarantee"].startswith("NOT DP end to end")
    assert "training.tuning: exact" in card["privacy"]["guarantee"]
    assert any("searched on private dev data" in c for c in card["privacy"]["not_covered"])
    assert not any("DP dev scores" in c for c in card["privacy"]["covers"])
    assert verify_bundle(run / "release")["ok"]


def _copy(runs, tmp_path: Path) -> str:
    run = tmp_path / "run"
    shutil.copytree(runs["dp"]["run"], run)
    return str(run)


@pytest.mark.parametrize("tuning", ["dp", "exact"])
def test_the_budget_check_reserves_one_score_per_trial(runs, tmp_path, tuning):
    from privehr.tasks.release_budget import check_privacy_budget, search_score_key
    from privehr.tasks.train import trial_key

    run = _copy(runs, tmp_path)
    scratch = tmp_path / "scratch.jsonl"
    config = _config(runs["tmp"], "dp", tuning, scratch)
    cell = Cell(label="los_3", model="logistic_regression", method="dp_sgd", loss="bce", target_epsilon=1.0)
    reservations = check_privacy_budget.fn(run, [cell], config)
    reserved = read_ledger(scratch)
    scores = [e for e in reserved if e.what.startswith("search score")]
    if tuning == "dp":
        assert sorted(e.what for e in scores) == [f"search score {k}" for k in range(K)]
        assert {e.mechanism for e in scores} == {"gaussian"} and {e.guarantee for e in scores} == {"dp"}
        assert all(e.epsilon <= config.training.search_score_epsilon for e in scores)
        assert {search_score_key(cell, k) for k in range(K)} <= set(reservations)
        assert len({id(reservations[search_score_key(cell, k)].plan) for k in range(K)}) == 1  # built once
    else:
        assert not scores and not any("search-score" in k for k in reservations)
    assert {trial_key(cell, k) for k in range(K)} <= set(reservations)
    assert len(reserved) == len(reservations) == K * (1 + (tuning == "dp")) + 2  # + the final fit, its evaluation
    if tuning == "dp":  # the copied run's own configuration: its search finished
        # a resumed run whose search finished reserves neither its trials nor their scores again
        again = check_privacy_budget.fn(run, [cell], config.model_copy(update={"resume": True}))
        assert not any("/trial" in k or "search-score" in k for k in again)


@pytest.mark.parametrize(("fakes", "winner"), [([0.9, 0.2, 0.3], 0), ([0.1, 0.2, 0.9], 2), ([math.nan, 0.2, 0.3], 2)])
def test_the_search_chooses_by_the_noisy_score_alone(runs, tmp_path, monkeypatch, fakes, winner):
    """The noisy AUROC is replaced by fakes whose best is ``winner``: the choice follows them whatever the exact
    dev AUROC says (two winners: a search that read the exact AUROC would fail at least one of them unless each
    run's exact argmax happened to be that run's winner). A nan score (a class's noisy total under one record) ranks
    last and is stored as None; numpy's argmax would pick it first."""
    import privehr.tasks.train as train
    from privehr.tasks.release_budget import check_privacy_budget

    run = _copy(runs, tmp_path)
    RunLayout(run).search(CELL).unlink()
    config = _config(runs["tmp"], "dp", "dp", tmp_path / "scratch.jsonl")
    cell = Cell(label="los_3", model="logistic_regression", method="dp_sgd", loss="bce", target_epsilon=1.0)
    reservations = check_privacy_budget.fn(run, [cell], config)
    fake = iter(fakes)
    seen = []
    monkeypatch.setattr(train, "metrics_from_histograms",
                        lambda h, **kw: seen.append(h) or SimpleNamespace(auroc=next(fake)))
    chosen = train.search_hyperparameters.fn(str(Path(run) / "intermediate"), cell, config.training, config.privacy,
                                             run, reservations, "cpu", config.release.evaluation_bins)
    search = json.loads(RunLayout(run).search(CELL).read_text())
    assert len(seen) == K and all(h.negatives.size == config.release.evaluation_bins for h in seen)
    assert chosen == search["trials"][winner]["hyperparameters"]
    assert [t["noisy_dev_auroc"] for t in search["trials"]] == [None if math.isnan(v) else pytest.approx(v)
                                                                for v in fakes]
    # each score entered the ledger before it was used
    assert sorted(e.what for e in read_ledger(tmp_path / "scratch.jsonl") if e.status == "released"
                  and e.what.startswith("search score")) == [f"search score {k}" for k in range(K)]
