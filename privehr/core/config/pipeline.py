"""``privehr-pipeline``: everything one run needs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from privehr.core.config.base import _resume_needs_run_id, _Strict, Label, RunId
from privehr.core.config.privacy import _default_ledger, _ledger_beside_runs, PrivacyConfig
from privehr.core.config.data import DataConfig, PagesConfig, ValidationConfig
from privehr.core.config.release import ReleaseConfig
from privehr.core.config.synthesis import StaticImputationConfig, SynthesisConfig
from privehr.core.config.training import EvaluationConfig, SplitConfig, TrainingConfig

__all__ = ["PipelineConfig", "VersioningConfig"]


class VersioningConfig(_Strict):
    """Version each run directory with DVC (``dvc add artifacts/<run-id>``, then push)."""

    dvc: bool = True
    push: bool = Field(True, description="push to the default DVC remote when one is configured")


class PipelineConfig(_Strict):
    """Everything one run of ``privehr-pipeline`` needs."""

    data: DataConfig = DataConfig()
    validation: ValidationConfig = ValidationConfig()
    split: SplitConfig = SplitConfig()
    static_imputation: StaticImputationConfig | None = Field(
        None, description="also impute the cohort's static table with MICE (off by default)")
    synthesis: SynthesisConfig | None = Field(
        None, description="also synthesise an EHR table with DP-NF; its run goes to <run>/synthesis/")
    labels: list[Label] = Field(default_factory=lambda: ["mort_icu", "los_3"], min_length=1, description=(
        "MIMIC-Extract's labels of the cohort to train for: mort_hosp, mort_icu, los_3, los_7 (each adds a "
        "grid); every run evaluates calibration, intervals and subgroups for each"))
    training: TrainingConfig = TrainingConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    release: ReleaseConfig = ReleaseConfig()
    pages: PagesConfig = PagesConfig()
    versioning: VersioningConfig = VersioningConfig()
    artifacts_dir: Path = Field(Path("artifacts"), description="runs go to <artifacts_dir>/<run-id>/")
    run_id: RunId | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    resume: bool = Field(False, description="continue run_id's directory: grid cells whose results exist for "
                                            "the same input, cell, hyperparameters and seed are not retrained")

    def synthesis_run(self, run_dir: str | Path) -> SynthesisConfig:
        """The synthesis settings of a pipeline run: its own run directory <run>/synthesis, and the pipeline's
        ledger, budget, delta and noise (the table keeps its own dataset id)."""
        privacy = self.privacy.model_copy(update={"dataset_id": self.synthesis.privacy.dataset_id})
        # set, not defaulted: Prefect validates a subflow's parameters again, and a ledger left to its default would
        # be put back beside the subflow's artifacts_dir, inside this run's directory (a throw-away ledger)
        privacy.__pydantic_fields_set__.add("ledger_path")
        return self.synthesis.model_copy(update={"artifacts_dir": Path(run_dir), "run_id": "synthesis",
                                                 "privacy": privacy, "resume": self.resume})

    @model_validator(mode="after")
    def _one_privacy_section(self):
        if self.synthesis is not None:
            # a field set to its default changes nothing (and every field is set in a saved config.json)
            given = self.synthesis.privacy
            shared = [f for f in given.model_fields_set - {"dataset_id"}
                      if getattr(given, f) != type(given).model_fields[f].get_default(call_default_factory=True)
                      and not (f == "ledger_path" and given.ledger_path in self._synthesis_ledgers())]
            if shared:
                raise ValueError(f"synthesis.privacy.{sorted(shared)[0]}: the synthesis subflow uses the pipeline's "
                                 "privacy settings; set them under privacy (synthesis.privacy takes only dataset_id, "
                                 "the EHR table's own identity)")
        return self

    @model_validator(mode="after")
    def _below_ceiling(self):
        for where, epsilons in self.training.targets().items():
            self.privacy.check_targets(epsilons, where)
        if self.synthesis is not None:
            self.privacy.check_targets([*self.synthesis.epsilons, self.synthesis.count_epsilon], "synthesis.epsilons")
        r = self.release
        self.privacy.check_targets([r.featurizer_epsilon, r.count_epsilon, r.evaluation_epsilon], "release epsilons")
        return self

    _resume_needs_run_id = model_validator(mode="after")(lambda self: _resume_needs_run_id(self))
    _ledger_beside_runs = model_validator(mode="after")(lambda self: _ledger_beside_runs(self))

    @model_validator(mode="after")
    def _synthesis_uses_the_pipelines_ledger(self):
        """The saved configuration says which ledger the synthesis subflow wrote to: the pipeline's."""
        if self.synthesis is not None and self.synthesis.privacy.ledger_path != self.privacy.ledger_path:
            privacy = self.synthesis.privacy.model_copy(update={"ledger_path": self.privacy.ledger_path})
            privacy.__pydantic_fields_set__.discard("ledger_path")
            self.synthesis.privacy = privacy
        return self

    def _synthesis_ledgers(self) -> tuple:
        """The ledger paths a synthesis section may hold without the user having set one: its defaults (from its
        artifacts_dir or the project, as a configuration saved before the pipeline's was written there) and, in a
        saved configuration, the pipeline's own."""
        return (_default_ledger(self.synthesis), _default_ledger(type(self.synthesis).model_construct()),
                self.privacy.ledger_path)
