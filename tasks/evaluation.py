"""The test-set evaluation of a grid: calibration, bootstrap intervals and subgroups, per cell.

Every fit saves its test-set probabilities under ``intermediate/predictions/`` (patient-level, never
versioned or served); this module reads them with the test labels and the test stays' demographics
and returns aggregates only:

* calibration (``models/evaluation/calibration.py``) of every seed; a cell reports the median over seeds, and the
  reliability diagram of its median-AUROC seed;
* stratified bootstrap intervals (``models/evaluation/bootstrap.py``) of the cell's median-over-seeds AUROC, AUPRC
  and Brier score: every seed is scored on the same resamples, so the interval covers the test set's
  sampling and the seed spread is reported beside it; the replicates also serve the DP-SGD curve checks;
* subgroups (``models/evaluation/subgroups.py``): each group's median AUROC over seeds with its interval (the same
  resamples, restricted to the group), and the privacy cost (non-private baseline minus DP AUROC) per
  group with a paired interval; a group below the minimum size is "too small", with no number, and no
  group's size is published (it would give a suppressed group's away by subtraction).

The resamples are stratified by class, so the AUPRC and Brier intervals are conditional on the test
set's prevalence (slightly narrower than unconditional ones).

For ExpM+NF cells the evaluated predictions are those of the released draw (the flow's first sample),
the single model a user would deploy. None of these numbers carries a DP guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from privehr.models.evaluation.bootstrap import (percentile_interval, stratified_counts, weighted_auprc, weighted_auroc,
                              weighted_brier)
from privehr.models.evaluation.calibration import calibration
from privehr.models.data.cohort import DEMOGRAPHICS, LABELS
from privehr.models.evaluation.subgroups import large_enough, subgroups
from privehr.core.run_layout import RunLayout
from privehr.core.config import Cell, EvaluationConfig
from privehr.models.methods import is_baseline
from privehr.tasks.features import load_split

__all__ = ["predictions_path", "save_predictions", "evaluate_cells", "CellKey", "TestEvaluation", "cell_key",
           "key_cell", "baseline_key", "calibration_bins"]

CellKey = tuple  # (label, model, method, loss, target_epsilon); inf for non-private


def predictions_path(run_dir: str | Path, cell: Cell, seed: int) -> Path:
    return RunLayout(run_dir).predictions(cell.cell_id, seed)


def save_predictions(run_dir: str | Path, cell: Cell, seed: int, probabilities) -> None:
    """Keep a fit's test-set probabilities (patient-level: under intermediate/) for the report."""
    path = predictions_path(run_dir, cell, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.asarray(probabilities, dtype=np.float64))  # float32 would tie scores near 0 and 1


def key_cell(key: CellKey) -> Cell:
    return Cell(label=key[0], model=key[1], method=key[2], loss=key[3],
                target_epsilon=None if np.isinf(key[4]) else key[4])


