"""Report: DP-HFlow vs the MAF (DP-NF) vs AIM vs MST, and any registered synthesizer, on real clinical tables.

Side by side, under one preprocessing for every method.

    python bench/mixed_type_synthesis.py [--tables whas500 gbsg2 aids veterans_lung_cancer flchain breast_cancer]
                                         [--epsilons 1 4] [--runs 5] [--first-run 0]
                                         [--synthesizers hflow maf aim aim_paper mst] [--jobs 1]
                                         [--data-dir bench/data] [--pgm-checkout PATH]
                                         [--out bench/results/mixed_type_synthesis.json]
    python bench/mixed_type_synthesis.py --only-summary A.json.partial.jsonl B.json.partial.jsonl [--out merged.json]

Tables, as bundled in scikit-survival (``pip install scikit-survival``: a bench need, not a runtime one), or as
written by ``bench/export_sksurv_tables.py`` (CSV + spec YAML) into ``--data-dir`` for a machine without it:

* **whas500** (Worcester Heart Attack Study, 500 patients, 16 columns: 9 binary, 2 integer, 5 numeric; target
  fstat) and **gbsg2** (German Breast Cancer Study Group 2, 686 patients, 10 columns: 3 binary, 1 ordinal, 6
  integer; target cens): the two tables DP-HFlow's defaults were TUNED on (``TUNING_TABLES``; ``tuned_on: true``
  in every row, summary row and ``table_info``; left out of the verdict). Their numbers are not evidence about
  other tables.
* **aids** (ACTG 320, Hammer et al. 1997; ``load_aids``, endpoint AIDS-defining event; 1,151 patients, 12 columns;
  target censor). ``txgrp`` is left out: its two d4T arms hold 3 patients, and merged into their IDV arms it
  equals ``tx``. Rare categories merged by the spec author (under ~1 % of the patients in the published data
  set): ivdrug 2 (current use, 4 patients) with 3 (previous use) as ``ever``; raceth 4 (Asian / Pacific
  Islander, 14) and 5 (American Indian / Alaska Native, 11) as ``other``. priorzdv (months of prior zidovudine)
  is bounded by 144 months (ZDV was first given in trials in 1985, ACTG 320 enrolled in 1996-97): 7 larger values
  are quarantined by the reader and their patients dropped (see below).
* **veterans_lung_cancer** (VA lung cancer trial, Kalbfleisch & Prentice; 137 patients, 8 columns; target
  Status). Karnofsky_score is declared on its published scale, steps of 10 (``step: 10``): the reader
  quarantines the 4 scores off the scale (75, 85, 99) and those patients are dropped. 93 % of the patients
  died: a test split holds 2 or 3 survivors, so this table's TSTR numbers are mostly noise.
* **flchain** (serum free light chains, Dispenzieri et al. 2012; 7,874 people, 10 columns + 1 indicator;
  target death). ``chapter`` (the cause of death, present exactly for those who died: it would leak the target)
  is left out. creatinine is missing for 1,350 people; the reader keeps them (a missing value is not
  quarantined), so they stay, handled as privehr's synthesis does by default (``synthesis.missing:
  in_release``): the missing value becomes the public placeholder (the centre of the bounds, on the step) and a
  binary ``creatinine__missing`` column joins the table; every synthesizer and every metric sees that table.
  Bounds as ``bench/synthesis_membership.py``'s spec; creatinine with its recorded step 0.1 mg/dL, flc.grp (the
  decile of total free light chain) ordinal.
* **breast_cancer** (TRANSBIG validation series, Desmedt et al. 2007, GEO GSE7390; 198 patients; target e.tdm):
  its clinical columns only (age, size, er, grade, t.tdm, e.tdm); the 76 gene-expression columns are left out
  (not a mixed-type clinical table). grade ``unkown`` (2 patients) is not a category: quarantined, dropped.

Each spec is written by hand below (``SPECS``), with bounds from public clinical ranges (never the table's
minimum or maximum; each attribute's ``source`` names the fact), columns recorded in steps declared with
``step``, and read through privehr's table reader (kinds, categories, quarantine). A patient with a quarantined
cell is dropped (the reader masks the cell; the bench does not invent a value for it); records the reader removes
whole (duplicates) stay removed; a table's ``preprocessing`` block counts both. A value missing in the
delivery is kept, as above, only in the columns a spec declares (``missing``); any other stops the bench.

Each run r (``--first-run`` .. + ``--runs``): a 75/25 split by patient (seeded by r: no privacy claim depends
on it), then on the 75 % of training patients at each (epsilon, delta = 1e-5), each synthesizer samples as many
rows as training patients. Every method sees the same training rows, the same spec, the same bins
(``SynthesisConfig().marginal.bins`` for every marginal method) and the same decoding (:class:`TableCodec`):

* any synthesizer registered in ``privehr.models.synthesis`` (``hflow``, ``maf``, ``aim``, ``mst``, and whatever
  else is registered there), with privehr's defaults (``SynthesisConfig()``), through ``create_synthesizer(kind,
  config, "cpu")``, ``plan`` and ``fit`` as the synthesis task runs it (:func:`fit_flow`), then ``codec.decode``;
* ``aim_paper``: AIM at its paper's settings (rounds = 16 d, max_model_size 80; ``synthesize_marginal`` on the
  same discretised codes and domain, then ``codec.undiscretise`` with the same public within-bin seed);
* with ``--pgm-checkout PATH``: ``aim_ref`` and ``mst_ref``, the reference private-pgm mechanisms
  (``bench/reference_pgm.py``'s ``run_reference``, imported only then) on the same codes and domain, decoded the
  same way.

Metrics against the real training patients (Lee et al. 2022's report, plus marginal workload errors): TSTR with
the nine-classifier panel (mean AUROC, macro-F1, average precision; tested on the 25 %), Kendall-tau matrix RMSE
and MAE, mean TV of discrete columns, mean KS of numeric ones, the share of invalid values before decoding, and
``tv2_mean`` / ``tv3_mean``: the mean total variation distance over all 2-way and 3-way marginals of the real
and the synthetic rows discretised by the same ``codec.discretise(frame, bins)``
(:mod:`privehr.models.evaluation.marginal_workload`; a fixed-seed sample of 2,000 subsets where there are more,
recorded in ``workload``). Train-on-real: the same panel fitted on the training patients, and
``holdout_tv2_mean`` / ``holdout_tv3_mean``, the same workload errors of the real test patients against the
training patients: how much of a tv2/tv3 is sampling noise on a small table with fine integer domains (a test
split has a third of a synthetic table's rows, so its floor sits above a synthetic table's). Seconds per fit
(synthesize and decode), one thread per process.

``--jobs N`` runs the cells (table, run, epsilon, synthesizer, and train-on-real per table and run) in N
"spawn" worker processes, one thread each (OMP/MKL/OpenBLAS and JAX set before numpy, torch and jax load);
the rows are the same as a serial run's, sorted the same way. Every finished cell is appended to
``<out>.partial.jsonl`` at once, so a run cut off still leaves its numbers; ``--only-summary FILE...`` rebuilds
the document from such files (several machines, e.g. one per ``--first-run``), a repeated cell counted once.

Summary per (table, synthesizer, epsilon): mean and SD (over runs) of every metric, n, tuned_on. ``verdict``:
for each table not tuned on and each epsilon, each synthesizer against ``aim`` (privehr's AIM) on tstr_auroc
(higher is better), tau_rmse, tv_mean, tv2_mean and ks_mean (lower is better): ``ok`` where it is better, or
worse by at most one SD of ``aim``'s runs (with one run: no worse at all). Prints one JSON document (also
written to ``--out``).
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS")
if __name__ in ("__main__", "__mp_main__"):  # the script and its spawned workers: one thread each, set before
    for _variable in THREAD_VARIABLES:         # numpy, torch and jax load (not when another bench imports it)
        os.environ[_variable] = "1"
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import pkgutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from privehr.models.synthesis.codec import TableCodec  # noqa: E402
from privehr.models.synthesis.marginal import marginal_available, synthesize_marginal  # noqa: E402
from privehr.models.synthesis.missingness import indicator, placeholder  # noqa: E402
from privehr.models.evaluation.marginal_workload import (MAX_SUBSETS, kway_subsets,  # noqa: E402
                                                        marginal_workload_summary)
from privehr.models.evaluation.mixed_fidelity import mixed_fidelity_summary  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.evaluation.tstr_panel import tstr, tstr_summary  # noqa: E402
from privehr.core.config import SynthesisConfig  # noqa: E402
from privehr.core.specs import VariableBounds, load_ehr_spec  # noqa: E402
from privehr.io.ehr_table import ID, read_ehr_table  # noqa: E402
from privehr.models.synthesis import SYNTHESIZERS, SynthesisData, create_synthesizer  # noqa: E402

TUNING_TABLES = ("whas500", "gbsg2")  # DP-HFlow's defaults were chosen on these two
BENCH_VARIANTS = ("aim_paper",)       # bench-only synthesizers (not in the registry)
REFERENCE_VARIANTS = ("aim_ref", "mst_ref")  # with --pgm-checkout: bench/reference_pgm.py's run_reference
DEFAULT_SYNTHESIZERS = ("hflow", "maf", "aim", "aim_paper", "mst")
BASELINE = "aim"
VERDICT_METRICS = {"tstr_auroc": "higher", "tau_rmse": "lower", "tv_mean": "lower", "tv2_mean": "lower",
                   "ks_mean": "lower"}
METRICS = ("tstr_auroc", "tstr_macro_f1", "tstr_average_precision", "tau_rmse", "tau_mae", "tv_mean", "ks_mean",
           "tv2_mean", "tv3_mean", "invalid_share_raw", "holdout_tv2_mean", "holdout_tv3_mean", "seconds")

B = "binary"
KARNOFSKY = "Karnofsky performance scale, 0-100 in steps of 10 (Karnofsky & Burchenal 1949)"
ADULT_AGE = "adult age in years"
SPECS = {  # bounds: public clinical ranges, wide enough for any adult patient (not the tables' extremes)
    "whas500": {"loader": "load_whas500", "event": "fstat", "time": "lenfol", "target": "fstat", "attributes": [
        {"name": "afb", "kind": B}, {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110},
        {"name": "av3", "kind": B}, {"name": "bmi", "kind": "numeric", "valid_low": 10, "valid_high": 60},
        {"name": "chf", "kind": B}, {"name": "cvd", "kind": B},
        {"name": "diasbp", "kind": "numeric", "valid_low": 0, "valid_high": 200}, {"name": "gender", "kind": B},
        {"name": "hr", "kind": "numeric", "valid_low": 20, "valid_high": 250},
        {"name": "los", "kind": "integer", "valid_low": 0, "valid_high": 60}, {"name": "miord", "kind": B},
        {"name": "mitype", "kind": B}, {"name": "sho", "kind": B},
        {"name": "sysbp", "kind": "numeric", "valid_low": 40, "valid_high": 300},
        {"name": "lenfol", "kind": "integer", "valid_low": 0, "valid_high": 2500}, {"name": "fstat", "kind": B}]},
    "gbsg2": {"loader": "load_gbsg2", "event": "cens", "time": "time", "target": "cens", "attributes": [
        {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 100},
        {"name": "estrec", "kind": "integer", "valid_low": 0, "valid_high": 1500},
        {"name": "horTh", "kind": B, "categories": ["no", "yes"]},
        {"name": "menostat", "kind": B, "categories": ["Pre", "Post"]},
        {"name": "pnodes", "kind": "integer", "valid_low": 0, "valid_high": 60},
        {"name": "progrec", "kind": "integer", "valid_low": 0, "valid_high": 2500},
        {"name": "tgrade", "kind": "ordinal", "categories": ["I", "II", "III"]},
        {"name": "tsize", "kind": "integer", "valid_low": 0, "valid_high": 150},
        {"name": "time", "kind": "integer", "valid_low": 0, "valid_high": 3000}, {"name": "cens", "kind": B}]},
    "aids": {
        "loader": "load_aids", "event": "censor", "time": "time", "target": "censor", "left_out": ["txgrp"],
        "merge": {"ivdrug": {"1": "never", "2": "ever", "3": "ever"},
                  "raceth": {"1": "white", "2": "black", "3": "hispanic", "4": "other", "5": "other", "6": "other"},
                  "sex": {"1": "male", "2": "female"}},
        "description": "ACTG 320 (Hammer et al. 1997, NEJM 337:725), endpoint AIDS-defining event or death. txgrp "
                       "left out (its d4T arms, 3 patients, merged into their IDV arms equal tx); ivdrug 2 "
                       "(current, 4 patients) merged with 3 (previous) as ever; raceth 4 and 5 (14 and 11 "
                       "patients) merged as other",
        "attributes": [
            {"name": "age", "kind": "integer", "valid_low": 13, "valid_high": 110, "unit": "years",
             "source": "adolescents and adults (13+: CDC's adult/adolescent HIV classification)"},
            {"name": "cd4", "kind": "numeric", "valid_low": 0, "valid_high": 1000, "unit": "cells/uL",
             "source": "ACTG 320 enrolled CD4 <= 200/uL; 1000 is well inside the normal adult range (500-1500)"},
            {"name": "hemophil", "kind": B, "categories": ["0", "1"], "description": "hemophiliac"},
            {"name": "ivdrug", "kind": B, "categories": ["never", "ever"], "description": "IV drug use"},
            {"name": "karnof", "kind": "integer", "valid_low": 0, "valid_high": 100, "step": 10, "source": KARNOFSKY},
            {"name": "priorzdv", "kind": "numeric", "valid_low": 0, "valid_high": 144, "unit": "months",
             "source": "prior zidovudine: first given in trials in 1985, ACTG 320 enrolled 1996-97 (<= 12 years)"},
            {"name": "raceth", "kind": "categorical", "categories": ["white", "black", "hispanic", "other"]},
            {"name": "sex", "kind": B, "categories": ["male", "female"]},
            {"name": "strat2", "kind": B, "categories": ["0", "1"], "description": "CD4 stratum at screening > 50"},
            {"name": "tx", "kind": B, "categories": ["0", "1"], "description": "arm includes indinavir"},
            {"name": "time", "kind": "integer", "valid_low": 0, "valid_high": 500, "unit": "days",
             "source": "ACTG 320 ran January 1996 - February 1997 (about 400 days)"},
            {"name": "censor", "kind": B}]},
    "veterans_lung_cancer": {
        "loader": "load_veterans_lung_cancer", "event": "Status", "time": "Survival_in_days", "target": "Status",
        "description": "Veterans' Administration lung cancer trial (Kalbfleisch & Prentice 2002). Karnofsky scores "
                       "off the scale's steps of 10 are quarantined by the reader",
        "attributes": [
            {"name": "Age_in_years", "kind": "integer", "valid_low": 18, "valid_high": 110, "source": ADULT_AGE},
            {"name": "Celltype", "kind": "categorical", "categories": ["squamous", "smallcell", "adeno", "large"]},
            {"name": "Karnofsky_score", "kind": "integer", "valid_low": 0, "valid_high": 100, "step": 10,
             "source": KARNOFSKY},
            {"name": "Months_from_Diagnosis", "kind": "integer", "valid_low": 0, "valid_high": 120,
             "source": "months from diagnosis to randomisation, at most 10 years"},
            {"name": "Prior_therapy", "kind": B, "categories": ["no", "yes"]},
            {"name": "Treatment", "kind": B, "categories": ["standard", "test"]},
            {"name": "Survival_in_days", "kind": "integer", "valid_low": 0, "valid_high": 2500,
             "source": "follow-up of a trial of a few years"},
            {"name": "Status", "kind": B}]},
    "flchain": {
        "loader": "load_flchain", "event": "death", "time": "futime", "target": "death", "left_out": ["chapter"],
        "missing": ["creatinine"],
        "description": "Serum free light chains and mortality, Olmsted County (Dispenzieri et al. 2012). chapter "
                       "(cause of death, present exactly for those who died) left out; creatinine may be missing",
        "attributes": [
            {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110, "source": ADULT_AGE},
            {"name": "sex", "kind": B, "categories": ["F", "M"]},
            {"name": "sample.yr", "kind": "integer", "valid_low": 1990, "valid_high": 2010,
             "source": "samples of the 1990s-2000s"},
            {"name": "kappa", "kind": "numeric", "valid_low": 0, "valid_high": 200, "unit": "mg/dL",
             "source": "serum free kappa, reference 0.33-1.94 mg/dL (Katzmann 2002); myeloma reaches 100s"},
            {"name": "lambda", "kind": "numeric", "valid_low": 0, "valid_high": 200, "unit": "mg/dL",
             "source": "serum free lambda, reference 0.57-2.63 mg/dL (Katzmann 2002); myeloma reaches 100s"},
            {"name": "flc.grp", "kind": "ordinal", "categories": [str(k) for k in range(1, 11)],
             "description": "decile group of total free light chain"},
            {"name": "creatinine", "kind": "numeric", "valid_low": 0.1, "valid_high": 20, "step": 0.1,
             "unit": "mg/dL", "source": "serum creatinine, recorded to 0.1 mg/dL; 20 covers renal failure"},
            {"name": "mgus", "kind": B, "categories": ["no", "yes"]},
            {"name": "futime", "kind": "integer", "valid_low": 0, "valid_high": 10000, "unit": "days"},
            {"name": "death", "kind": B}]},
    "breast_cancer": {
        "loader": "load_breast_cancer", "event": "e.tdm", "time": "t.tdm", "target": "e.tdm",
        "description": "TRANSBIG validation series (Desmedt et al. 2007, GSE7390), clinical columns only (the 76 "
                       "gene-expression columns left out); endpoint distant metastasis",
        "attributes": [
            {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110, "source": ADULT_AGE},
            {"name": "size", "kind": "numeric", "valid_low": 0, "valid_high": 20, "step": 0.1, "unit": "cm",
             "source": "tumour diameter, recorded to 0.1 cm"},
            {"name": "er", "kind": B, "categories": ["negative", "positive"]},
            {"name": "grade", "kind": "ordinal",
             "categories": ["well differentiated", "intermediate", "poorly differentiated"]},
            {"name": "t.tdm", "kind": "integer", "valid_low": 0, "valid_high": 11000, "unit": "days",
             "source": "follow-up of up to 30 years"},
            {"name": "e.tdm", "kind": B}]},
}


# -- tables ---------------------------------------------------------------------------------------------------------
def _sksurv_frame(name: str) -> pd.DataFrame:
    """The bundled table as the spec's columns: features, the time and the 0/1 event, rare categories merged."""
    try:
        import sksurv.datasets as datasets
    except ImportError as error:
        raise SystemExit(f"{name}: scikit-survival is not installed (pip install scikit-survival), or pass "
                         f"--data-dir with tables written by bench/export_sksurv_tables.py ({error})") from None
    entry = SPECS[name]
    x, y = getattr(datasets, entry["loader"])()
    frame = pd.DataFrame(x).copy()
    frame[entry["time"]], frame[entry["event"]] = y[entry["time"]], y[entry["event"]].astype(int)
    for column in frame.columns:  # categories as their file tokens (text), missing stays missing
        if isinstance(frame[column].dtype, pd.CategoricalDtype) or frame[column].dtype == object:
            frame[column] = pd.Series([None if pd.isna(v) else str(v) for v in frame[column]], index=frame.index,
                                      dtype=object)
    for column, mapping in entry.get("merge", {}).items():
        frame[column] = [None if v is None else mapping.get(v, v) for v in frame[column]]
    return frame[[a["name"] for a in entry["attributes"]]]


