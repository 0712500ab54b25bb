"""The release bundle of a synthesis run: the synthetic tables that may leave the hospital, and nothing else
(``artifacts/<run-id>/release/``).

Every number in it is public (the spec, the configuration) or post-processing of a DP release the budget check
reserved and the ledger recorded:

* ``tables/<job>-r<k>.csv``: each DP release's synthetic table decoded to the spec's types and bounds, its missing
  values drawn by MICE fitted on the synthetic table itself; ``tables/<job>-r<k>-missing.csv``: the same table
  before that imputation, its missing values as the synthesizer released them (``synthesis.missing: in_release``);
* ``counts.json``: the patient count the tables are sized by, where it is a DP release (or declared public);
* ``card.json`` / ``card.md``: what the tables are, their guarantee, what it covers and does not (rendered from the
  manifest's copy of the card);
* ``manifest.json``: each file's sha256 and releases, those releases' ledger entries and their total by PRV, RDP
  and PLD, and the card (:mod:`privehr.io.release_bundle`);
* ``signature.json``: the hospital's Ed25519 signature of the manifest (:mod:`privehr.io.bundle_signature`).

Releases without a guarantee (the non-private flow, reproducible noise) and tables scaled by training statistics
or bounded by a spec drafted from the data stay inside the hospital. A run in the papers' order
(``synthesis.missing: mice_first``) writes its bundle too, and its card says NOT DP end to end: MICE was fitted on
every training patient before the synthesizer saw them. The utility and fidelity numbers of the run's report are
exact statistics of the real patients and stay inside.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from prefect import task

from privehr.core.config import SynthesisConfig
from privehr.core.run_layout import RunLayout
from privehr.core.specs import load_ehr_spec
from privehr.core.strict_json import strict_dumps
from privehr.io.ledger import read_ledger
from privehr.io.release_bundle import bundle_neighbours, bundle_total, dp_claim, public_entry, write_manifest
from privehr.io.spreadsheet import escape_cell
from privehr.tasks.release_bundle import signing_key
from privehr.tasks.run_logging import run_logger
from privehr.tasks.synthesis import needs_noisy_count

__all__ = ["write_synthesis_bundle"]


def _bundled(record: dict) -> bool:
    """A DP release whose scaling is public (the spec's bounds, not a drafted spec) and with a table left: its tables
    may be bundled. One whose every table ended with no rows is spent (in the ledger) but has nothing to ship: it
    is left out, and neither its files nor its cost are cited."""
    return record["guarantee"].startswith("DP") and record["scaling"]["inside_guarantee"] and \
        record.get("ledger_release") is not None and any(f["truncated"] for f in record["files"])


def _formula_like(spec) -> list[str]:
    """The columns whose name or one of whose category labels (the spec's: public) a spreadsheet would run as a
    formula. The tables are data and stay byte-faithful (a partner's code maps the labels back); the card and the
    log say how to open them instead."""
    names = [(a.name, a.levels if a.discrete else []) for a in spec.attributes] + [(d.name, []) for d in spec.derived]
    return [name for name, labels in names
            if any(escape_cell(str(v)) != str(v) for v in [name, *labels])]


def _formula_note(columns: list[str]) -> str:
    return (f"the tables' column(s) {', '.join(columns)} hold a name or category (as the spec names them) that a "
            "spreadsheet would run as a formula; the tables are data, written as they are: import them as text (a "
            "spreadsheet's import, or a CSV reader), do not open them with a double-click")


def _guarantee(total: dict, missing: str, neighbours: dict) -> str:
    reasons = [f"{n} release(s) {label}" for label, n in total["not_dp"].items()] if not total["dp"] else []
    if missing == "mice_first":
        reasons.append("the synthesizers were trained on MICE imputations fitted on all training patients "
                       "(synthesis.missing: mice_first): one patient's values move every other patient's "
                       "imputations")
    if neighbours.get("meaningful") is False:  # never "DP" beside a delta of 1/n or more
        reasons.append(neighbours["why"])
    if reasons:
        return "NOT DP end to end: " + "; ".join(reasons)
    return f"DP end to end: {dp_claim(total, neighbours)} over everything in this bundle"


@task(name="synthesis-release-bundle")
def write_synthesis_bundle(run_dir: str, record_paths: list[str], config: SynthesisConfig) -> dict | None:
    """Write ``release/`` with the tables of the run's DP releases; return its summary, or None when none is DP."""
    run = RunLayout(run_dir)
    records = [json.loads(Path(p).read_text()) for p in record_paths]
    bundled = [r for r in records if _bundled(r)]
    if not bundled:
        run_logger().info("release bundle: no DP release with public scaling %sin this run; no bundle written",
                          "and a table left " if any(r.get("empty_note") for r in records) else "")
        return None
    spec = load_ehr_spec(config.spec)
    formula = _formula_like(spec)
    if formula:
        run_logger().warning("release bundle: %s", _formula_note(formula))
    out = run.release_bundle
    if out.exists():
        shutil.rmtree(out)  # a resumed run writes its bundle again
    (out / "tables").mkdir(parents=True)
    sources, cited, tables = {}, set(), []
    source = "dp" if config.missing == "in_release" else "dp release of MICE imputations (not DP end to end)"
    for record in bundled:
        job, release = record["job"]["job_id"], record["ledger_release"]
        cited.add(release)
        files = [(f["release"], f["path"], "") for f in record["files"] if f["truncated"]]
        files += [(f["release"], f["path"], "-missing") for f in record.get("with_missing", [])]
        for k, path, suffix in files:
            name = f"tables/{job}-r{k}{suffix}.csv"
            shutil.copyfile(path, out / name)
            sources[name] = {"source": source, "releases": [release],
                             "about": "a synthetic table with its missing values as released" if suffix else
                                      "a synthetic table decoded to the spec, missing values imputed by MICE fitted "
                                      "on the synthetic table itself" if config.missing == "in_release" else
                                      "a synthetic table decoded to the spec"}
        tables.append({"job": job, "synthesizer": record["synthesizer"], "budget": record["budget_label"],
                       "mechanism": record["mechanism"], "epsilon": record.get("epsilon"),
                       "delta": record.get("delta"), "release": release, "rows": record["rows_per_table"],
                       "files": sorted(n for n in sources if n.startswith(f"tables/{job}-"))})
    counts = _counts(run, config, spec, records)
    if counts is not None:
        (out / "counts.json").write_text(strict_dumps(counts, indent=1))
        sources["counts.json"] = {"source": counts["source"], "releases": counts["releases"],
                                  "about": "the patient count the tables are sized by"}
        cited |= set(counts["releases"])
    entries = [e for e in read_ledger(config.privacy.ledger_path) if e.release in cited]
    total = bundle_total([public_entry(e) for e in entries], config.privacy.delta)
    neighbours = bundle_neighbours("patient", counts, total)  # replace-one where the count ships exactly
    guarantee = _guarantee(total, config.missing, neighbours)
    # the columns of the tables: every attribute of the spec in release; in the papers' order those the training
    # patients' missingness kept (a fact about them, which the card's not-covered list names)
    columns = [a.name for a in spec.attributes] if config.missing == "in_release" else \
        json.loads(run.imputation.read_text())["attributes"]
    card = _card(config, spec, tables, total, guarantee, counts, columns, neighbours)
    if formula:
        card["intended_use"].append(_formula_note(formula))
    every = sorted(cited)
    for name in ("card.json", "card.md"):
        sources[name] = {"source": "derived", "releases": every, "about": "the card of the synthetic tables"}
    header = {"run_id": run.root.name, "created": datetime.now(timezone.utc).date().isoformat(),
              "code": {"privehr": version("privehr")}, "guarantee": guarantee, "kind": "synthetic tables"}
    manifest = write_manifest(out, sources, entries, config.privacy.delta, header, card,
                              signing_key(config.privacy.ledger_path))
    run_logger().info("release bundle: %d synthetic table(s) from %d release(s); %s",
                      sum(1 for n in sources if n.startswith("tables/")), len(entries), guarantee)
    return {"path": str(out), "tables": len([n for n in sources if n.startswith("tables/")]),
            "releases": len(entries), "guarantee": guarantee, "total": manifest["total"]}


def _counts(run: RunLayout, config: SynthesisConfig, spec, records: list[dict]) -> dict | None:
    """What the plans and the tables' size were built from: the released noisy counts whenever the run released
    them (every run with a DP release: its plans read them), with the delivery's count where the spec declares it
    public; nothing to ship where neither holds."""
    public = {"patients_delivered": records[0]["patients_delivered"],
              "note": "declared public by the spec (public_patient_count); the tables have this many rows"} \
        if spec.public_patient_count and config.rows is None else {}
    if needs_noisy_count(config, spec):
        released = json.loads(run.released_count.read_text())
        return {"source": "dp", "patients": released["count"], "training_patients": released["train"],
                "epsilon": released["epsilon"], "mechanism": released["mechanism"],
                "releases": [released["release"]], **public}
    return {"source": "public", "releases": [], **public} if public else None


def _card(config: SynthesisConfig, spec, tables: list[dict], total: dict, guarantee: str,
          counts: dict | None, columns: list[str], neighbours: dict) -> dict:
    in_release = config.missing == "in_release"
    covers = ["every synthetic table in this bundle is sampled from a DP release (its synthesizer's noise and "
              "sampling from OS entropy) and decoded to the spec's types and bounds (public)"]
    if in_release:
        covers.append("missing values: each attribute's missingness was learned inside the release (a 0/1 column per "
                      "attribute, missing values replaced by a public placeholder), and the tables were imputed "
                      "afterwards by MICE fitted on themselves (post-processing)")
    covers.append("the split into training and held-out patients: a hash of each patient alone (its id, or its "
                  "record's values in a table without ids), so no patient moves another between them")
    if counts is not None:
        covers.append(f"the patient counts the plans and the tables' size were built from ({counts['source']})")
    covers.append("the unit is one patient (a row of the table)")
    covers.append("the hospital's per-patient budget: " + (
        f"its releases are charged to each patient of the table, by the spec's id column ({spec.id_column}), "
        "together with every other release that used them, whatever source it named" if spec.id_column else
        "the table names no patient id, so its releases are charged to every patient of the hospital's ledger, "
        "past and future (a row could be anyone)"))
    not_covered = ["the run's internal report: its utility, fidelity and membership-inference numbers compare the "
                   "synthetic tables with the real patients exactly and stay in the hospital",
                   "other releases from the same table (other runs, the non-private flow): the hospital's privacy "
                   "ledger composes them all",
                   "the spec (columns, bounds, categories) and the settings, which are public by assumption",
                   "validation's quarantine: a rule on each record's own values, except that a duplicated record is "
                   "quarantined in every copy (a patient identical to another removes both) and a delivery with too "
                   "large a quarantined share stops the run"]
    if not in_release:
        not_covered.insert(0, "the training data: MICE imputations fitted on all training patients before the "
                              "synthesizers saw them, and the columns kept by the training patients' missingness "
                              "(synthesis.missing: mice_first, the papers' order): one patient moves the others' "
                              "imputations, so the tables are not DP end to end")
    summary = f"{len(tables)} DP release(s) of the {spec.name} table by privehr " \
              f"({', '.join(sorted({t['synthesizer'] for t in tables}))}); " + (
                  "every number in this bundle is public or differentially private." if in_release else
                  "trained on MICE imputations of the real patients (the papers' order): NOT DP end to end.")
    return {"kind": "synthetic tables", "title": f"synthetic {spec.name} tables", "privacy": {
                "guarantee": guarantee, "releases": total["releases"], "delta": total["delta"],
                "epsilon_prv": total["epsilon_prv"], "epsilon_rdp": total["epsilon_rdp"],
                "epsilon_pld": total["epsilon_pld"], "neighbours": neighbours, "covers": covers,
                "not_covered": not_covered},
            "summary": summary,
            "table": {"spec": spec.name, "attributes": columns,
                      "derived": [d.name for d in spec.derived], "missing": config.missing},
            "counts": counts, "tables": tables,
            "intended_use": ["exploration, method development and teaching on data shaped like the source table; "
                             "not for decisions about individual patients",
                             "associations in the synthetic tables are those the DP release could learn at its "
                             "epsilon from few patients: check any finding on the real data, inside the hospital"]}
