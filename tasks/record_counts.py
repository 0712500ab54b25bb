"""The first budget check of a pipeline run and the record counts every plan is built from.

A DP-SGD plan's sampling rate q = 1 / ceil(n / b) and its steps T = epochs * ceil(n / b) are printed with every
release, so a plan built from the exact number of training stays n publishes n (remove one patient and q moves).
Here the counts are released first: the stays of train, dev and test, each with two-sided geometric noise at
``release.count_epsilon`` (Ghosh, Roughgarden, Sundararajan 2009). A stay is in exactly one split, so adding or
removing one changes one of the three counts by one: the three together are ``count_epsilon``-DP (parallel
composition, Dwork and Roth 2014, section 2.3). Every plan, the delta check and the bundle read these counts;
DP-SGD stays private whatever n is (Poisson sampling at rate q), so a noisy n costs utility only through an
epoch's length. With ``release.record_count: public`` the exact counts are used and recorded as that choice.

The same check reserves the featurizer's DP statistics (``release.featurizer: dp``): both releases are planned
without any count, so they are reserved together, before the plans that need the counts. Exact statistics
(``release.featurizer: exact``) are reserved as a release without a guarantee: every model the run trains is
post-processing of them, so the run is not DP for its patients (and under a budget it is refused).
"""

from __future__ import annotations

import json

from prefect import task

from privehr.core.config import PipelineConfig
from privehr.core.records import RecordCounts
from privehr.core.run_layout import RunLayout
from privehr.core.strict_json import strict_dumps
from privehr.io.ledger import record_release
from privehr.models.data.patient_split import SPLITS
from privehr.models.privacy.ledger import LedgerEntry
from privehr.models.privacy.noisy_count import noisy_count
from privehr.models.privacy.randomness import NoiseSource
from privehr.models.privacy.release_plan import GaussianPlan, Reserved
from privehr.tasks.features import EXACT_STATISTICS
from privehr.tasks.release_budget import pipeline_dataset_id, reserve_planned, run_members
from privehr.tasks.run_directory import read_summary
from privehr.tasks.run_logging import run_logger

__all__ = ["check_preprocessing_budget", "release_record_counts", "COUNTS_KEY", "STATISTICS_KEY", "preprocessing_plan"]

COUNTS_KEY, STATISTICS_KEY = "record-counts", "featurizer-statistics"


def preprocessing_plan(run_dir: str, config: PipelineConfig) -> dict[str, tuple[LedgerEntry, object]]:
    """The record counts (``release.record_count: dp``) and the featurizer's DP statistics (``release.featurizer:
    dp``) this run will release, by key (a resumed run reuses what its earlier attempt released, recorded then)."""
    release, privacy, run = config.release, config.privacy, RunLayout(run_dir)
    counted = config.resume and run.record_counts.exists()
    described = config.resume and run.featurizer.exists() and json.loads(run.featurizer.read_text()).get("release")
    guarantee = "reproducible" if privacy.reproducible_noise else "dp"
    planned: dict[str, tuple[LedgerEntry, object]] = {}
    if release.record_count == "dp" and not counted:
        planned[COUNTS_KEY] = (LedgerEntry("", "", "dp", release.count_epsilon, guarantee=guarantee,
                                           what="record counts"), None)
    if release.featurizer == "dp" and not described:
        plan = GaussianPlan.for_epsilon(release.featurizer_epsilon, privacy.delta)
        planned[STATISTICS_KEY] = (plan.ledger_entry(guarantee, "featurizer statistics"), plan)
    elif release.featurizer == "exact" and not described:  # every model is post-processing of exact statistics
        planned[STATISTICS_KEY] = (LedgerEntry("", "", "non_private", what=EXACT_STATISTICS), None)
    return planned


@task(name="check-preprocessing-budget")
def check_preprocessing_budget(run_dir: str, config: PipelineConfig) -> dict[str, Reserved]:
    """Reserve the record counts (``release.record_count: dp``) and the featurizer's DP statistics
    (``release.featurizer: dp``), citing the run's membership snapshot; raise if the budget would be exceeded (the
    patient-budget task has already left out every patient these two releases would take past it, so a refusal here
    is rare and spends nothing). Returns what it reserved by key."""
    # no decision here reads the exact counts (one patient would move it): a delta of 1/n or more is refused on the
    # released counts the plans are built from (check_privacy_budget)
    planned = preprocessing_plan(run_dir, config)
    if not planned:
        return {}
    reservations = reserve_planned(run_dir, pipeline_dataset_id(config), config,
                                   {k: e for k, (e, _) in planned.items()}, "preprocessing release(s)",
                                   out=RunLayout(run_dir).preprocessing_budget, members=run_members(run_dir, config))
    return {k: Reserved(reservations[k], plan) for k, (_, plan) in planned.items()}


@task(name="record-counts")
def release_record_counts(run_dir: str, config: PipelineConfig, reserved: Reserved | None) -> str:
    """Write ``record_counts.json``: the stays per split, noisy under the reservation (recorded in the ledger before
    they are written) or exact where the run declared them public; return its path."""
    run = RunLayout(run_dir)
    if config.resume and run.record_counts.exists():
        return str(run.record_counts)
    exact = {s: read_summary(run_dir, "split_summary").stays(s) for s in SPLITS}
    if config.release.record_count == "public":
        counts = RecordCounts(source="public", stays=exact, epsilon=None, release=None)
    else:
        noise = NoiseSource.for_release(config.privacy.reproducible_noise, "record counts")
        rng = noise.numpy_generator("counts")
        epsilon = config.release.count_epsilon
        noisy = {s: noisy_count(exact[s], epsilon, rng, minimum=1) for s in SPLITS}
        entry = LedgerEntry("", "", "dp", epsilon, guarantee=noise.guarantee, what="record counts")
        recorded = record_release(config.privacy.ledger_path, reserved.reservation, entry)
        counts = RecordCounts(source=noise.guarantee, stays=noisy, epsilon=epsilon, release=recorded.release)
    run.record_counts.write_text(strict_dumps(counts.model_dump(), indent=1))
    run_logger().info("record counts: %s (%s)", "released with geometric noise" if counts.release else "public",
                      counts.source)
    return str(run.record_counts)
