"""Synthesis: one release per (synthesizer, imputation, budget, run), fitted on that imputation's training
patients by the synthesizer of :mod:`privehr.models.synthesis` (DP-NF, DP-HFlow, AIM, MST), and its synthetic
tables in original units, raw and decoded to the spec's types and bounds.

Layout in the run directory (``job`` = ``imp<i>-<budget>-run<r>``):

* ``releases/<job>.json``: the release record: mechanism, sigma, q, T, delta, epsilon (PRV, RDP,
  PLD, GDP), mu, where the noise came from (never the seed), the guarantee ("DP", or "not DP" for
  reproducible noise), the scaling and whether the guarantee covers it, the files; no count of
  private patients unless the spec declares it public. The flow enters the privacy ledger as soon as
  it is trained, under the reservation of the budget check, before it is saved anywhere;
* ``synthetic/<job>-r<k>-{raw,truncated,missing}.csv``: synthetic tables of DP releases whose scaling is
  data-independent and whose missing values were learned inside the release (``synthesis.missing: in_release``;
  post-processing of a DP release: releasable). ``raw`` is the synthesizer's output in frame units (untruncated),
  ``truncated`` the table decoded to the spec's types and bounds, ``missing`` the decoded table with its missing
  values; raw and truncated are completed by MICE fitted on the synthetic table itself. A table left with no row
  (every sampled row non-finite) gets no file: the record lists it (``empty_tables``) and says so in one line
  (``empty_note``: the release is spent, in the ledger, and neither scored nor bundled);
* ``intermediate/flows/<job>.pt`` (and the loss curve), and ``intermediate/synthetic/`` for the
  tables of non-private flows (they can memorise patients), of flows scaled by training statistics, and of
  releases trained on MICE imputations (``synthesis.missing: mice_first``: not DP end to end).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from privehr.core.config import Budget, SynthesisConfig
from privehr.core.errors import InputError
from privehr.core.records import ImputationSummary
from privehr.core.run_layout import RunLayout
from privehr.core.specs import check_targets, load_ehr_spec
from privehr.core.strict_json import strict_dumps
from privehr.io.ehr_table import read_ehr_table
from privehr.io.ledger import Ledger, record_release
from privehr.models.synthesis.codec import TableCodec
from privehr.models.data.mice import MICEImputer
from privehr.models.data.derived_columns import add_derived
from privehr.models.synthesis.missingness import (indicator_names, missingness_spec, placeholder, restore_missing,
                                                  with_indicators)
from privehr.models.synthesis.marginal import marginal_available
from privehr.models.privacy.gdp import gdp_epsilon
from privehr.models.privacy.noisy_count import noisy_count
from privehr.models.privacy.ledger import LedgerEntry, guarantee_label
from privehr.models.privacy.randomness import NoiseSource, public_seed
from privehr.models.privacy.release_plan import Reserved
from privehr.models.synthesis import (SYNTHESIZERS, SynthesisData, SynthesisMethod, choose_synthesizers,
                                      create_synthesizer, synthesis_jobs)
from privehr.tasks.compute import share_cores
from privehr.tasks.progress import progress_artifact
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger

__all__ = ["synthesize", "imputed_tables", "delivered_tables", "release_patient_count", "synthetic_rows", "COUNT_KEY",
           "planning_count",
           "needs_noisy_count", "check_synthesis_inputs", "check_imputed_targets", "check_synthesis_table",
           "synthesizer_of", "empty_note"]

COUNT_KEY = "patient-count"  # the reservation of the noisy patient count


def imputed_tables(run_dir: str | Path, imputation: int) -> tuple[pd.DataFrame, pd.DataFrame, ImputationSummary]:
    """(train, test, imputation summary) of one MICE dataset of an ``impute`` task's run directory."""
    folder = RunLayout(run_dir).imputed
    read = lambda part: pd.read_csv(folder / f"{part}_{imputation}.csv", index_col=0)  # noqa: E731
    return read("train"), read("test"), read_summary(run_dir, "imputation")


