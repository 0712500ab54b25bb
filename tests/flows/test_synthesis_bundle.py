"""The release bundle of a synthesis run, attacked as an outsider who holds it and knows every patient but one.

Differencing, as for the pipeline's bundle (tests/flows/test_release_bundle.py): three runs of one DP-only
configuration on the same table and a fourth on the table without one training patient. A number in ``release/``
identical in the three same-data runs but different in the fourth is an exact function of the private patients.
A synthetic table is compared column by column (a column identical in three runs of fresh noise is no chance tie);
JSON files leaf by leaf and the card's text numeral by numeral. The tables are trained on the table as delivered
(``synthesis.missing: in_release``), sized by a noisy count, and split by a hash of each record alone, so removing
one patient moves no other between train and test. The papers' order (``mice_first``) still writes a bundle, which
says NOT DP end to end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from privehr.cli import main
from privehr.core.config import SynthesisConfig
from privehr.core.specs import SPEC_DIR
from privehr.flows.synthesis import synthesize_ehr
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import read_ledger
from privehr.models.privacy.ledger import compose_entries

from oracles.bundle_numbers import leaves

SETTINGS = {"mice": {"m": 1, "max_iter": 2, "trace": False}, "mus": [], "epsilons": [2.0], "non_private": False,
            "runs": 1, "releases": 1, "dpnf": {"steps": 20, "blocks": 1, "hidden_size": 8}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synthesis-bundles")
    write_demo_ehr(tmp / "full.csv", seed=0)
    spec = yaml.safe_load((SPEC_DIR / "harrod_ehr.yaml").read_text()) | {"public_patient_count": False}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    ledger = tmp / "ledger.jsonl"

    def run(table: Path, run_id: str, **extra) -> Path:
        config = SynthesisConfig.model_validate({**SETTINGS, **extra, "path": str(table),
                                                 "spec": str(tmp / "spec.yaml"), "run_id": run_id,
                                                 "artifacts_dir": str(tmp / "artifacts"),
                                                 "privacy": {"ledger_path": str(ledger)}})
        summary = synthesize_ehr(config, "cpu")
        assert summary["release"] is not None
        return Path(summary["run_dir"])

    same = [run(tmp / "full.csv", name) for name in ("first", "second", "again")]
    train = pd.read_csv(same[0] / "intermediate" / "split" / "train.csv", index_col=0)
    patient = int(train.index[0].rsplit("-", 1)[1])  # ids follow the patients' order in a table without an id column
    table = pd.read_csv(tmp / "full.csv", header=None, dtype=str, keep_default_na=False)  # a patient per column
    table.drop(columns=patient).to_csv(tmp / "minus_one.csv", header=False, index=False)
    return {"same": same, "neighbour": run(tmp / "minus_one.csv", "minus-one"), "ledger": ledger, "tmp": tmp,
            "run": run}


def _numbers(bundle: Path) -> tuple[dict, dict]:
    """(every number of the JSON and Markdown files by its path, every non-constant column of every table)."""
    numbers, columns = {}, {}
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        name = path.relative_to(bundle).as_posix()
        if path.suffix == ".csv":
            table = pd.read_csv(path)
            for column in table:
                values = pd.to_numeric(table[column], errors="coerce")
                if values.nunique() > 1:  # a constant column (bounds, placeholder) carries no fact of its own
                    columns[(name, column)] = tuple(None if pd.isna(v) else float(v) for v in values)
            continue
        numerals = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
        content = json.loads(path.read_text()) if path.suffix == ".json" else \
            [[float(t) for t in re.findall(numerals, line)] for line in path.read_text().splitlines()]
        numbers |= {(name, *k): v for k, v in leaves(content)}
    return numbers, columns


def test_no_number_or_column_in_the_bundle_is_an_exact_function_of_the_patients(runs):
    same = [_numbers(r / "release") for r in runs["same"]]
    neighbour = _numbers(runs["neighbour"] / "release")
    for kind, what in ((0, "number"), (1, "table column")):
        shared = set(neighbour[kind]).intersection(*(s[kind] for s in same))
        assert len(shared) > 20, what
        leaks = sorted(k for k in shared if same[0][kind][k] == same[1][kind][k] == same[2][kind][k]
                       != neighbour[kind][k])
        assert not leaks, f"{len(leaks)} {what}(s) in release/ are exact functions of the patients: {leaks[:10]}"
    # one training patient fewer: the same held-out patients, one training patient less (a hash of each record)
    counts = [json.loads((r / "imputation.json").read_text())["patients"] for r in (runs["same"][0], runs["neighbour"])]
    assert counts[1] == {"train": counts[0]["train"] - 1, "test": counts[0]["test"]}


def test_the_bundle_holds_decoded_tables_its_card_and_the_ledgers_total(runs, capsys):
    bundle = runs["same"][0] / "release"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["guarantee"].startswith("DP end to end") and manifest["kind"] == "synthetic tables"
    tables = sorted(p for p in manifest["files"] if p.startswith("tables/"))
    assert tables == ["tables/imp0-epsilon2-run0-r0-missing.csv", "tables/imp0-epsilon2-run0-r0.csv"]
    assert not any("raw" in p for p in manifest["files"])  # the raw flow output stays inside
    table, missing = (pd.read_csv(bundle / t) for t in reversed(tables))
    assert not any(c.endswith("__missing") for c in table.columns) and table["heart_rate2"].between(20, 250).all()
    assert missing.isna().to_numpy().sum() > table.isna().to_numpy().sum()
    counts = json.loads((bundle / "counts.json").read_text())
    assert counts["source"] == "dp" and len(table) == counts["patients"]
    cited = {r for about in manifest["files"].values() for r in about["releases"]}
    entries = [e for e in read_ledger(runs["ledger"]) if e.release in cited]
    assert sorted(e.what for e in entries) == ["DP-NF flow", "patient count"]
    total = compose_entries([e.__class__(**{**e.as_dict(), "dataset": "x"}) for e in entries], 1e-5)
    assert manifest["total"]["epsilon_prv"] == pytest.approx(total.epsilon_dp_prv)
    assert manifest["total"]["epsilon_pld"] == pytest.approx(total.epsilon_dp_pld)
    assert main(["release", "verify", str(bundle), "--ledger", str(runs["ledger"])]) == 0
    capsys.readouterr()
    assert main(["release", "show", str(bundle)]) == 0
    card = capsys.readouterr().out
    assert card.startswith("# Data card: synthetic harrod_ehr tables") and "DP end to end" in card
    # the Harrod spec names no id column: the card says how the hospital's budget charges it (issue 54)
    assert "the table names no patient id, so its releases are charged to every patient" in " ".join(card.split())
    out = runs["tmp"] / "risks.csv"
    assert main(["predict", str(bundle), "--data", str(runs["tmp"] / "full.csv"), "--out", str(out)]) == 2
    assert "holds synthetic tables" in capsys.readouterr().err and not out.exists()


def test_the_papers_order_is_bundled_as_not_dp_end_to_end(runs):
    run_dir = runs["run"](runs["tmp"] / "full.csv", "mice-first", missing="mice_first")
    manifest = json.loads((run_dir / "release" / "manifest.json").read_text())
    assert manifest["guarantee"].startswith("NOT DP end to end") and "mice_first" in manifest["guarantee"]
    record = json.loads((run_dir / "releases" / "imp0-epsilon2-run0.json").read_text())
    assert record["missing"] == {**record["missing"], "mode": "mice_first", "inside_guarantee": False}
    assert not record["releasable"] and not (run_dir / "synthetic").exists()
    assert main(["release", "verify", str(run_dir / "release"), "--ledger", str(runs["ledger"])]) == 0
