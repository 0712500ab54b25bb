"""privehr-score: verify a release bundle and its signer -> score the stays of a MIMIC-Extract file with its models
-> a CSV. A bundle signed by a key that no pin (``key_fingerprint``), own signing key or earlier trust-on-first-use
vouches for is refused before anything is read.

Applying a released model needs the bundle alone (its window, featurizer and weights); the flow passes paths and
returns counts, so no patient-level value enters Prefect. Schedule it like any deployment (prefect.yaml's
``privehr-score/scheduled`` holds an example, off until a team points it at its bundle and data).
"""

from __future__ import annotations

from prefect import flow

from privehr.core.config import ScoringConfig
from privehr.io.permissions import private_run
from privehr.tasks.predict import score_stays_task

__all__ = ["score"]


@flow(name="privehr-score", log_prints=False)
@private_run  # umask 077: the risks are patient-level
def score(config: ScoringConfig) -> dict:
    """Score ``config.data`` with ``config.bundle``; return the counts and where the risks are."""
    return score_stays_task(config.bundle, config.data, config.out, trust=config.signer_trust(), models=config.models,
                            chunk_rows=config.chunk_rows, out_format=config.format, recalibrate=config.recalibrate)
