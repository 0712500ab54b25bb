"""Every path of a run directory, in one place.

A run writes everything under ``<artifacts_dir>/<run-id>/``: aggregates at the top (what DVC versions and
the pages serve) and patient-level files under ``intermediate/`` (as sensitive as the raw data: ignored
by DVC, never served). :class:`RunLayout` names each file once; tasks, the report, the resume logic and
the CLI ask it for paths instead of joining strings. A synthesis run nested in a pipeline run has its own
layout under ``synthesis/`` (:attr:`RunLayout.synthesis`).

>>> run = RunLayout("artifacts/r1")
>>> run.fit_result("mort_icu-grud-dp_sgd-bce-eps1", 0).as_posix()
'artifacts/r1/models/mort_icu-grud-dp_sgd-bce-eps1-seed0.json'
>>> run.predictions("mort_icu-grud-dp_sgd-bce-eps1", 0).relative_to(run.intermediate).as_posix()
'predictions/mort_icu-grud-dp_sgd-bce-eps1-seed0.npy'
>>> run.synthesis.release("imp0-mu1.49-run0").as_posix()
'artifacts/r1/synthesis/releases/imp0-mu1.49-run0.json'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunLayout", "INTERMEDIATE"]

INTERMEDIATE = "intermediate"  # patient-level derived data: as sensitive as data/, never in git or DVC


class _At:
    """A file or folder of the run directory, declared in one line: ``config = _At("config.json")``."""

    def __init__(self, *parts: str, doc: str = ""):
        self.parts, self.__doc__ = parts, doc or "/".join(parts)

    def __get__(self, run: RunLayout | None, owner=None) -> Path:
        return self if run is None else run.root.joinpath(*self.parts)


@dataclass(frozen=True)
class RunLayout:
    """The files of one run directory (``root``); nothing here touches the disk."""

    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root))

    # every run
    config = _At("config.json", doc="the run's resolved configuration (what a resume compares against)")
    provenance = _At("provenance.json", doc="versions, commit, and the run's uid in the privacy ledger")
    lock = _At(".lock")
    intermediate = _At(INTERMEDIATE, doc="patient-level files: out of DVC, never served")
    privacy_budget = _At("privacy_budget.json", doc="the budget check: the dataset before and after the run")
    preprocessing_budget = _At("privacy_budget_preprocessing.json",
                               doc="the first budget check of a pipeline run: its record counts and featurizer "
                                   "statistics, reserved before the plans that need them")
    validation_dir = _At("validation")

    def validation(self, delivery: str) -> tuple[Path, Path]:
        """(validation report folder, quarantine folder) of one delivery."""
        return self.validation_dir / delivery, self.root / "quarantine" / delivery

    def figure(self, name: str) -> Path:
        """A figure of a report (aggregates only), e.g. ``auroc_vs_epsilon``."""
        return self.root / f"{name}.png"

    # privehr-pipeline
    ingest = _At("ingest.json")
    cohort_summary = _At("cohort.json")
    cohort_arrays = _At(INTERMEDIATE, "cohort.npz")
    split_summary = _At("split_summary.json", doc="counts, label rates and the manifest's hash (versioned)")
    split_manifest = _At(INTERMEDIATE, "split_manifest.json")
    members = _At(INTERMEDIATE, "members.json", doc="the run's membership snapshot in the ledger and the subjects "
                                                     "left out because their budget was spent")
    featurizer = _At("featurizer.json")
    record_counts = _At("record_counts.json", doc="the stays per split that every plan is built from: DP counts "
                                                  "(or the exact ones, where the run declared them public)")
    release_bundle = _At("release", doc="what may leave the hospital: bundled models, featurizer, DP evaluation, "
                                        "model card, manifest")
    static_imputation = _At("static_imputation.json")
    static_imputed = _At(INTERMEDIATE, "static_imputed")
    models = _At("models")
    results_runs = _At("results_runs.csv")
    results = _At("results.csv")
    results_md = _At("results.md")
    metrics = _At("metrics.json")
    report_html = _At("report.html")

    def search(self, cell_id: str) -> Path:
        return self.root / "search" / f"{cell_id}.json"

    def fit_result(self, cell_id: str, seed: int) -> Path:
        """The fit's result row (:class:`~privehr.core.records.FitRow`); written last, it marks the fit done."""
        return self.models / f"{cell_id}-seed{seed}.json"

    def model(self, cell_id: str, seed: int) -> Path:
        return self.models / f"{cell_id}-seed{seed}.pt"

    def expm_draws(self, cell_id: str, seed: int) -> Path:
        """Every evaluated ExpM+NF draw's test AUROC and AUPRC (for the report's box plots)."""
        return self.model(cell_id, seed).with_suffix(".draws.json")

    def dp_evaluation(self, cell_id: str, seed: int) -> Path:
        """A bundled model's DP evaluation (a release of its own); a resumed run reuses it for the same model."""
        return self.root / "dp_evaluations" / f"{cell_id}-seed{seed}.json"

    def predictions(self, cell_id: str, seed: int) -> Path:
        return self.intermediate / "predictions" / f"{cell_id}-seed{seed}.npy"

    @property
    def synthesis(self) -> RunLayout:
        """The layout of the pipeline's synthesis subflow."""
        return RunLayout(self.root / "synthesis")

    # privehr-ehr-prepare and privehr-synthesize
    imputation = _At("imputation.json")
    imputed = _At(INTERMEDIATE, "imputed")
    split_tables = _At(INTERMEDIATE, "split", doc="the split's patients as delivered (missing values kept): what "
                                                  "synthesis.missing: in_release trains on")
    released_count = _At("released_count.json")
    releases = _At("releases")
    flows = _At(INTERMEDIATE, "flows")
    report_md = _At("report.md")
    marginals_figure = _At(INTERMEDIATE, "marginals.png",
                           doc="real beside synthetic marginals: it draws training rows' histograms (patient-level)")

    def release(self, job_id: str) -> Path:
        """A synthesis job's release record; it marks the job as done for a resumed run."""
        return self.releases / f"{job_id}.json"

    def original(self, imputation: int) -> Path:
        return self.releases / f"original_{imputation}.json"

    def synthetic(self, releasable: bool) -> Path:
        """Synthetic tables: at the top when releasable, else patient-level (scaled with private statistics,
        or not DP) under ``intermediate/``."""
        return self.root / "synthetic" if releasable else self.intermediate / "synthetic"

    # privehr-private-inference
    records = _At(INTERMEDIATE, "records.pt")
    posteriors = _At("posteriors")
    inference_summary = _At("inference.json")

    def posterior(self, key: str) -> Path:
        return self.posteriors / f"{key}.json"

    def posterior_draws(self, key: str) -> Path:
        return self.posteriors / f"{key}.draws.npy"

    # privehr-audit
    audit = _At("audit")
    audit_work = _At(INTERMEDIATE, "audit")
