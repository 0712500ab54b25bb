"""``privehr-audit``: the membership-inference audit of a finished run."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from privehr.core.config.base import _moved, _Strict, AuditedMethod, Label, Model, PositiveFloat
from privehr.core.config.privacy import PrivacyConfig
from privehr.core.config.training import DPSGDSettings, NonPrivateSettings

__all__ = ["AuditConfig"]


class AuditConfig(_Strict):
    """Membership-inference audit of a finished run: LiRA with shadow models and the one-run bound.

    Shadows are trained with the same mechanism as the audited model, on random halves of the run's
    training split (the audit population); each shadow in turn is the target. The attack statistics are
    computed from the private training split without noise: the audit is recorded in the ledger as a
    release without a DP guarantee.
    """

    run_dir: Path = Field(..., description="a finished privehr-pipeline run (its features are reused)")
    label: Label = "mort_icu"
    model: Model = "logistic_regression"
    mechanisms: list[AuditedMethod] = Field(default_factory=lambda: ["non_private", "dp_sgd"], min_length=1)
    shadows: int = Field(16, ge=4, description="even; every example is IN for exactly half; at least 4, so that "
                                                "leaving one out still leaves IN and OUT shadows for every example")
    epsilon: PositiveFloat = Field(1.0, description="target epsilon of the DP-SGD and DP-trained ExpM shadows, and "
                                                    "ExpM+NF's eps~ (the ExpM shadows train by the audited run's "
                                                    "training.expm_nf / training.dp_expm_nf settings)")
    privacy: PrivacyConfig = Field(PrivacyConfig(), description="the ledger the audit's (non-DP) statistics are "
                                   "recorded in, the shadows' delta, and the noise switch (reproducible_noise also "
                                   "seeds the canary draw)")
    non_private: NonPrivateSettings = Field(default_factory=lambda: NonPrivateSettings(
        learning_rate=3e-3, weight_decay=0.0, max_epochs=30),
        description="an overfit non-private model (its schedule; the architecture is the audited run's)")
    dp_sgd: DPSGDSettings = Field(DPSGDSettings(), description="the DP-SGD shadows' training (their target is "
                                                              "``epsilon``)")
    seed: int = Field(0, description="initialisation of the shadows (public: it is not DP randomness)")
    significance: float = Field(0.05, gt=0, lt=1, description="of the one-run epsilon lower bound")

    _delta_moved = _moved("delta", "privacy.delta")

    _below_ceiling = model_validator(mode="after")(
        lambda self: self.privacy.check_targets([self.epsilon], "epsilon") or self)

    @model_validator(mode="after")
    def _even(self):
        if self.shadows % 2:
            raise ValueError("shadows must be even (every example IN for exactly half of them)")
        return self