def export_table(name: str, folder: Path) -> dict:
    """Write ``<name>.csv`` (the spec's columns, missing values empty) and ``<name>.yaml`` (the hand-written spec)
    into ``folder``; return what was written."""
    entry = SPECS[name]
    folder.mkdir(parents=True, exist_ok=True)
    frame = _sksurv_frame(name)
    frame.to_csv(folder / f"{name}.csv", index=False)
    spec = {"name": name, "description": entry.get("description", ""), "public_patient_count": True,
            "attributes": entry["attributes"], "targets": {"classification": entry["target"]}}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return {"table": name, "rows": len(frame), "columns": len(frame.columns), "csv": str(folder / f"{name}.csv"),
            "spec": str(folder / f"{name}.yaml")}


def load_table(name: str, folder: Path) -> dict:
    """The table read back through its spec: {spec (with the indicators of declared missing columns), frame
    (complete: frame units, the training rows' view for every synthesizer), target, preprocessing}."""
    csv, spec_path = folder / f"{name}.csv", folder / f"{name}.yaml"
    if not csv.exists() or not spec_path.exists():
        raise SystemExit(f"{name}: {csv} or {spec_path} is missing; write them with "
                         f"python bench/export_sksurv_tables.py --out-dir {folder}")
    spec = load_ehr_spec(spec_path)
    table = read_ehr_table(csv, spec)
    masked = table.quarantine[table.quarantine["column"] != ""]
    frame = table.frame[~table.frame.index.isin(set(masked[ID]))]
    declared = SPECS[name].get("missing", [])
    undeclared = [c for c in frame.columns if frame[c].isna().any() and c not in declared]
    if undeclared:
        raise SystemExit(f"{name}: missing values in {undeclared}, which the bench spec does not declare missing")
    bounds = spec.bounds()
    flagged = [c for c in declared if c in frame.columns]
    frame = frame.copy()
    for column in flagged:  # privehr's in-release missingness: a public placeholder and a 0/1 indicator
        missing = frame[column].isna()
        frame[column] = frame[column].fillna(placeholder(bounds[column]))
        frame[indicator(column)] = missing.astype(float)
    if flagged:
        flags = [VariableBounds(name=indicator(c), kind="binary", description=f"{c} is missing") for c in flagged]
        spec = spec.model_copy(update={"attributes": list(spec.attributes) + flags})
    whole = table.quarantine[table.quarantine["column"] == ""]
    preprocessing = {
        "records_read": table.decisions["records_read"], "records_removed_by_reader": int(whole[ID].nunique()),
        "records_dropped_for_quarantined_cells": int(masked[ID].nunique()),
        "quarantined_cells": {column: group["reason"].value_counts().to_dict()
                              for column, group in masked.groupby("column")},
        "rows": len(frame), "columns": len(frame.columns),
        "missing_indicators": {indicator(c): int(frame[indicator(c)].sum()) for c in flagged},
        "left_out": SPECS[name].get("left_out", []), "merged": SPECS[name].get("merge", {})}
    return {"name": name, "spec": spec, "frame": frame.reset_index(drop=True), "target": SPECS[name]["target"],
            "tuned_on": name in TUNING_TABLES, "preprocessing": preprocessing}