def _seed(job: dict) -> int:
    """The job's seed for initialisation and for sampling tables from the released flow (public: neither is
    DP randomness); distinct for every (imputation, budget, run)."""
    return public_seed(job["job_id"])


def needs_noisy_count(config: SynthesisConfig, spec) -> bool:
    """Whether the run releases noisy patient counts: whenever a DP release is planned (its q and its gradient's
    normalisation are built from the training count, which is private even where the spec declares the delivery's
    count public: the count after quarantine and the split depends on the patients' values), or the tables are
    sized by the count (``rows`` unset) and the spec does not declare it public."""
    return any(b.kind != "non_private" for b in config.budgets()) or (
        config.rows is None and not spec.public_patient_count)


def planning_count(run_dir: str | Path, config: SynthesisConfig, spec) -> int:
    """The training patients every DP plan of the run is built from: the released noisy count (the exact one only
    in a run without a DP release, whose plans are None anyway)."""
    if not needs_noisy_count(config, spec):
        return read_summary(run_dir, "imputation").patients["train"]
    return read_summary(run_dir, "released_count").train


def synthetic_rows(run_dir: str | Path, config: SynthesisConfig, spec, summary: ImputationSummary) -> int:
    """Rows per synthetic table: ``rows``, else the delivery's patient count if the spec declares it public (the
    records delivered: the count after quarantine depends on private values), else the released noisy count."""
    if config.rows is not None:
        return config.rows
    if spec.public_patient_count:
        return summary.decisions["records_read"]
    return read_summary(run_dir, "released_count").count


@task(name="release-patient-count")
def release_patient_count(run_dir: str, config: SynthesisConfig) -> int | None:
    """Reserve, then release, the training and held-out patient counts with epsilon-DP noise (two-sided geometric at
    ``count_epsilon``; each patient is in one split, so the two together are ``count_epsilon``-DP by parallel
    composition) before any plan is built: the plans (and, unless the spec declares the count public or ``rows``
    is set, the tables' size) are built from them. Returns the noisy total (None where nothing needs it)."""
    from privehr.tasks.release_budget import reserve_planned, synthesis_dataset_id, synthesis_members  # imports this

    spec = load_ehr_spec(config.spec)
    run = RunLayout(run_dir)
    out = run.released_count
    check_imputed_targets(run_dir, config)  # a target with one class: refused before anything is reserved
    if not needs_noisy_count(config, spec):
        return None
    if config.resume and out.exists():  # released (and recorded) by an earlier attempt
        return read_summary(run_dir, "released_count").count
    exact = read_summary(run_dir, "imputation").patients  # the mechanism's input; no decision reads it (a delta of
    # 1/n or more is refused on the noisy count the plans are built from: check_synthesis_budget)
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, COUNT_KEY)
    entry = LedgerEntry("", "", "dp", config.count_epsilon, guarantee=noise.guarantee, what="patient count")
    reserved = reserve_planned(run_dir, synthesis_dataset_id(run_dir, config), config, {COUNT_KEY: entry},
                               "patient count", out=run.preprocessing_budget,
                               members=synthesis_members(run_dir, config))[COUNT_KEY]
    rng = noise.numpy_generator("count")
    train, test = (noisy_count(exact[part], config.count_epsilon, rng, minimum=1) for part in ("train", "test"))
    release = record_release(config.privacy.ledger_path, reserved, entry).release
    out.write_text(json.dumps({"count": train + test, "train": train, "test": test, "epsilon": config.count_epsilon,
                               "mechanism": "two-sided geometric, per split", "guarantee": noise.label,
                               "release": release}))
    run_logger().info("released the patient counts with noise (epsilon %g)", config.count_epsilon)
    return train + test


#: how the command line adds a budget of each kind (the message of a grid with none a synthesizer takes)
BUDGET_FLAGS = {"epsilon": "add --epsilon", "mu": "add --mu", "non_private": "leave out --no-non-private"}


