"""Scoring new stays with a release bundle alone: ``privehr predict`` and the ``privehr-score`` flow.

The bundle carries everything applying a model needs (the window, the outlier bounds the training run masked by,
the featurizer's statistics, each model's architecture and weights); nothing is read from the run that trained it.
Every stay of the file gets a row, in the file's order. A stay is scored when the file holds its first
``window_hours`` hours (``max_hours >= window_hours``) and a measurement in them; another gets no risk and its
``reason``. The column ``in_cohort`` says whether a stay also meets the training cohort's rule (``max_hours > window + gap``), the population
the card's evaluation describes. Each row carries the sha256 of the bundle's signed manifest and the time of the
prediction. The scores are patient-level: they go to the file the user names and nowhere else.
"""

from __future__ import annotations

import io
import pickle
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from privehr.core.config import SignerTrust
from privehr.core.errors import InputError
from privehr.io.bundle_signature import trusted_signer
from privehr.io.mimic_extract import check_extract, read_window
from privehr.io.permissions import private_file, private_umask
from privehr.io.release_bundle import Bundle, calibration_text, read_bundle
from privehr.models.classifiers import build_classifier, classifier_inputs
from privehr.models.classifiers.training import predict_proba
from privehr.models.data.cohort import stay_labels
from privehr.models.data.hourly_features import HourlyFeaturizer
from privehr.models.data.quarantine import mask_outside
from privehr.models.evaluation.dp_evaluation import shown_miscalibrated

__all__ = ["score_stays", "score_stays_task", "apply_bundle", "load_models"]


def _masked(window, featurizer: dict) -> tuple[np.ndarray, np.ndarray]:
    """The hourly means and counts as the training run saw them: values beyond the outlier bounds missing."""
    mean, count = window.mean.astype(float), window.count.astype(float)
    if featurizer["mask_beyond_outlier_bounds"]:
        low, high = (np.array([np.nan if v is None else v for v in featurizer[k]]) for k in ("outlier_low",
                                                                                           "outlier_high"))
        mask_outside(mean, count, low, high)  # the rule the training run's cohort applied
    return mean, count