def load_tables(names: list[str], data_dir: Path | None = None) -> dict:
    """The named tables, read from ``data_dir`` (written by bench/export_sksurv_tables.py) or exported from
    scikit-survival into a scratch folder first."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = data_dir
        if folder is None:
            folder = Path(scratch)
            for name in names:
                export_table(name, folder)
        return {name: load_table(name, folder) for name in names}


def _split(frame: pd.DataFrame, run: int):
    order = np.random.default_rng(run).permutation(len(frame))
    cut = int(round(0.75 * len(frame)))
    return frame.iloc[order[:cut]], frame.iloc[order[cut:]]


# -- synthesizers -----------------------------------------------------------------------------------------------------
def registered_synthesizers(quiet: bool = False) -> list[str]:
    """Every synthesizer registered in privehr.models.synthesis (each module of the package imported, so one added
    there registers without an edit here)."""
    import privehr.models.synthesis as package

    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except Exception as error:  # noqa: BLE001 - an optional dependency missing: its synthesizer is absent
            if not quiet:
                print(f"note: {module.name} not imported ({error})", file=sys.stderr)
    return list(SYNTHESIZERS)


def fit_flow(kind, train, codec, spec, config, budget: dict, delta: float, seed: int) -> pd.DataFrame:
    """One registered synthesizer (a flow, or any other; ``budget``: an epsilon, mu or non_private budget) on the
    training rows, fitted by the synthesis task's own code (``create_synthesizer``, ``plan``, ``fit``); as many rows
    as training patients, its finite raw rows in frame units (also used by bench/synthesis_membership.py)."""
    job = {"job_id": f"{kind}-{budget['kind']}-seed{seed}", "synthesizer": kind, "budget": budget}
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"delta": delta}), "releases": 1})
    synthesizer = create_synthesizer(kind, config, "cpu")
    plan = synthesizer.plan(job, len(train))
    done = synthesizer.fit(job, SynthesisData(train, train, codec.names, spec, len(train), seed), plan,
                           NoiseSource.secret())
    raw = done.tables[0]
    return raw[np.isfinite(raw[codec.names].to_numpy(float)).all(axis=1)].reset_index(drop=True)


def _reference_module():
    """bench/reference_pgm.py, imported only when --pgm-checkout is given."""
    spec = importlib.util.spec_from_file_location("reference_pgm", ROOT / "bench" / "reference_pgm.py")
    if spec is None or not (ROOT / "bench" / "reference_pgm.py").exists():
        raise SystemExit("--pgm-checkout needs bench/reference_pgm.py (run_reference, reference_available)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _synthesize(kind, train, codec, spec, config, epsilon, delta, seed, checkout):
    """(raw, decoded) rows of one synthesizer at ``epsilon``; the same codes, bins and decoding for every method."""
    bins = config.marginal.bins
    if kind == "aim_paper" or kind in REFERENCE_VARIANTS:
        codes, domain = codec.discretise(train, bins), codec.domain(bins)
        if kind == "aim_paper":
            synthetic, _ = synthesize_marginal("aim", codes, domain, epsilon, delta, len(train),
                                               np.random.default_rng(), rounds=16 * len(domain),  # OS entropy
                                               max_model_size=80.0)
        else:
            synthetic = _reference_module().run_reference(kind.removesuffix("_ref"), codes, tuple(domain), epsilon,
                                                          delta, len(train), Path(checkout))
        decoded = codec.undiscretise(np.asarray(synthetic), bins, np.random.default_rng(seed))  # public seed
        return decoded, decoded
    raw = fit_flow(kind, train, codec, spec, config, {"kind": "epsilon", "value": epsilon}, delta, seed)
    return raw, codec.decode(raw)


# -- one cell ---------------------------------------------------------------------------------------------------------
def _evaluate(real_train, real_test, raw, decoded, spec, target, codec, bins):
    kinds = spec.kinds()
    codes = spec.codes()
    columns = list(real_train.columns)
    mixed = mixed_fidelity_summary(real_train[columns], decoded[columns], {c: kinds[c] for c in columns}, codes)
    invalid = mixed_fidelity_summary(real_train[columns], raw[columns], {c: kinds[c] for c in columns},
                                     codes)["invalid_share"]
    panel = tstr_summary(tstr(decoded[columns], real_test[columns], target, kinds, categories=codes))
    complete = decoded[columns].dropna()
    workload = marginal_workload_summary(codec.discretise(real_train[columns], bins),
                                         codec.discretise(complete, bins), codec.domain(bins))
    return {"tstr_auroc": panel["auroc"], "tstr_macro_f1": panel["macro_f1"],
            "tstr_average_precision": panel["average_precision"], "tau_rmse": mixed["tau_rmse"],
            "tau_mae": mixed["tau_mae"], "tv_mean": mixed["tv_mean"], "ks_mean": mixed["ks_mean"],
            "tv2_mean": workload["tv2_mean"], "tv3_mean": workload["tv3_mean"], "invalid_share_raw": invalid}


_TABLES: dict = {}
_OPTIONS: dict = {}


def _init_worker(tables: dict, options: dict) -> None:
    """A worker (or the serial run): one torch thread, every synthesizer registered, the tables and the options of
    every cell."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", module="mbi")
    registered_synthesizers(quiet=True)
    _TABLES.clear(), _TABLES.update(tables)
    _OPTIONS.clear(), _OPTIONS.update(options)


