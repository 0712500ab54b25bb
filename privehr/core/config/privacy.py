"""Where releases are recorded and what they may spend: the ledger (which holds the budget), the one delta, the noise
source."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from privehr.core.config.base import _moved, _Strict, PositiveFloat

__all__ = ["PrivacyConfig", "LEDGER_ENV", "project_root", "project_ledger", "DEFAULT_EPSILON_CEILING"]

LEDGER_ENV = "PRIVEHR_LEDGER"  # one ledger file for every run on this machine, wherever it starts
PROJECT_FILE = "prefect.yaml"  # marks a privehr project (its deployments): the default ledger lives in it
# above the whole 2020 US Census's epsilon (~19.6 for its persons files, Abowd et al. 2022): no single release here
# needs more; the ceiling is a setting, and a release above it only with allow_above_ceiling, labelled weak
DEFAULT_EPSILON_CEILING = 20.0


class PrivacyConfig(_Strict):
    """The privacy ledger, the budget each dataset may spend, the one delta, and where DP noise comes from."""

    ledger_path: Path = Field(Path("artifacts/privacy_ledger.jsonl"),
                              description="append-only, hash-chained record of every release per dataset (proven "
                                          "writable before any private record is read); default: $PRIVEHR_LEDGER, "
                                          "else privacy_ledger.jsonl in an artifacts_dir given explicitly, else in "
                                          "artifacts/ of the project (the directory of prefect.yaml), never the "
                                          "working directory's")
    budget_epsilon: PositiveFloat | None = Field(
        None, description="the per-patient budget this run expects: the project's budget lives in the ledger "
                          "(`privehr privacy budget --set`) and binds every run; a ledger without one records this as "
                          "its first, a different one is refused. A release without a DP guarantee never fits")
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta of every DP release and of the ledger's "
                                                      "composition")
    reproducible_noise: bool = Field(
        False, description="seed the noise and sampling of every DP mechanism from the configuration (tests, "
                           "debugging). Every release made so is recorded as not DP; by default they come from "
                           "OS entropy and are never stored")
    dataset_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._:-]+$", description="the source's label in the ledger, assigned by the data "
        "steward; default: the input's absolute path. A label only: a patient's spend composes every release that "
        "used them, whatever source, copy or path it came through")

    epsilon_ceiling: PositiveFloat = Field(
        DEFAULT_EPSILON_CEILING, description="refuse any single release planned above this epsilon (a target of 1e9 "
                                             "is no privacy); default 20, above the 2020 US Census's whole ~19.6")
    allow_above_ceiling: bool = Field(
        False, description="admit releases above epsilon_ceiling; each is labelled weak in the ledger's view and the "
                           "reports")

    _budget_delta_moved = _moved("budget_delta", "privacy.delta")

    def check_targets(self, epsilons, where: str) -> None:
        """Refuse target epsilons above the ceiling (unless allowed): one line, before anything is read."""
        over = [e for e in epsilons if e > self.epsilon_ceiling]
        if over and not self.allow_above_ceiling:
            raise ValueError(f"{where} asks for epsilon {max(over):g}, above privacy.epsilon_ceiling "
                             f"{self.epsilon_ceiling:g} (a release there protects almost no one). Lower it, or set "
                             "privacy.allow_above_ceiling: true to make it anyway (labelled weak)")


def _ledger_beside_runs(config):
    """Unless ``privacy.ledger_path`` is set, the ledger lives in ``artifacts_dir`` (where the runs go), never in a
    directory the user did not name."""
    if "ledger_path" not in config.privacy.model_fields_set:
        privacy = config.privacy.model_copy(update={"ledger_path": _default_ledger(config)})
        privacy.__pydantic_fields_set__.discard("ledger_path")  # still the default, in its place
        config.privacy = privacy
    return config


def project_root(start: Path | None = None) -> Path | None:
    """The privehr project a command runs in: the nearest directory holding prefect.yaml, walking up from ``start``
    (the working directory), else the source tree privehr is installed from (an editable install); None outside
    any project."""
    start = (start or Path.cwd()).absolute()
    for folder in (start, *start.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    source = Path(__file__).resolve().parents[3]  # privehr/core/config/privacy.py -> the repository
    return source if (source / PROJECT_FILE).is_file() else None


def _default_ledger(config) -> Path:
    """Where the ledger is when ``privacy.ledger_path`` is not set (always an absolute path):

    1. ``$PRIVEHR_LEDGER``: one ledger for every run that sees the variable;
    2. an ``artifacts_dir`` the configuration names: its ``privacy_ledger.jsonl`` (the runs and their ledger where
       the user pointed them);
    3. ``artifacts/privacy_ledger.jsonl`` of the project (:func:`project_root`), whatever the working directory;
    4. outside any project, the default ``artifacts_dir`` of the working directory.
    """
    if "artifacts_dir" in config.model_fields_set and not os.environ.get(LEDGER_ENV):
        return (Path(config.artifacts_dir) / PrivacyConfig.model_fields["ledger_path"].default.name).absolute()
    return project_ledger(Path(config.artifacts_dir))


def project_ledger(artifacts_dir: Path = Path("artifacts")) -> Path:
    """The project's ledger where no configuration names one: ``$PRIVEHR_LEDGER``, else ``artifacts/`` of the project
    (:func:`project_root`), else ``artifacts_dir`` of the working directory (an absolute path)."""
    name = PrivacyConfig.model_fields["ledger_path"].default.name
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV]).expanduser().absolute()
    root = project_root()
    return ((root / "artifacts" if root else artifacts_dir) / name).absolute()
