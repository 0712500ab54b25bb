"""Typed configuration shared by the CLI, the Prefect flows and the deployments.

References: Bridges et al. 2023 (arXiv:2311.09200); Lee et al. 2022 (AAAI); Su et al. 2023 (arXiv:2302.05787).

One pydantic model per stage, one module per flow's schema; ``PipelineConfig`` nests them. Prefect validates
deployment parameters against the same schema, so a bad value is refused before any run starts.

* ``base``: the declared names (labels, models, training methods, losses, clipping modes) and the strict base;
* ``privacy``: the ledger, the budget, delta and the noise source (every flow's ``privacy`` section);
* ``data``: inputs, validation, pages, and ``privehr-validate`` (``StewardConfig``);
* ``synthesis``: ``privehr-ehr-prepare`` and ``privehr-synthesize`` (MICE, DP-NF, DP-HFlow, AIM/MST, budgets);
* ``training``: the split, the grid and each method's settings, the test-set evaluation;
* ``release``: the release bundle (featurizer source, DP counts and evaluation) and ``privehr-score``;
* ``pipeline``: ``privehr-pipeline``; ``audit``: ``privehr-audit``;
* ``profiles``: the ``demo`` and ``full`` presets and :func:`load_config`.

``privehr.core.inference_config`` holds ``privehr-private-inference``'s schema.
"""

from privehr.core.config.base import (AuditedMethod, DPSGDClipping, FineGrainedClipping, Label, Loss, Method, Model,
                                      PositiveFloat, RUN_ID_PATTERN, RunId, _moved, _resume_needs_run_id, _Strict)
from privehr.core.config.privacy import PrivacyConfig, _default_ledger, _ledger_beside_runs, project_ledger
from privehr.core.config.data import DEFAULT_PAGES_PORT, DataConfig, PagesConfig, StewardConfig, ValidationConfig
from privehr.core.config.synthesis import (Budget, DPNFConfig, EHRPrepareConfig, HFlowConfig,
                                           MarginalConfig, MICEConfig, StaticImputationConfig, SynthesisConfig,
                                           SynthesisMICEConfig, Synthesizer, default_synthesizers)
from privehr.core.config.training import (Cell, DPExpMConfig, DPSGDConfig, DPSGDSettings, EvaluationConfig,
                                          ExpMNFConfig, GRUDConfig, NonPrivateConfig, NonPrivateSettings, SplitConfig,
                                          TrainingConfig)
from privehr.core.config.release import FeaturizerSource, RecordCount, ReleaseConfig, ScoringConfig, SignerTrust
from privehr.core.config.pipeline import PipelineConfig, VersioningConfig
from privehr.core.config.audit import AuditConfig
from privehr.core.config.profiles import BRIDGES_2023_EPSILONS, DEMO_SYNTHESIS, PROFILES, load_config

__all__ = ["Label", "Model", "Method", "AuditedMethod", "Loss", "DPSGDClipping", "FineGrainedClipping",
           "PositiveFloat", "RunId", "RUN_ID_PATTERN", "PrivacyConfig", "DataConfig", "ValidationConfig", "PagesConfig", "DEFAULT_PAGES_PORT",
           "StewardConfig", "MICEConfig", "StaticImputationConfig", "EHRPrepareConfig", "DPNFConfig", "HFlowConfig",
           "MarginalConfig", "Synthesizer", "default_synthesizers", "SynthesisMICEConfig", "Budget",
           "SynthesisConfig", "SplitConfig", "NonPrivateSettings", "NonPrivateConfig", "DPSGDSettings",
           "DPSGDConfig", "DPExpMConfig", "ExpMNFConfig", "GRUDConfig", "Cell", "TrainingConfig", "EvaluationConfig",
           "VersioningConfig", "PipelineConfig", "ReleaseConfig", "FeaturizerSource", "RecordCount", "ScoringConfig",
           "SignerTrust", "AuditConfig", "BRIDGES_2023_EPSILONS", "DEMO_SYNTHESIS",
           "PROFILES", "load_config", "_Strict", "_moved", "_resume_needs_run_id", "_ledger_beside_runs",
           "_default_ledger", "project_ledger"]
