"""Where releases are recorded and what they may spend: the ledger, the budget, the one delta, the noise source."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from privehr.core.config.base import _moved, _Strict, PositiveFloat

__all__ = ["PrivacyConfig"]


class PrivacyConfig(_Strict):
    """The privacy ledger, the budget each dataset may spend, the one delta, and where DP noise comes from."""

    ledger_path: Path = Field(Path("artifacts/privacy_ledger.jsonl"),
                              description="append-only record of every release per dataset (proven writable "
                                          "before any private record is read); default: privacy_ledger.jsonl in "
                                          "the run's artifacts_dir")
    budget_epsilon: PositiveFloat | None = Field(
        None, description="refuse runs whose releases would take the dataset's composed epsilon above this; a "
                          "release without a DP guarantee (non-private, ExpM+NF, reproducible noise) never fits")
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta of every DP release and of the ledger's "
                                                      "composition")
    reproducible_noise: bool = Field(
        False, description="seed the noise and sampling of every DP mechanism from the configuration (tests, "
                           "debugging). Every release made so is recorded as not DP; by default they come from "
                           "OS entropy and are never stored")
    dataset_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._:-]+$", description="the dataset's identity in the ledger, assigned by the data "
        "steward; default: sha256 of its sorted subject ids (a re-export of the same patients composes with it)")

    _budget_delta_moved = _moved("budget_delta", "privacy.delta")


def _ledger_beside_runs(config):
    """Unless ``privacy.ledger_path`` is set, the ledger lives in ``artifacts_dir`` (where the runs go), never in a
    directory the user did not name."""
    if "ledger_path" not in config.privacy.model_fields_set:
        privacy = config.privacy.model_copy(update={"ledger_path": _default_ledger(config)})
        privacy.__pydantic_fields_set__.discard("ledger_path")  # still the default, in its place
        config.privacy = privacy
    return config


def _default_ledger(config) -> Path:
    return Path(config.artifacts_dir) / PrivacyConfig.model_fields["ledger_path"].default.name
