"""privehr-synthesize end to end on the demo EHR table: releases recorded, tables where they belong, report,
ledger, Prefect artifacts; the raw input is left byte-identical."""

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from prefect.client.orchestration import get_client

from privehr.flows.synthesis import synthesize_ehr
from privehr.core.config import SynthesisConfig
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import ledger_totals, read_ledger


@pytest.fixture(scope="module")
def synthesis_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthesis")
    table = root / "EHR_dataset.csv"
    write_demo_ehr(table, seed=0)
    digest = hashlib.sha256(table.read_bytes()).hexdigest()
    config = SynthesisConfig(path=table, mice={"m": 2, "max_iter": 3, "trace": False}, mus=[2.0], epsilons=[5.0],
                             runs=1, releases=2, dpnf={"steps": 60, "blocks": 2, "hidden_size": 16},
                             artifacts_dir=root / "artifacts", run_id="synth",
                             privacy={"ledger_path": root / "ledger.jsonl"})
    summary = synthesize_ehr(config, "cpu")
    return config, summary, table, digest


def test_every_release_is_recorded_with_its_cost(synthesis_run):
    config, summary, _, _ = synthesis_run
    run_dir = Path(summary["run_dir"])
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "releases").glob("imp*-run*.json"))
               if not p.name.endswith(".evaluation.json")]
    assert len(records) == 3  # (non-private, mu 2, epsilon 5) x runs: on the table as delivered, not per imputation
    for r in records:
        assert math.isfinite(r["test_log_likelihood"])
        assert r["patients_delivered"] == 84 and "training_patients" not in r  # Harrod's count is public
        if r["mechanism"] == "non_private":
            assert r.get("noise_multiplier") is None and r["epsilon"] is None
            assert r["guarantee"] == "not DP (non-private)"
            continue
        for key in ("noise_multiplier", "sample_rate", "steps", "delta", "epsilon_prv", "epsilon_rdp", "epsilon_pld",
                    "mu"):
            assert r[key] is not None, key
        assert r["steps"] == 60 and r["delta"] == config.privacy.delta and r["guarantee"] == "DP"
        assert r["epsilon_pld"] <= r["epsilon_rdp"]
        if r["job"]["budget"]["kind"] == "mu":
            assert r["mu"] == pytest.approx(2.0)
        else:
            assert max(r["epsilon_prv"], r["epsilon_rdp"]) <= 5.0
        assert r["scaling"] == {"kind": "bounds", "inside_guarantee": True} and r["releasable"]
        assert r["missing"]["mode"] == "in_release" and r["missing"]["inside_guarantee"]
        assert r["noise_source"] == "os_entropy" and "seed" not in r and "history" not in r
        assert "n" not in r and "expected_batch" not in r


def test_tables_are_in_original_units_and_where_they_belong(synthesis_run):
    _, summary, _, _ = synthesis_run
    run_dir = Path(summary["run_dir"])
    public, private = sorted((run_dir / "synthetic").glob("*.csv")), sorted((run_dir / "intermediate" / "synthetic").glob("*.csv"))
    # (DP budgets) x releases x {raw, truncated, missing}; the non-private flow's alike, under intermediate/
    assert len(public) == 2 * 2 * 3 and len(private) == 2 * 3
    assert all("-inf-" in p.name for p in private) and not any("-inf-" in p.name for p in public)
    raw = pd.read_csv(next(p for p in public if p.name.endswith("-raw.csv")))
    truncated = pd.read_csv(next(p for p in public if p.name.endswith("-truncated.csv")))
    missing = pd.read_csv(next(p for p in public if p.name.endswith("-missing.csv")))
    assert {"mean_pap", "hypertensive"} <= set(raw.columns) and set(raw["hypertensive"]) <= {0, 1}
    assert truncated["heart_rate2"].dropna().between(20, 250).all()
    assert len(raw) == len(missing) == 84  # as many rows as the delivery's (public) patient count
    assert not any(c.endswith("__missing") for c in missing.columns)  # the indicators became missing values
    assert missing.isna().to_numpy().sum() > truncated.isna().to_numpy().sum()  # MICE completed what it could