def run_cell(cell: tuple) -> dict:
    """One row: (table, run, None, "train on real") or (table, run, epsilon, synthesizer)."""
    name, run, epsilon, kind = cell
    table = _TABLES[name]
    spec, frame, target = table["spec"], table["frame"], table["target"]
    train, test = _split(frame, run)
    row = {"table": name, "tuned_on": table["tuned_on"], "synthesizer": kind, "epsilon": epsilon, "run": run}
    try:
        if kind == "train on real":
            real = tstr_summary(tstr(train, test, target, spec.kinds(), categories=spec.codes()))
            codec, bins = TableCodec.from_spec(spec, list(frame.columns)), SynthesisConfig().marginal.bins
            holdout = marginal_workload_summary(codec.discretise(train, bins), codec.discretise(test, bins),
                                                codec.domain(bins))  # the sampling-noise floor of a 25 % sample
            return row | {"tstr_auroc": real["auroc"], "tstr_macro_f1": real["macro_f1"],
                          "tstr_average_precision": real["average_precision"],
                          "holdout_tv2_mean": holdout["tv2_mean"], "holdout_tv3_mean": holdout["tv3_mean"],
                          "seconds": 0.0}
        config = SynthesisConfig()
        codec = TableCodec.from_spec(spec, list(frame.columns))
        t0 = time.perf_counter()
        raw, decoded = _synthesize(kind, train, codec, spec, config, epsilon, _OPTIONS["delta"], 1000 * run + 17,
                                   _OPTIONS.get("pgm_checkout"))
        seconds = time.perf_counter() - t0
        return row | _evaluate(train, test, raw, decoded, spec, target, codec, config.marginal.bins) | {
            "seconds": seconds, "synthetic_rows": len(decoded)}
    except Exception as error:  # noqa: BLE001 - one failing cell is recorded, the others go on
        return row | {"error": f"{type(error).__name__}: {error}"}