def load_models(bundle: Bundle, models: list[str] | None = None, device: str = "cpu") -> dict[str, tuple]:
    """The bundled models asked for (all by default), each loaded once as weights only: cell id -> (its model kind,
    the module in eval mode on ``device``)."""
    available = bundle.models()
    wanted = models or sorted(available)
    unknown = [m for m in wanted if m not in available]
    if unknown:
        raise InputError(f"the bundle has no model {unknown[0]!r}; it holds {sorted(available)}")
    loaded = {}
    for cell_id in wanted:
        try:  # weights only: a pickle payload is refused, never run
            saved = torch.load(io.BytesIO(available[cell_id]), weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
            raise InputError(f"model file models/{cell_id}.pt is not a weights-only PyTorch file (a pickle payload, "
                             f"or truncated: {type(err).__name__}); it was not loaded. Copy the bundle again from its "
                             "run") from None
        try:
            arch = saved["architecture"]
            model = build_classifier(arch["model"], arch["n_variables"], arch["n_hours"], seed=0,
                                     hidden_size=arch["hidden_size"])
            model.load_state_dict(saved["state_dict"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise InputError(f"model file models/{cell_id}.pt does not hold a model of its stated architecture "
                             f"({type(err).__name__}); copy the bundle again from its run") from None
        loaded[cell_id] = (arch["model"], model.eval().to(device))
    return loaded


def _risks(loaded: dict[str, tuple], featurizer: dict, mean: np.ndarray, count: np.ndarray,
           device: str) -> dict[str, np.ndarray]:
    features = HourlyFeaturizer.from_statistics(np.array(featurizer["mean"]), np.array(featurizer["std"]),
                                                featurizer["delta_fill"]).transform(mean, count)
    return {cell_id: predict_proba(model, classifier_inputs(kind, features.values, features.mask, features.delta,
                                                            device))
            for cell_id, (kind, model) in loaded.items()}


def apply_bundle(bundle: Bundle, mean: np.ndarray, count: np.ndarray, models: list[str] | None = None,
                 device: str = "cpu") -> dict[str, np.ndarray]:
    """Risks per bundled model (cell id -> probabilities) for (stays, hours, variables) hourly means and counts."""
    return _risks(load_models(bundle, models, device), bundle.featurizer, mean, count, device)


def score_stays(bundle_path: str | Path, data_path: str | Path, out_path: str | Path, *, trust: SignerTrust,
                models: list[str] | None = None, chunk_rows: int = 32768, chunk_stays: int = 4096,
                out_format: str = "csv", recalibrate: bool = False) -> dict:
    """Score every stay of a MIMIC-Extract file with at least the window's hours, ``chunk_stays`` stays at a time;
    write ``out_path`` and return a summary of counts (no patient-level value).

    ``out_format``: ``csv`` (one file, a row per stay of the file) or ``meds`` (a directory: a Parquet file per
    model in the MEDS prediction schema, and ``not_scored.csv`` with each unscored stay's reason). ``recalibrate``:
    also each model's risks through the logistic recalibration its DP evaluation released
    (``risk_recalibrated_<model>``; MEDS files then hold the recalibrated risk), for the models whose DP calibration
    slope is informative; the summary says which. ``trust``: whom the bundle's signature must come from (a pinned
    fingerprint, the hospital's own key, a signer trusted on first use): any other signer is refused before anything
    is read; the summary names the signer and how it is trusted."""
    bundle = read_bundle(bundle_path)
    if bundle.featurizer is None:
        raise InputError(f"release bundle {bundle.path} holds synthetic tables (a privehr-synthesize run), no model "
                         "to score stays with; give the release/ folder of a privehr-pipeline run")
    signer = trusted_signer(bundle.signed_by, trust)
    out_path, data_path = Path(out_path), Path(data_path)
    if out_path.resolve() == data_path.resolve():
        raise InputError(f"--out {out_path} is the input file; name another file for the scores")
    if out_path.resolve().is_relative_to(bundle.path.resolve()):
        raise InputError(f"--out {out_path} is inside the release bundle, which leaves the hospital; write the "
                         "scores where the data may be")
    if out_format not in FORMATS:
        raise InputError(f"--format {out_format} is not one of {', '.join(FORMATS)}")
    if out_format == "csv" and out_path.is_dir():
        raise InputError(f"--out {out_path} is a directory; name the CSV file to write the scores to")
    if out_format == "meds" and out_path.exists() and not out_path.is_dir():
        raise InputError(f"--out {out_path} is a file; --format meds writes a directory (a Parquet file per model)")
    f = bundle.featurizer
    window_hours, gap_hours = f["window_hours"], f["gap_hours"]
    check_extract(data_path)  # one line for a file that is not HDF5 or lacks patients / vitals_labs
    stays = _stays(_patients(data_path), data_path, window_hours, gap_hours, meds=out_format == "meds")
    loaded = load_models(bundle, models)
    stamp = {"bundle_sha256": bundle.manifest_sha256,  # which bundle scored it: its signed manifest, as verified
             "predicted_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    labels = {m["cell_id"]: m["label"] for m in bundle.card.get("models", []) if m["cell_id"] in loaded}
    evaluations = {m["cell_id"]: m["evaluation"] for m in bundle.card.get("models", []) if m["cell_id"] in loaded}
    recalibrations = {c: e.get("recalibration") for c, e in evaluations.items()} if recalibrate else {}
    sink = _csv_sink(out_path, stamp) if out_format == "csv" else _meds_sink(out_path, stamp, labels, window_hours)
    scored_total = 0
    with sink as write:  # patient-level: owner-only files, also over existing ones
        for start in range(0, len(stays), chunk_stays):  # streamed: memory bounded by a chunk of stays
            table = stays.iloc[start:start + chunk_stays].reset_index(drop=True)
            scored = table["reason"].isna().to_numpy(copy=True)
            risks = {m: np.empty(0) for m in loaded}
            if scored.any():
                window = read_window(data_path, table.loc[scored, "icustay_id"].to_numpy(), window_hours, chunk_rows)
                if window.variables != f["variables"]:
                    missing = [v for v in f["variables"] if v not in window.variables]
                    raise InputError(f"{data_path} has {len(window.variables)} hourly variables; the bundle's models "
                                     f"take {len(f['variables'])} in its order"
                                     + (f" (missing: {missing[:3]})" if missing else "")
                                     + ". Extract the file with the same MIMIC-Extract variables (group_by_level2).")
                mean, count = _masked(window, f)
                empty = ~(count > 0).any(axis=(1, 2))  # no measurement in the window: a risk from nothing
                if empty.any():
                    table.loc[np.flatnonzero(scored)[empty], "reason"] = (
                        f"not scored: no measurement of the model's variables in the stay's first {window_hours} "
                        "hours")
                    scored[np.flatnonzero(scored)[empty]] = False
                    mean, count = mean[~empty], count[~empty]
                risks = _risks(loaded, f, mean, count, "cpu") if len(mean) else risks
            for cell_id, p in risks.items():
                column = np.full(len(table), np.nan)
                column[scored] = p
                table[f"risk_{cell_id}"] = column
                if recalibrations.get(cell_id):
                    table[f"risk_recalibrated_{cell_id}"] = recalibrated(column, recalibrations[cell_id])
            write(table)
            scored_total += int(scored.sum())
    scored = scored_total
    return {"bundle": str(bundle.path), "data": str(data_path), "out": str(out_path), "stays": int(len(stays)),
            "scored": scored, "not_scored": int(len(stays)) - scored, "in_cohort": int(stays["in_cohort"].sum()),
            "models": sorted(loaded), "guarantee": bundle.manifest["guarantee"], "signed_by": bundle.signed_by,
            "signer": signer,
            # how far to trust the risks: each model's DP calibration on its run's test split, as its card says
            "calibration": {c: calibration_text(e) or None for c, e in evaluations.items()},
            "recalibrated": sorted(c for c, r in recalibrations.items() if r),
            "not_recalibrated": {c: _why_not_recalibrated(evaluations[c]) for c, r in recalibrations.items() if not r}}


def _why_not_recalibrated(evaluation: dict) -> str:
    """Why a model's risks were left as they are: the card's DP calibration says so."""
    intervals = evaluation.get("intervals") or {}
    defined = all(v is not None and v == v for k in ("calibration_slope", "calibration_intercept")  # not nan
                  for v in (intervals.get(k) or (None, None)))
    if (evaluation.get("informative") or {}).get("calibration_slope") and defined \
            and not shown_miscalibrated(intervals):
        return ("its DP calibration is consistent with a calibrated model (the slope's interval holds 1 and the "
                "intercept's holds 0): recalibrating would only add the fit's noise")
    return ("its DP calibration slope is not informative (or the bundle predates recalibration): recalibrating by "
            "noise would be worse than not")


def recalibrated(risk: np.ndarray, recalibration: dict) -> np.ndarray:
    """Risks through a logistic recalibration: sigmoid(intercept + slope logit(risk)) (Cox 1958); nan stays nan."""
    p = np.clip(np.asarray(risk, dtype=float), 1e-12, 1 - 1e-12)
    with np.errstate(invalid="ignore"):
        z = recalibration["intercept"] + recalibration["slope"] * np.log(p / (1 - p))
    return 1 / (1 + np.exp(-z))


FORMATS = ("csv", "meds")
# MEDS's prediction schema (Medical Event Data Standard; what meds-evaluation reads): one row per prediction
MEDS_SCHEMA = {"subject_id": "int64", "prediction_time": "timestamp[us]", "boolean_value": "bool",
               "predicted_boolean_value": "bool", "predicted_boolean_probability": "float32"}


@contextmanager
def _undone_on_failure(directory: Path):
    """Make ``directory`` (and its missing parents, owner-only); if the block fails, remove again those this call
    made, innermost first, each only while empty: a directory that was there before is never touched."""
    made = []
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        made.append(folder)
    with private_umask():
        directory.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # not empty (or gone): what is in it is not this command's to delete
                break
        raise


@contextmanager
def _csv_sink(path: Path, stamp: dict):
    """A ``write(table)`` appending a chunk's rows (every stay, scored or not) to one CSV."""
    with _undone_on_failure(path.parent), private_file(path) as tmp, open(tmp, "w", newline="") as fh:
        first = [True]

        def write(table: pd.DataFrame) -> None:
            table.drop(columns=[c for c in table if c.startswith("_")]).assign(**stamp).to_csv(
                fh, index=False, header=first[0])
            first[0] = False

        yield write


@contextmanager
def _meds_sink(directory: Path, stamp: dict, labels: dict[str, str], window_hours: int):
    """A ``write(table)`` appending a chunk's scored stays to one Parquet file per model in the MEDS prediction
    schema (subject_id, prediction_time: the end of the window, boolean_value: the stay's label where the file holds
    it, predicted_boolean_probability; the bundle's hash and the prediction time in the file's metadata), and the
    unscored stays with their reasons to ``not_scored.csv``."""
    import pyarrow as pa  # deferred: only this format needs it
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind in MEDS_SCHEMA.items()],
                       metadata={f"privehr_{k}": str(v) for k, v in stamp.items()})
    with _undone_on_failure(directory), ExitStack() as stack:  # an error mid-way leaves no empty --out behind
        paths = {cell: stack.enter_context(private_file(directory / f"{cell}.parquet")) for cell in labels}
        reasons = stack.enter_context(open(stack.enter_context(private_file(directory / "not_scored.csv")), "w",
                                           newline=""))
        writers = {cell: stack.enter_context(pq.ParquetWriter(path, schema)) for cell, path in paths.items()}
        first = [True]

        def write(table: pd.DataFrame) -> None:
            done = table["reason"].isna().to_numpy()
            part = table[done]
            time = (part["_intime"] + pd.Timedelta(hours=window_hours)).astype("datetime64[us]")
            for cell, label in labels.items():
                outcome = part.get(f"_{label}")
                writers[cell].write_table(pa.table({
                    "subject_id": pa.array(part["subject_id"].to_numpy(), pa.int64()),
                    "prediction_time": pa.array(time.to_numpy(), pa.timestamp("us")),
                    "boolean_value": pa.array([None] * len(part) if outcome is None else
                                              [None if v != v else bool(v) for v in outcome], pa.bool_()),
                    "predicted_boolean_value": pa.nulls(len(part), pa.bool_()),
                    "predicted_boolean_probability": pa.array(part.get(f"risk_recalibrated_{cell}",
                                                                       part[f"risk_{cell}"]).to_numpy(), pa.float32())},
                    schema=schema))
            table.loc[~done, ["subject_id", "hadm_id", "icustay_id", "reason"]].assign(**stamp).to_csv(
                reasons, index=False, header=first[0])
            first[0] = False

        yield write


def _patients(path: Path) -> pd.DataFrame:
    """The ``patients`` table of a file to score: its ids and ``max_hours`` (outcome columns are not needed)."""
    try:
        patients = pd.read_hdf(path, "patients")
    except (ValueError, TypeError, KeyError, OSError, RuntimeError) as err:  # HDF5ExtError is a RuntimeError
        raise InputError(f"key 'patients' in {path} cannot be read as a pandas table ({type(err).__name__}); give a "
                         "MIMIC-Extract file (all_hourly_data.h5)") from None
    if not isinstance(patients, pd.DataFrame):
        raise InputError(f"key 'patients' in {path} is not a table; give a MIMIC-Extract file (all_hourly_data.h5)")
    return patients


def _stays(patients: pd.DataFrame, path: Path, window_hours: int, gap_hours: int, meds: bool = False
           ) -> pd.DataFrame:
    """Every stay of ``patients`` in the file's order, with ``in_cohort`` and the reason it gets no risk (None: it
    is scored). Ids must be whole numbers and each stay once; a stay's hours are read as a number (refused where a
    value is not one). Messages name rows and columns, never values."""
    try:
        ids = patients.reset_index()
    except ValueError:  # a column named as an index level too
        raise InputError(f"'patients' in {path} holds an id both as an index level and as a column; keep one, as "
                         "MIMIC-Extract writes it") from None
    lacking = sorted({"subject_id", "hadm_id", "icustay_id", "max_hours"} - set(ids.columns))
    if lacking:
        raise InputError(f"'patients' in {path} lacks {', '.join(lacking)}; MIMIC-Extract writes subject_id, hadm_id "
                         "and icustay_id (its index) and max_hours")
    if ids.empty:
        raise InputError(f"'patients' in {path} holds no stay; there is nothing to score")
    limit = float(np.iinfo(np.int64).max)
    for column in ("subject_id", "hadm_id", "icustay_id", "max_hours"):
        raw = ids[column]
        numeric = pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw) \
            and not pd.api.types.is_complex_dtype(raw)
        values = pd.to_numeric(raw, errors="coerce") if numeric or raw.dtype == object else \
            pd.Series(np.nan, index=raw.index)  # dates, durations, booleans, complex numbers: not what is asked
        with np.errstate(invalid="ignore"):
            wrong = values.isna().to_numpy() | ~np.isfinite(values.to_numpy(dtype=float))
            if column != "max_hours":  # whole numbers an int64 holds
                wrong |= ((values % 1 != 0) | (values.abs() > limit)).to_numpy()
        bad = np.flatnonzero(wrong)
        if bad.size:
            raise InputError(f"'patients' in {path}: {column} of row(s) {', '.join(map(str, bad[:5] + 1))}"
                             f"{' ...' if bad.size > 5 else ''} ({bad.size} in all) is missing or not "
                             f"{'a number of hours' if column == 'max_hours' else 'a whole number'}; fix those rows "
                             "as MIMIC-Extract writes them")
        ids[column] = values
    stays = ids[["subject_id", "hadm_id", "icustay_id"]].astype("int64")
    twice = np.flatnonzero(stays["icustay_id"].duplicated(keep=False).to_numpy())
    if twice.size:
        raise InputError(f"'patients' in {path}: rows {', '.join(map(str, twice[:5] + 1))}"
                         f"{' ...' if twice.size > 5 else ''} share an icustay_id ({twice.size} rows); each stay "
                         "once, as MIMIC-Extract writes it")
    hours = ids["max_hours"].to_numpy(dtype=float)
    stays["in_cohort"] = hours > window_hours + gap_hours
    stays["reason"] = np.where(hours >= window_hours, None,
                               f"not scored: the stay has fewer than the model's {window_hours} hours of data")
    if meds:  # a prediction's time (the end of the window) and the labels the file holds, for MEDS's schema
        if "intime" not in ids.columns:
            raise InputError(f"'patients' in {path} lacks intime, which --format meds needs for each prediction's "
                             "time; MIMIC-Extract writes it (or write --format csv)")
        raw = ids["intime"]
        if pd.api.types.is_datetime64_any_dtype(raw):
            intime = raw.dt.tz_convert("UTC").dt.tz_localize(None) if raw.dt.tz is not None else raw
        else:  # times written as text: ISO 8601, else refused; one with an offset is read as UTC, one without as is
            intime = pd.to_datetime(raw.astype(str), errors="coerce", format="ISO8601", utc=True).dt.tz_localize(None)
        bad = np.flatnonzero(intime.isna().to_numpy() & stays["reason"].isna().to_numpy())
        if bad.size:
            raise InputError(f"'patients' in {path}: intime of row(s) {', '.join(map(str, bad[:5] + 1))}"
                             f"{' ...' if bad.size > 5 else ''} ({bad.size} in all) is missing or not a time; "
                             "--format meds needs it for each prediction's time")
        stays["_intime"] = intime.to_numpy()
        for label, values in stay_labels(ids).items():  # the cohort's definitions; nan where a stay has none
            stays[f"_{label}"] = values
    return stays


score_stays_task = task(score_stays, name="score-stays")  # the privehr-score flow's one task