def calibration_bins(stays: int, config: EvaluationConfig) -> int:
    """Equal-mass bins of at least ``min_group_stays`` stays each (a bin's means are reported), at most
    ``calibration_bins``; one bin for a test set smaller than that."""
    return max(1, min(config.calibration_bins, stays // config.min_group_stays))


def cell_key(row: dict) -> CellKey:
    eps = row.get("target_epsilon")
    eps = float("inf") if eps is None or (isinstance(eps, float) and np.isnan(eps)) else float(eps)
    return row["label"], row["model"], row["method"], row["loss"], eps


@dataclass
class TestEvaluation:
    cells: dict = field(default_factory=dict)  # CellKey -> aggregate dict
    subgroups: list[dict] = field(default_factory=list)
    privacy_cost: list[dict] = field(default_factory=list)
    auroc_replicates: dict = field(default_factory=dict)  # CellKey -> (B,) bootstrap replicates of the median
    missing: list[str] = field(default_factory=list)  # cells whose predictions are absent
    test_stays: int = 0


def _test_data(run_dir: Path):
    run = RunLayout(run_dir)
    test = load_split(str(run.intermediate), "test")
    with np.load(run.cohort_arrays) as cohort:  # not the hourly window: the ids and columns
        ids = cohort["icustay_id"]
        columns = {c: cohort[c] for c in DEMOGRAPHICS if c in cohort.files}
    position = {int(s): i for i, s in enumerate(ids)}
    rows = np.array([position[int(s)] for s in test["icustay_id"]])
    demographics = {c: values[rows] for c, values in columns.items()}
    labels = {str(name): test["labels"][:, j].astype(int) for j, name in enumerate(test["label_names"])}
    return labels, demographics


def _nanmedian(values) -> float:
    """The median of the finite values; NaN (without a warning) when there is none (constant predictions)."""
    values = np.asarray(values, float)
    return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() else float("nan")


def _auroc(y, p) -> float:
    return float(roc_auc_score(y, p)) if 0 < y.sum() < y.size else float("nan")


def evaluate_cells(run_dir: str | Path, runs: list[dict], config: EvaluationConfig) -> TestEvaluation:
    """Evaluate every cell of ``runs`` (one row per cell and seed) on the test split."""
    run_dir = Path(run_dir)
    out = TestEvaluation()
    if not runs:
        return out
    labels, demographics = _test_data(run_dir)
    groups = subgroups(demographics)
    by_cell: dict[CellKey, list[dict]] = {}
    for row in runs:
        by_cell.setdefault(cell_key(row), []).append(row)
    # one set of resamples per label, every cell of the label scored on the same draws; each label's own
    # generator, so that a label's intervals do not change when the run adds another label
    counts = {label: stratified_counts(labels[label], config.bootstrap_resamples,
                                       np.random.default_rng([config.bootstrap_seed, LABELS.index(label)]))
              for label in sorted({k[0] for k in by_cell})}
    out.test_stays = int(len(next(iter(labels.values()))))
    group_auroc: dict[CellKey, dict] = {}  # CellKey -> group -> (median AUROC, replicates) or None
    for key in sorted(by_cell):
        label = key[0]
        y, w = labels[label], counts[label]
        rows = sorted(by_cell[key], key=lambda r: r["seed"])
        cell = key_cell(key)
        paths = [predictions_path(run_dir, cell, r["seed"]) for r in rows]
        if not all(p.exists() for p in paths):
            out.missing.append(cell.cell_id)
            continue
        preds = np.stack([np.load(p).astype(float) for p in paths])
        finite = np.isfinite(preds).all(1)
        if not finite.any():
            out.missing.append(cell.cell_id)
            continue
        preds = preds[finite]
        aurocs = np.array([_auroc(y, p) for p in preds])
        rep_auroc = np.median(np.stack([weighted_auroc(p, y, w) for p in preds]), 0)
        rep_auprc = np.median(np.stack([weighted_auprc(p, y, w) for p in preds]), 0)
        rep_brier = np.median(np.stack([weighted_brier(p, y, w) for p in preds]), 0)
        fits = [calibration(y, p, calibration_bins(y.size, config)) for p in preds]
        median_seed = int(np.argsort(aurocs)[(len(aurocs) - 1) // 2])
        out.auroc_replicates[key] = rep_auroc
        out.cells[key] = {
            "auroc_median": float(np.nanmedian(aurocs)), "seeds_evaluated": int(len(preds)), "seeds": len(rows),
            "test_stays": int(y.size), "test_positives": int(y.sum()),
            "auroc_seed_range": [float(np.nanmin(aurocs)), float(np.nanmax(aurocs))],
            "auroc_ci": list(percentile_interval(rep_auroc, config.confidence)),
            "auprc_ci": list(percentile_interval(rep_auprc, config.confidence)),
            "brier": float(np.median([f.brier for f in fits])),
            "brier_ci": list(percentile_interval(rep_brier, config.confidence)),
            "ece": float(np.median([f.ece for f in fits])),
            "calibration_slope": _nanmedian([f.slope for f in fits]),
            "calibration_intercept": _nanmedian([f.intercept for f in fits]),
            "reliability": fits[median_seed].bins}
        group_auroc[key] = {}
        for (attribute, group), mask in groups.items():  # every group, empty ones too: "too small" says nothing
            if not large_enough(y, mask, config.min_group_stays, config.min_group_per_class):
                group_auroc[key][(attribute, group)] = None
                out.subgroups.append(_group_row(key, attribute, group, None, None))
                continue
            value = float(np.median([_auroc(y[mask], p[mask]) for p in preds]))
            with np.errstate(invalid="ignore", divide="ignore"):  # a resample may leave a group one class
                reps = np.median(np.stack([weighted_auroc(p[mask], y[mask], w[:, mask]) for p in preds]), 0)
            group_auroc[key][(attribute, group)] = (value, reps)
            out.subgroups.append(_group_row(key, attribute, group, value,
                                            list(percentile_interval(reps, config.confidence))))
    out.privacy_cost = _privacy_cost(out, group_auroc, config.confidence)
    return out


def _r(value):
    """A group's statistic rounded to 3 decimals: an exact AUROC is a fraction over positives x negatives, and
    its denominator would give the group's size away (and a suppressed one's by subtraction)."""
    if value is None:
        return None
    return [_r(v) for v in value] if isinstance(value, (list, tuple)) else round(float(value), 3)


def _group_row(key, attribute, group, auroc, interval) -> dict:
    """A group's row: no size, no count (a size published beside a suppressed group's would give it away by
    subtraction), only the AUROC and its interval, rounded, or "too small"."""
    return {"label": key[0], "model": key[1], "method": key[2], "loss": key[3], "target_epsilon": key[4],
            "attribute": attribute, "group": group, "too_small": auroc is None, "auroc": _r(auroc),
            "auroc_ci": _r(interval)}


def baseline_key(keys, medians: dict, label: str, model: str):
    """The baseline cell (non-private: its method's ``baseline``) of (label, model) with the best median AUROC (the
    curve checks' baseline)."""
    plain = [k for k in keys if k[0] == label and k[1] == model and is_baseline(k[2])]
    finite = [k for k in plain if np.isfinite(medians.get(k, np.nan))]
    return max(finite, key=lambda k: medians[k]) if finite else None


def _privacy_cost(out: TestEvaluation, group_auroc: dict, confidence: float) -> list[dict]:
    medians = {k: c["auroc_median"] for k, c in out.cells.items()}
    rows = []
    for key in sorted(group_auroc):
        if is_baseline(key[2]):
            continue
        base = baseline_key(group_auroc, medians, key[0], key[1])
        if base is None:
            continue
        for group, private in group_auroc[key].items():
            reference = group_auroc[base].get(group)
            row = {"label": key[0], "model": key[1], "method": key[2], "loss": key[3], "target_epsilon": key[4],
                   "attribute": group[0], "group": group[1], "non_private_auroc": None, "private_auroc": None,
                   "cost": None, "cost_ci": None, "cost_beyond_noise": None}
            if private is not None and reference is not None:
                # paired: the baseline and the private cell are scored on the same resamples
                interval = percentile_interval(reference[1] - private[1], confidence)
                row.update(non_private_auroc=_r(reference[0]), private_auroc=_r(private[0]),
                           cost=_r(reference[0] - private[0]), cost_ci=_r(interval),
                           cost_beyond_noise=bool(interval[0] > 0 or interval[1] < 0))
            rows.append(row)
    return rows