def check_synthesis_inputs(config: SynthesisConfig) -> None:
    """Refuse, before any record is read or any budget spent, what would fail after training: targets the table
    lacks, a column a synthesizer cannot scale or bin (no bounds), a baseline whose library is missing."""
    spec = load_ehr_spec(config.spec)
    config = choose_synthesizers(config, spec)
    check_targets(spec, *config.targets(spec))
    if not synthesis_jobs(config):
        kinds = set().union(*(SYNTHESIZERS[name].budget_kinds for name in config.synthesizers))
        others = [name for name, cls in SYNTHESIZERS.items() if cls.budget_kinds - kinds]
        how = " or ".join(BUDGET_FLAGS[k] for k in sorted(kinds))
        raise InputError(f"no release to make: {', '.join(config.synthesizers)} take {' or '.join(sorted(kinds))} "
                         f"budgets only and none is set; {how}" + (f", or choose synthesizers that take the others "
                                                                    f"({', '.join(others)})" if others else ""))
    check_mu_ceiling(config)
    needs_bounds = [s for s in config.synthesizers if create_synthesizer(s, config).needs_bounds()]
    if needs_bounds:
        try:
            TableCodec.from_spec(spec, list(spec.bounds()))
        except ValueError as err:
            raise InputError(f"{spec.name}: {err} (needed by {', '.join(needs_bounds)})") from None
    marginal = [s for s in config.synthesizers if create_synthesizer(s, config).needs_baselines]
    if marginal and not marginal_available():
        raise InputError(f"{', '.join(marginal)} need private-pgm (mbi >= 2), a dependency of privehr: reinstall "
                         "privehr (pip install -e .), or choose synthesizers: [maf]")


def check_mu_ceiling(config: SynthesisConfig) -> None:
    """A mu-GDP budget whose epsilon at ``privacy.delta`` (mu-GDP's own conversion) is above the ceiling is refused
    now, before the patient count is spent; the budget check refuses it again from the release's plan."""
    privacy = config.privacy
    mus = sorted({job["budget"]["value"] for job in synthesis_jobs(config) if job["budget"]["kind"] == "mu"})
    over = [m for m in mus if gdp_epsilon(m, privacy.delta) > privacy.epsilon_ceiling]
    if over and not privacy.allow_above_ceiling:
        raise InputError(f"synthesis mu {max(over):g} is epsilon {gdp_epsilon(max(over), privacy.delta):.3g} at delta "
                         f"{privacy.delta:g}, above privacy.epsilon_ceiling {privacy.epsilon_ceiling:g} (a release there "
                         "protects almost no one); lower mus, or set privacy.allow_above_ceiling: true to make it "
                         "anyway (labelled weak)")


def check_synthesis_table(config: SynthesisConfig) -> None:
    """Before Prefect starts and before any run directory exists: the ledger's chain (a tampered ledger is named
    now, not after imputation), the table read through its spec (layout, encoding, separator, a quarantine that
    empties or guts it) and a classification target with a single class among its records. Reads, writes nothing
    (the ledger's writability is probed by an entry made and removed at once)."""
    ledger = Ledger(config.privacy.ledger_path)
    ledger.state()
    ledger.probe_writable()  # an unwritable ledger is named before Prefect starts
    spec = load_ehr_spec(config.spec)
    frame = read_ehr_table(config.path, spec).frame
    label = config.targets(spec)[0]
    if label is not None and label in frame and frame[label].dropna().nunique() < 2:
        raise InputError(f"{spec.name}: the classification target {label!r} has one class among the {len(frame)} "
                         "kept records, so no classifier can be trained or scored; nothing was spent. Fix: name "
                         "another target (--classification-target, or the spec's targets), or none for a "
                         "fidelity-only report")