def _cell_key(row: dict, tables: list[str], synthesizers: list[str]) -> tuple:
    order = ["train on real", *synthesizers]
    return (tables.index(row["table"]) if row["table"] in tables else len(tables), row["table"], row["run"],
            -1.0 if row["epsilon"] is None else row["epsilon"],
            order.index(row["synthesizer"]) if row["synthesizer"] in order else len(order), row["synthesizer"])


# -- summary --------------------------------------------------------------------------------------------------------
def _number(value):
    return None if value is None or pd.isna(value) else round(float(value), 4)


def summarise(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(summary, verdict) of the rows without an error: per (table, synthesizer, epsilon) the mean and SD of every
    metric over runs, n and tuned_on; the verdict against ``aim`` on the tables not tuned on."""
    frame = pd.DataFrame([r for r in rows if "error" not in r])
    if frame.empty:
        return [], []
    frame["epsilon_key"] = frame["epsilon"].fillna(-1.0)
    summary = []
    for (table, kind, key), group in frame.groupby(["table", "synthesizer", "epsilon_key"], sort=False):
        entry = {"table": table, "tuned_on": table in TUNING_TABLES, "synthesizer": kind,
                 "epsilon": None if key == -1.0 else float(key), "n": int(group["run"].nunique())}
        for metric in METRICS:
            if metric in group and group[metric].notna().any():
                values = group[metric].astype(float)
                entry[f"{metric}_mean"] = _number(values.mean())
                entry[f"{metric}_sd"] = _number(values.std(ddof=1)) if values.notna().sum() > 1 else None
        summary.append(entry)
    verdict = []
    by_key = {(s["table"], s["synthesizer"], s["epsilon"]): s for s in summary}
    for s in summary:
        if s["tuned_on"] or s["epsilon"] is None or s["synthesizer"] == BASELINE:
            continue
        base = by_key.get((s["table"], BASELINE, s["epsilon"]))
        if base is None:
            continue
        checks = {}
        for metric, better in VERDICT_METRICS.items():
            value, reference = s.get(f"{metric}_mean"), base.get(f"{metric}_mean")
            if value is None or reference is None:
                checks[metric] = {"value": value, "aim": reference, "aim_sd": base.get(f"{metric}_sd"), "ok": None}
                continue
            sd = base.get(f"{metric}_sd") or 0.0
            ok = value >= reference - sd if better == "higher" else value <= reference + sd
            checks[metric] = {"value": value, "aim": reference, "aim_sd": base.get(f"{metric}_sd"), "ok": bool(ok)}
        decided = [c["ok"] for c in checks.values() if c["ok"] is not None]
        verdict.append({"table": s["table"], "epsilon": s["epsilon"], "synthesizer": s["synthesizer"], "n": s["n"],
                        "aim_n": base["n"], "all_ok": bool(decided) and all(decided), "metrics": checks})
    return summary, verdict


def _document(rows: list[dict], meta: dict, started: float) -> dict:
    summary, verdict = summarise(rows)
    errors = [r for r in rows if "error" in r]
    return {**meta, "tuning_tables": list(TUNING_TABLES),
            "verdict_rule": f"ok: better than {BASELINE!r}'s mean, or worse by at most one SD of its runs (no SD with "
                            f"one run: no worse); higher is better for tstr_auroc, lower for "
                            f"{', '.join(m for m, b in VERDICT_METRICS.items() if b == 'lower')}; tables not tuned on",
            "wall_seconds": round(time.time() - started, 1), "errors": len(errors), "summary": summary,
            "verdict": verdict, "rows": rows}


def _write(document: dict, out: Path) -> None:
    text = json.dumps(document, indent=2, default=float)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    _print_summary(document)


def _print_summary(document: dict) -> None:
    """A short table on stderr: mean per (table, synthesizer, epsilon), tuned_on marked."""
    print("\ntable (tuned_on) | synthesizer | eps | n | auroc | tau_rmse | tv | tv2 | tv3 | ks | seconds",
          file=sys.stderr)
    for s in document["summary"]:
        cells = [s.get(f"{m}_mean") for m in ("tstr_auroc", "tau_rmse", "tv_mean", "tv2_mean", "tv3_mean", "ks_mean",
                                              "seconds")]
        print(f"{s['table']} ({'tuned_on' if s['tuned_on'] else 'not tuned'}) | {s['synthesizer']} | {s['epsilon']} | "
              f"{s['n']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells), file=sys.stderr)
    for v in document["verdict"]:
        failed = [m for m, c in v["metrics"].items() if c["ok"] is False]
        print(f"verdict {v['table']} eps {v['epsilon']} {v['synthesizer']} vs aim: "
              f"{'ok' if v['all_ok'] else 'worse on ' + ', '.join(failed)}", file=sys.stderr)


def only_summary(paths: list[Path], out: Path) -> None:
    """The document from one or more ``.partial.jsonl`` files (a cell present twice counted once: the first that
    did not fail, so a rerun of failed cells replaces them)."""
    cells, metas = {}, []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "meta" in record:
                metas.append({"file": str(path), **record["meta"]})
                continue
            key = (record["table"], record["synthesizer"], record["epsilon"], record["run"])
            if key in cells and not cells[key].get("error"):
                print(f"note: {key} is in more than one file; the first is kept", file=sys.stderr)
                continue
            cells[key] = record
    rows = list(cells.values())
    for setting in ("delta", "bins"):  # different experiments are not merged
        values = {json.dumps(m.get(setting)) for m in metas if setting in m}
        if len(values) > 1:
            raise SystemExit(f"the files were run with different {setting}: {sorted(values)}; not merged")
    tables = list(dict.fromkeys([*(t for m in metas for t in m.get("tables", [])), *(r["table"] for r in rows)]))
    synthesizers = list(dict.fromkeys([*(s for m in metas for s in m.get("synthesizers", [])),
                                       *(r["synthesizer"] for r in rows if r["synthesizer"] != "train on real")]))
    tables = [t for t in tables if any(r["table"] == t for r in rows)]
    synthesizers = [s for s in synthesizers if any(r["synthesizer"] == s for r in rows)]
    rows.sort(key=lambda r: _cell_key(r, tables, synthesizers))
    first = metas[0] if metas else {}
    meta = {"merged_from": [{k: m.get(k) for k in ("file", "data", "runs", "jobs", "synthesizers", "skipped")}
                            for m in metas],
            "tables": tables, "table_info": {t: i for m in metas for t, i in m.get("table_info", {}).items()},
            "epsilons": sorted({r["epsilon"] for r in rows if r["epsilon"] is not None}),
            "delta": first.get("delta"), "runs": sorted({r["run"] for r in rows}), "synthesizers": synthesizers,
            "bins": first.get("bins"), "workload": {t: w for m in metas for t, w in m.get("workload", {}).items()},
            "defaults": first.get("defaults")}
    document = _document(rows, meta, time.time())
    document["wall_seconds"] = None  # several runs' cells: see each file's
    _write(document, out)


# -- main -----------------------------------------------------------------------------------------------------------
def main() -> None:
    registered = registered_synthesizers()
    choices = [*registered, *BENCH_VARIANTS, *REFERENCE_VARIANTS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--first-run", type=int, default=0,
                        help="runs (splits) first-run .. first-run + runs - 1: split the runs among machines")
    parser.add_argument("--synthesizers", nargs="+", default=None, choices=choices, metavar="NAME",
                        help=f"any of {choices} (default: {' '.join(DEFAULT_SYNTHESIZERS)}, and aim_ref mst_ref "
                             "with --pgm-checkout)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (spawn), one thread each")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="read <table>.csv and <table>.yaml from here (bench/export_sksurv_tables.py) instead of "
                             "importing scikit-survival")
    parser.add_argument("--pgm-checkout", type=Path, default=None,
                        help="a private-pgm checkout: adds aim_ref and mst_ref (bench/reference_pgm.py)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mixed_type_synthesis.json")
    parser.add_argument("--only-summary", type=Path, nargs="+", default=None, metavar="PARTIAL_JSONL",
                        help="rebuild the document from .partial.jsonl files (nothing is run)")
    args = parser.parse_args()
    if args.only_summary:
        only_summary(args.only_summary, args.out)
        return
    if args.jobs < 1 or args.runs < 1:
        parser.error("--jobs and --runs must be >= 1")
    wanted = args.synthesizers or [*DEFAULT_SYNTHESIZERS, *(REFERENCE_VARIANTS if args.pgm_checkout else ())]
    if any(s in REFERENCE_VARIANTS for s in wanted) and args.pgm_checkout is None:
        parser.error("aim_ref and mst_ref need --pgm-checkout PATH")
    skipped = {}
    if args.pgm_checkout is not None and not _reference_module().reference_available(args.pgm_checkout):
        skipped |= {s: f"no usable private-pgm reference at {args.pgm_checkout}" for s in REFERENCE_VARIANTS}
    baselines = marginal_available()
    for s in wanted:
        needs = s in BENCH_VARIANTS or (s in registered and getattr(SYNTHESIZERS[s], "needs_baselines", False))
        if needs and not baselines:
            skipped[s] = "private-pgm (mbi >= 2) is not installed (pip install 'privehr[baselines]')"
    synthesizers = [s for s in wanted if s not in skipped]
    for s, why in skipped.items():
        print(f"skipping {s}: {why}", file=sys.stderr)
    if BASELINE not in synthesizers:
        print(f"note: no verdict without {BASELINE!r} among the synthesizers", file=sys.stderr)
    torch.set_num_threads(1)
    started = time.time()
    tables = load_tables(args.tables, args.data_dir)
    config = SynthesisConfig()
    runs = list(range(args.first_run, args.first_run + args.runs))
    cells = [(name, run, None, "train on real") for name in args.tables for run in runs]
    # synthesizer by synthesizer in the order asked for, so that a run cut off by a time limit leaves whole
    # synthesizers (every table, run and epsilon) rather than a little of each
    cells += [(name, run, epsilon, kind) for kind in synthesizers for run in runs for name in args.tables
              for epsilon in args.epsilons]
    workload = {}
    for name, table in tables.items():
        d = len(table["frame"].columns)
        subsets, sampled = kway_subsets(d, 3, MAX_SUBSETS)
        workload[name] = {"columns": d, "pairs": d * (d - 1) // 2, "triples_used": len(subsets),
                          "triples_sampled": sampled, "sample": f"fixed seed 0, {MAX_SUBSETS} subsets" if sampled
                          else None}
    meta = {"tables": args.tables, "table_info": {n: {"tuned_on": t["tuned_on"], "target": t["target"],
                                                      "preprocessing": t["preprocessing"]}
                                                  for n, t in tables.items()},
            "data": str(args.data_dir) if args.data_dir else "scikit-survival", "epsilons": args.epsilons,
            "delta": args.delta, "runs": runs, "synthesizers": synthesizers, "skipped": skipped, "jobs": args.jobs,
            "torch_threads": 1, "bins": config.marginal.bins, "workload": workload,
            "pgm_checkout": str(args.pgm_checkout) if args.pgm_checkout else None,
            "defaults": {"hflow": config.hflow.model_dump(), "dpnf": config.dpnf.model_dump(),
                         "marginal": config.marginal.model_dump()}}
    options = {"delta": args.delta, "pgm_checkout": str(args.pgm_checkout) if args.pgm_checkout else None}
    partial = Path(str(args.out) + ".partial.jsonl")
    partial.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with partial.open("w") as sink:
        sink.write(json.dumps({"meta": meta}, default=float) + "\n")
        sink.flush()

        def done(row: dict) -> None:
            rows.append(row)
            sink.write(json.dumps(row, default=float) + "\n")
            sink.flush()
            print(json.dumps(row, default=float), file=sys.stderr, flush=True)

        if args.jobs == 1:
            _init_worker(tables, options)
            for cell in cells:
                done(run_cell(cell))
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_init_worker,
                                     initargs=(tables, options)) as pool:
                for future in as_completed([pool.submit(run_cell, cell) for cell in cells]):
                    done(future.result())
    rows.sort(key=lambda r: _cell_key(r, args.tables, synthesizers))
    _write(_document(rows, meta, started), args.out)


if __name__ == "__main__":
    main()