def test_report_ledger_artifacts_and_untouched_input(synthesis_run):
    config, summary, table, digest = synthesis_run
    run_dir = Path(summary["run_dir"])
    results = pd.read_csv(run_dir / "results.csv")
    assert len(results) == 3 * 2 * 2 and results["svm_accuracy"].between(0, 1).all()
    report = (run_dir / "report.md").read_text()
    for heading in ("SVM accuracy", "Random forest MSE", "Fidelity", "Releases and their cost", "guarantee covers"):
        assert heading in report
    # TSTR is judged against the panel trained on shuffled labels (3 fits per imputation), not a fixed AUROC
    assert "**No better than chance**" in report and "hypertensive shuffled (6 fits)" in report
    assert summary["tstr_chance"]["fits"] == 6 and "tstr_no_better_than_chance" in results
    assert (run_dir / "utility_vs_budget.png").stat().st_size > 0
    assert (run_dir / "intermediate" / "marginals.png").exists() and not (run_dir / "marginals.png").exists()
    entries = [e for e in read_ledger(config.privacy.ledger_path) if e.status == "released"]
    # the flows, and the noisy patient counts their plans were built from (released first, even where the spec
    # declares the delivery's count public: the training count after quarantine and split is private)
    assert len(entries) == 4 and sum(e.mechanism == "dp_sgd" for e in entries) == 2
    assert [e.what for e in entries if e.mechanism == "dp"] == ["patient count"]
    (total,) = ledger_totals(config.privacy.ledger_path)
    assert not total.dp and total.epsilon is None and total.epsilon_dp > 5.0  # mu 2 and epsilon 5 compose
    assert total.pending == 0 and total.releases == 4
    assert hashlib.sha256(table.read_bytes()).hexdigest() == digest
    # the bundle ships Harrod's exact patient count (public by its spec), so its relation is replace-one (issue 41
    # item 3), where group privacy of two at this epsilon gives a delta far above 1/84: no guarantee is claimed, and
    # never "DP" beside it (issue 55.4; the card once said "DP end to end: (epsilon 33.6, delta 2e+02)")
    card = json.loads((Path(summary["release"]["path"]) / "card.json").read_text())
    assert card["counts"]["patients_delivered"] == 84
    privacy = card["privacy"]
    assert privacy["neighbours"]["relation"] == "replace one patient"
    assert privacy["neighbours"]["meaningful"] is False and privacy["neighbours"]["epsilon"] is None
    assert privacy["guarantee"].startswith("NOT DP end to end") and "no meaningful guarantee" in privacy["guarantee"]

    async def keys():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    import asyncio

    assert {"privehr-synthesis-report", "privehr-synthesis-releases"} <= asyncio.run(keys())


def test_a_run_over_the_tables_budget_trains_nothing(tmp_path):
    table = tmp_path / "EHR_dataset.csv"
    write_demo_ehr(table, seed=0)
    config = SynthesisConfig(path=table, mice={"m": 1, "max_iter": 2, "trace": False}, mus=[2.0, 1.0], epsilons=[],
                             non_private=False, dpnf={"steps": 20}, artifacts_dir=tmp_path / "a", run_id="over",
                             privacy={"budget_epsilon": 5.0, "ledger_path": tmp_path / "ledger.jsonl"})
    from privehr.core.errors import InputError

    with pytest.raises(InputError, match="privacy budget exceeded"):
        synthesize_ehr(config, "cpu")
    run_dir = tmp_path / "a" / "over"
    assert json.loads((run_dir / "privacy_budget.json").read_text())["epsilon_dp_after_run"] > 5.0
    assert not (run_dir / "releases").exists()  # no flow trained; only the counts its plans needed were spent
    assert [e.what for e in read_ledger(config.privacy.ledger_path) if e.status == "released"] == ["patient count"]


def test_a_private_patient_count_reaches_the_tables_only_with_noise(tmp_path):
    """A spec that does not declare its patient count public: the tables are sized by a count released with
    two-sided geometric noise (a DP release in the ledger), and no record or report carries the exact count."""
    import yaml

    from privehr.core.specs import SPEC_DIR

    table = tmp_path / "EHR_dataset.csv"
    write_demo_ehr(table, seed=0)
    spec = yaml.safe_load((SPEC_DIR / "harrod_ehr.yaml").read_text()) | {"public_patient_count": False}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    config = SynthesisConfig(path=table, spec=str(tmp_path / "spec.yaml"), mice={"m": 1, "max_iter": 2, "trace": False},
                             mus=[2.0], epsilons=[], non_private=False, runs=1, releases=1,
                             dpnf={"steps": 20, "blocks": 1, "hidden_size": 8}, artifacts_dir=tmp_path / "a",
                             run_id="private-count", privacy={"ledger_path": tmp_path / "ledger.jsonl"})
    summary = synthesize_ehr(config, "cpu")
    run_dir = Path(summary["run_dir"])
    released = json.loads((run_dir / "released_count.json").read_text())
    record = json.loads((run_dir / "releases" / "imp0-mu2-run0.json").read_text())
    assert "patients_delivered" not in record and record["rows_per_table"] == released["count"]
    assert released["epsilon"] == config.count_epsilon and released["guarantee"] == "DP"
    assert "patients delivered" not in (run_dir / "report.md").read_text()
    entries = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e.status == "released"]
    assert sorted((e.mechanism, e.what) for e in entries) == [("dp", "patient count"), ("dp_sgd", "DP-NF flow")]
    (total,) = ledger_totals(tmp_path / "ledger.jsonl")
    assert total.dp and total.epsilon_other_basic == config.count_epsilon
    card = json.loads((Path(summary["release"]["path"]) / "card.json").read_text())
    assert card["privacy"]["neighbours"]["relation"] == "add/remove one patient"  # no exact count ships