def check_imputed_targets(run_dir: str | Path, config: SynthesisConfig) -> None:
    """Refuse, before the budget check, targets the utility report cannot use: one dropped by the missingness rule,
    or a classification target with one class among the training or the test patients (its TSTR would be nan).
    Counts only: which class is never said."""
    spec = load_ehr_spec(config.spec)
    label, target, _ = config.targets(spec)
    fix = ("Fix: name another target (--classification-target / --regression-target, or the spec's targets), or "
           "none for a fidelity-only report")
    for i in range(config.mice.m):
        train, test, _ = imputed_tables(run_dir, i)
        for role, name in (("classification", label), ("regression", target)):
            if name is not None and name not in train:
                raise InputError(f"{spec.name}: the {role} target {name!r} was dropped before synthesis (missing in "
                                 f"too many records, or every value quarantined); nothing was spent. {fix}")
        if label is None:
            continue
        for part, rows in (("training", train), ("test", test)):
            classes = rows[label].dropna().astype(float).round().clip(0, 1).nunique()
            if classes < 2:
                raise InputError(f"{spec.name}: the classification target {label!r} has one class among the "
                                 f"{len(rows)} {part} patients (imputation {i}), so no classifier can be trained or "
                                 f"scored; nothing was spent. {fix}")


def _finite(raw: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(raw table without its non-finite rows, rows dropped)."""
    finite = np.isfinite(raw.to_numpy(float)).all(axis=1)
    return raw[finite].reset_index(drop=True), int((~finite).sum())


def delivered_tables(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test) patients of the split as delivered, missing values kept (written by the ``impute`` task)."""
    folder = RunLayout(run_dir).split_tables
    return tuple(pd.read_csv(folder / f"{part}.csv", index_col=0) for part in ("train", "test"))


def _post_imputed(frame: pd.DataFrame, bounds: dict | None, seed: int, max_iter: int,
                  fill: dict[str, float]) -> pd.DataFrame:
    """One MICE imputation fitted on the synthetic table itself (post-processing of the release). A column the
    synthetic table never observed (the release learned it as always missing) has nothing to impute from: it gets
    its public placeholder ``fill``, so the table stays usable, and its ``-missing`` twin shows it empty."""
    observed = [c for c in frame if frame[c].notna().any()]
    out = frame.copy()
    if observed and frame[observed].isna().any().any():
        bounds = None if bounds is None else {c: b for c, b in bounds.items() if c in observed}
        (imputed,) = MICEImputer(m=1, max_iter=max_iter, seed=seed, bounds=bounds).fit_transform(frame[observed])
        out[observed] = imputed.to_numpy()
    for c in frame.columns.difference(observed):
        out[c] = fill[c]
    return out


def _tables(table: pd.DataFrame, decoder: TableCodec, spec, attributes: list[str], in_release: bool, seed: int,
            max_iter: int) -> dict:
    """The files of one synthetic table: ``raw`` (the synthesizer's values, frame units, untruncated), ``truncated``
    (decoded to the spec's types and bounds, with its categories) and, with missingness in the release,
    ``missing`` (decoded, its indicators turned back into missing values). With missingness in the release the raw
    and truncated tables are completed by :func:`_post_imputed`; "dropped" counts the non-finite rows left out. A
    table left with no row has only "dropped"."""
    raw, dropped = _finite(table)
    if raw.empty:  # every sampled row non-finite (or none sampled): no table to write, score or bundle
        return {"dropped": dropped}
    if not in_release:
        return {"raw": raw, "truncated": decoder.labels(decoder.decode(raw)), "dropped": dropped}
    codec = TableCodec.from_spec(spec, attributes, require_bounds=False)
    bounds = {a: spec.bounds()[a].code_range() for a in attributes}
    missing = restore_missing(decoder.decode(raw), attributes)
    fill = {a: placeholder(spec.bounds()[a]) for a in attributes}
    return {"raw": _post_imputed(restore_missing(raw, attributes), None, seed, max_iter, fill),
            "truncated": codec.labels(codec.decode(_post_imputed(missing, bounds, seed, max_iter, fill))),
            "missing": codec.labels(missing), "dropped": dropped}


def empty_note(job_id: str, empty: list[int], tables: int, epsilon: float | None, guarantee: str) -> str:
    """The one line that says a release (or some of its tables) ended with no rows: spent all the same (its ledger
    entry was written when it was trained), neither scored nor bundled. Counts and the release's cost only."""
    cost = f"epsilon {epsilon:.3g}" if epsilon is not None else "budget" if guarantee == "dp" else None
    if len(empty) == tables:
        spent = f"its {cost} is spent (recorded in the privacy ledger)" if cost else \
            "recorded in the privacy ledger (not DP: no budget spent)"
        return f"{job_id} ended with no rows (every sampled row non-finite): {spent}; it is neither scored nor in " \
               "the bundle"
    spent = f"the release's {cost} is spent (recorded in the privacy ledger)" if cost else \
        "the release is recorded in the privacy ledger (not DP: no budget spent)"
    return (f"{job_id}: synthetic table(s) {', '.join(f'r{k}' for k in empty)} of {tables} ended with no rows (every "
            f"sampled row non-finite): {spent}; those tables are neither scored nor in the bundle")


def synthesizer_of(config: SynthesisConfig, job: dict, device: str = "cpu") -> SynthesisMethod:
    """The job's synthesizer, configured by the run's settings."""
    return create_synthesizer(job.get("synthesizer", "maf"), config, device, progress_artifact)


def _missing_record(mode: str) -> dict:
    """How the release handled missing values, and whether that is inside its guarantee."""
    if mode == "in_release":
        return {"mode": mode, "inside_guarantee": True,
                "how": "a 0/1 missingness column per attribute learned by the synthesizer, missing values replaced by "
                       "a public placeholder; the synthetic tables imputed by MICE fitted on themselves "
                       "(post-processing)"}
    return {"mode": mode, "inside_guarantee": False,
            "how": "MICE fitted on all training patients before the synthesizer (Su et al. 2023's order): one "
                   "patient's values move every other patient's imputations, so the release is not DP end to end"}


@task(name="synthesize")
def synthesize(run_dir: str, job: dict, config: SynthesisConfig, reserved: Reserved | None,
               device: str = "auto") -> str:
    """Fit one synthesizer (a flow, or a marginal baseline) by the plan the budget check reserved, record it in the
    privacy ledger under that reservation, sample ``config.releases`` synthetic tables; return the release
    record's path."""
    run = RunLayout(run_dir)
    path = run.release(job["job_id"])
    if config.resume and path.exists():  # written last: the model and its tables are complete (and recorded)
        run_logger().info("synthesize %s: done by an earlier attempt of this run", job["job_id"])
        return str(path)
    if reserved is None:
        raise RuntimeError(f"synthesize {job['job_id']}: no reservation from the budget check")
    share_cores()
    spec = load_ehr_spec(config.spec)
    train, test, summary = imputed_tables(run_dir, job["imputation"])
    attributes, fit_spec, in_release = summary.attributes, spec, config.missing == "in_release"
    if in_release:  # the table as delivered: every attribute of the spec and its missingness, learned in the release
        attributes = [a.name for a in spec.attributes]
        train, test = (with_indicators(part, spec, attributes) for part in delivered_tables(run_dir))
        fit_spec = missingness_spec(spec, attributes)
    fit_attributes = attributes + (indicator_names(attributes) if in_release else [])
    synthesizer = job.get("synthesizer", "maf")
    method = synthesizer_of(config, job, device)
    budget = Budget(**job["budget"])
    codec = TableCodec.from_spec(fit_spec, fit_attributes) if method.needs_bounds() else None
    data = SynthesisData(train, test, fit_attributes, fit_spec, synthetic_rows(run_dir, config, spec, summary),
                         _seed(job))
    done = method.fit(job, data, reserved.plan,
                      NoiseSource.for_release(config.privacy.reproducible_noise, job["job_id"]))
    flow = None
    if done.state_:  # the flow's file is serialised first: its release binds the file's sha256
        buffer = io.BytesIO()
        torch.save(done.state_["flow"], buffer)
        flow = buffer.getvalue()
    entry = done.entry if flow is None else replace(done.entry, sha256=hashlib.sha256(flow).hexdigest())
    ledger_release = record_release(config.privacy.ledger_path, reserved.reservation,  # at once: before anything
                                    entry).release                                     # is saved
    if done.state_:  # the flow and its loss curve (a statistic of private batches): with the patient-level files
        run.flows.mkdir(parents=True, exist_ok=True)
        (run.flows / f"{job['job_id']}.pt").write_bytes(flow)  # the bytes its release bound
        (run.flows / f"{job['job_id']}.history.json").write_text(json.dumps(done.state_["history"]))
        done.extra["flow"] = str(run.flows / f"{job['job_id']}.pt")
    rows = data.rows
    guarantee, scaling_record, release_dict = done.guarantee, done.scaling, done.release
    if spec.drafted_from_data:  # the bounds and categories were read from the patients: the scaling is private
        scaling_record = {**scaling_record, "inside_guarantee": False, "drafted_from_data": True}
    # everything in it is covered by DP: the noise, the scaling and the handling of missing values
    releasable = guarantee == "dp" and scaling_record["inside_guarantee"] and in_release
    out_dir = run.synthetic(releasable)
    for folder in (out_dir, run.releases):
        folder.mkdir(parents=True, exist_ok=True)
    decoder = codec or TableCodec.from_spec(fit_spec, fit_attributes, require_bounds=False)
    files, with_missing, nonfinite, empty = [], [], 0, []
    for k, table in enumerate(done.tables):
        parts = _tables(table, decoder, spec, attributes, in_release, (data.seed + k) % 2 ** 20, config.mice.max_iter)
        nonfinite += parts.pop("dropped")
        if not parts:  # no row left: no file, so it is neither scored nor bundled (the release stays spent)
            empty.append(k)
            continue
        for kind, part in parts.items():
            name = f"{job['job_id']}-r{k}-{kind}.csv"
            # data, not a spreadsheet: read back by the evaluation and by a partner's code, category labels as the
            # spec names them, so written byte-faithful (no formula escaping: privehr.io.spreadsheet); the bundle
            # warns where a spec's names or labels would start a formula in a spreadsheet
            add_derived(part, spec.derived).to_csv(out_dir / name, index=False)
            if kind == "missing":
                with_missing.append({"release": k, "path": str(out_dir / name)})
            else:
                files.append({"release": k, "truncated": kind == "truncated", "path": str(out_dir / name)})
    record = {"job": job, "synthesizer": synthesizer, "budget_label": budget.label, **release_dict,
              "guarantee": guarantee_label(guarantee, release_dict.get("epsilon"), config.privacy.epsilon_ceiling),
              **({"patients_delivered": summary.decisions["records_read"]} if spec.public_patient_count else {}),
              "rows_per_table": rows, "test_log_likelihood": done.held_out,
              "nonfinite_rows_dropped": nonfinite, "scaling": scaling_record, "releasable": releasable,
              "missing": _missing_record(config.missing), "files": files, "with_missing": with_missing,
              "empty_tables": empty,
              "empty_note": empty_note(job["job_id"], empty, len(done.tables), release_dict.get("epsilon"),
                                       guarantee) if empty else None,
              **done.extra, "model": done.model, "ledger_release": ledger_release}
    path.write_text(strict_dumps(record, indent=2, default=float))
    if empty:  # said once, as it happens; the report and the command's summary repeat it
        run_logger().warning("synthesize %s", record["empty_note"])
    run_logger().info("synthesize %s: %s %s (%s), epsilon %s; %d tables (%d non-finite rows dropped)",
                      job["job_id"], synthesizer, release_dict["mechanism"],
                      guarantee_label(guarantee, release_dict.get("epsilon"), config.privacy.epsilon_ceiling),
                      release_dict.get("epsilon"), len(done.tables) - len(empty), nonfinite)
    return str(path)
