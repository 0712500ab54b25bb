"""Tasks of ``privehr-private-inference``: the records, the budget, one posterior fit per job, the exact posterior.

The records (one row per subject, the DP unit) are patient-level: they stay under ``intermediate/``. Every fit
enters the privacy ledger as soon as it exists (DP-NF-VI and the route-(b) DP-NF as DP releases with their plan's
epsilon by PRV, RDP and PLD; the exact posterior and the non-private NF-VI as releases without a guarantee), and
writes ``posteriors/<job>.json`` (posterior mean, SD, correlation, the plan's record) and a sample of its draws.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from privehr.models.device import resolve_device
from privehr.models.inference.dp_vi import VIHyperparameters
from privehr.models.inference.likelihood import Likelihood, get_likelihood
from privehr.models.inference.posterior_reference import reference_posterior
from privehr.models.privacy.ledger import LedgerEntry, dataset_id_of
from privehr.models.inference.routes import FlowShape, private_posterior, synthetic_posterior
from privehr.models.privacy.randomness import NoiseSource, public_seed
from privehr.models.privacy.release_plan import ReleasePlan, Reserved, rate_batch
from privehr.core.run_layout import RunLayout  # noqa: E402
from privehr.core.config import DPNFConfig
from privehr.core.errors import InputError
from privehr.core.inference_config import InferenceConfig, VIConfig
from privehr.core.strict_json import strict_dumps
from privehr.tasks.compute import share_cores
from privehr.io.ledger import Ledger, record_release
from privehr.tasks.release_budget import check_delta, reserve_planned
from privehr.tasks.run_logging import exact, run_logger
from privehr.models.synthesis.flow_synthesizers import density_hyperparameters

__all__ = ["inference_likelihood", "prepare_records", "check_inference_budget", "exact_posterior", "fit_posterior",
           "vi_hyperparameters", "mu_plan", "EXACT_KEY",
           "result_path"]

EXACT_KEY = "exact"
KEPT_DRAWS = 2000  # draws of each posterior kept for the figures


def inference_likelihood(config: InferenceConfig) -> Likelihood:
    try:
        return get_likelihood(config.model)
    except ValueError as err:
        raise InputError(f"{err}; set model to one of them") from None


def _records_path(run_dir: str | Path) -> Path:
    return RunLayout(run_dir).records


def result_path(run_dir: str | Path, key: str) -> Path:
    return RunLayout(run_dir).posterior(key)


def _read_table(path: Path, likelihood: Likelihood) -> torch.Tensor:
    """The user's records: the model's columns, numeric and finite; errors name columns and counts, never values."""
    if not path.exists():
        raise InputError(f"records file not found: {path}; pass data_path, or leave it out to simulate the design")
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        raise InputError(f"{path} is not a readable CSV table; deliver one row per subject with a header row") from None
    missing = [c for c in likelihood.record_names if c not in table.columns]
    if missing:
        raise InputError(f"{path} lacks the column(s) {', '.join(missing)} that model {likelihood.name!r} needs; "
                         f"its records have the columns {', '.join(likelihood.record_names)}")
    values = table[list(likelihood.record_names)].apply(pd.to_numeric, errors="coerce")
    if values.empty:
        raise InputError(f"{path} holds no records; deliver one row per subject")
    bad = {c: int(n) for c, n in (~np.isfinite(values)).sum().items() if n}
    if bad:
        listed = ", ".join(f"{c} ({n} row(s))" for c, n in bad.items())
        raise InputError(f"{path}: missing or non-numeric values in {listed}; impute or drop those subjects first")
    records = torch.tensor(values.to_numpy(), dtype=torch.float32)
    outside = (likelihood.support(records) != records).sum(0)
    if outside.any():
        listed = ", ".join(f"{c} ({int(n)} row(s))" for c, n in zip(likelihood.record_names, outside) if n)
        raise InputError(f"{path}: values outside model {likelihood.name!r}'s domain in {listed}; correct or drop "
                         "those subjects (the model's design ranges are in its documentation)")
    return records


@task(name="prepare-inference-records")
def prepare_records(run_dir: str, config: InferenceConfig) -> int:
    """Read (or simulate) the records into ``intermediate/records.pt``; return their number."""
    likelihood = inference_likelihood(config)
    out = _records_path(run_dir)
    if not (config.resume and out.exists()):
        if config.data_path is not None:
            records = _read_table(Path(config.data_path), likelihood)
        else:
            try:
                records = likelihood.simulate(config.subjects, torch.Generator().manual_seed(config.data_seed))
            except NotImplementedError as err:
                raise InputError(f"{err}; pass data_path with the records") from None
        torch.save(records, out)
    n = len(torch.load(out, weights_only=True))
    run_logger().info("records: %s subject(s), model %s", exact(n), config.model)
    return n


def _records(run_dir: str | Path, device: torch.device) -> torch.Tensor:
    return torch.load(_records_path(run_dir), weights_only=True).to(device)


def inference_dataset_id(config: InferenceConfig, n: int) -> str:
    """The steward's ``privacy.dataset_id``, else the keyed hash of the delivered file's bytes (or of the
    simulation's identity), as ``records-hmac:<hex>`` (the ledger reads ``subjects-hmac:`` ids as an older
    privehr's defaults, charged to every source)."""
    if config.privacy.dataset_id:
        return config.privacy.dataset_id
    if config.data_path is not None:
        identity = hashlib.sha256(Path(config.data_path).read_bytes()).hexdigest()
    else:
        identity = f"simulated/{config.model}/{config.data_seed}/{n}"
    return "records-hmac:" + dataset_id_of([identity], Ledger(config.privacy.ledger_path).key()).partition(":")[2]


def vi_hyperparameters(vi: VIConfig, n: int, temperature: float = 1.0, seed: int = 0) -> VIHyperparameters:
    return VIHyperparameters(learning_rate=vi.learning_rate, lr_decay=vi.lr_decay, draws=vi.draws, steps=vi.steps,
                             batch_size=rate_batch(n, vi.sample_rate), optimizer=vi.optimizer,
                             temperature=temperature, seed=seed)


def mu_plan(settings: VIConfig | DPNFConfig, n: int, mu: float, delta: float) -> ReleasePlan:
    """The plan of one release trained by ``settings`` (T steps at rate q, clipped to C) at a mu-GDP budget."""
    return ReleasePlan.for_mu(n, settings.sample_rate, settings.steps, mu=mu, delta=delta,
                              max_grad_norm=settings.max_grad_norm)


_WHAT = {"nf_vi": "NF-VI posterior", "dp_nf_vi": "DP-NF-VI posterior",
         "synthetic": "DP-NF of the records (VI on synthetic data)"}


def _job_plan(job: dict, config: InferenceConfig, n: int) -> ReleasePlan | None:
    """The plan of a job's release (None: the non-private NF-VI)."""
    if job["route"] == "nf_vi":
        return None
    settings = config.vi if job["route"] == "dp_nf_vi" else config.synthetic.density
    return mu_plan(settings, n, job["mu"], config.privacy.delta)


def _entry(job: dict, plan: ReleasePlan | None, guarantee: str) -> LedgerEntry:
    what = _WHAT.get(job["route"], _WHAT["synthetic"])
    return LedgerEntry("", "", "non_private", what=what) if plan is None else plan.ledger_entry(guarantee, what)


@task(name="check-inference-budget")
def check_inference_budget(run_dir: str, config: InferenceConfig, n: int) -> dict[str, Reserved]:
    """Plan and reserve every posterior release of the run before any is fitted (each plan built once, and handed
    to the fit that trains by it); raise if the budget would be exceeded."""
    check_delta(config.privacy.delta, n)
    kind = "reproducible" if config.privacy.reproducible_noise else "dp"
    planned: dict[str, tuple[LedgerEntry, ReleasePlan | None]] = {}
    plans: dict[tuple, ReleasePlan | None] = {}  # the runs of a (route, mu) share one plan
    if config.non_private and not (config.resume and result_path(run_dir, EXACT_KEY).exists()):
        planned[EXACT_KEY] = (LedgerEntry("", "", "non_private", what="exact posterior"), None)
    for job in config.jobs():
        if not (config.resume and result_path(run_dir, job["job_id"]).exists()):
            key = (job["route"], job.get("mu"))
            if key not in plans:
                plans[key] = _job_plan(job, config, n)
            planned[job["job_id"]] = (_entry(job, plans[key], kind), plans[key])
    reservations = reserve_planned(run_dir, inference_dataset_id(config, n), config,
                                   {k: e for k, (e, _) in planned.items()}, "posterior release(s)")
    return {k: Reserved(reservations[k], plan) for k, (_, plan) in planned.items()}


def _write(run_dir: str, key: str, result: dict, draws: torch.Tensor) -> str:
    run = RunLayout(run_dir)
    run.posteriors.mkdir(exist_ok=True)
    np.save(run.posterior_draws(key), draws[:KEPT_DRAWS].numpy().astype(np.float32))
    path = result_path(run_dir, key)
    path.write_text(strict_dumps(result, indent=2))  # written last: its existence means the fit is complete
    return str(path)


@task(name="exact-posterior")
def exact_posterior(run_dir: str, config: InferenceConfig, reserved: Reserved | None) -> str | None:
    """The exact posterior by importance sampling (the paper's "original nonlinear model" column); not DP."""
    if not config.non_private:
        return None
    path = result_path(run_dir, EXACT_KEY)
    if config.resume and path.exists():
        return str(path)
    if reserved is None:
        raise RuntimeError("exact posterior: no reservation from the budget check")
    share_cores()
    start = time.perf_counter()
    likelihood = inference_likelihood(config)
    records = _records(run_dir, torch.device("cpu")).double()
    reference = reference_posterior(likelihood, records, draws=config.reference_draws)
    record_release(config.privacy.ledger_path, reserved.reservation,
                   LedgerEntry("", "", "non_private", what="exact posterior"))
    if not reference.reliable:
        run_logger().warning("exact posterior: importance sampling kept an effective sample of %.0f of %d draws; "
                             "its moments are unreliable", reference.effective_sample_size, reference.draws)
    draws = _resample_reference(likelihood, reference, torch.Generator().manual_seed(0))
    result = {"key": EXACT_KEY, "route": "exact", "guarantee": "non-private (exact posterior)",
              "summary": reference.summary, "effective_sample_size": reference.effective_sample_size,
              "reliable": reference.reliable, "draws": reference.draws, "seconds": time.perf_counter() - start}
    return _write(run_dir, EXACT_KEY, result, draws)


def _resample_reference(likelihood: Likelihood, reference, generator: torch.Generator) -> torch.Tensor:
    """Draws with the exact posterior's mean and covariance, for the figures (Gaussian, from the summary)."""
    mean = torch.tensor(reference.summary["mean"], dtype=torch.float64)
    sd = torch.tensor(reference.summary["sd"], dtype=torch.float64)
    corr = torch.tensor(reference.summary["correlation"], dtype=torch.float64)
    chol = torch.linalg.cholesky(corr * sd[:, None] * sd[None, :] + 1e-18 * torch.eye(likelihood.dim))
    return (mean + torch.randn(KEPT_DRAWS, likelihood.dim, generator=generator, dtype=torch.float64) @ chol.T).float()


@task(name="fit-posterior")
def fit_posterior(run_dir: str, job: dict, config: InferenceConfig, reserved: Reserved | None,
                  device: str = "auto") -> str:
    """One posterior: non-private NF-VI, DP-NF-VI at (loss, mu), or VI on DP synthetic data at mu, trained by the
    plan the budget check reserved."""
    path = result_path(run_dir, job["job_id"])
    if config.resume and path.exists():
        run_logger().info("posterior %s: done by an earlier attempt of this run", job["job_id"])
        return str(path)
    if reserved is None:
        raise RuntimeError(f"posterior {job['job_id']}: no reservation from the budget check")
    share_cores()
    start = time.perf_counter()
    likelihood = inference_likelihood(config)
    records = _records(run_dir, resolve_device(device))
    n, seed = len(records), public_seed(job["job_id"])
    shape = FlowShape(config.vi.blocks, config.vi.hidden_size, config.vi.hidden_layers)
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, job["job_id"])
    tau = config.temperature if job["loss"] == "tempered" else 1.0
    plan = reserved.plan
    if job["route"] == "nf_vi":
        fit = private_posterior(likelihood, records, vi_hyperparameters(config.vi, n, seed=seed), shape, None,
                                seed=seed, summary_draws=config.summary_draws)
    elif job["route"] == "dp_nf_vi":
        fit = private_posterior(likelihood, records, vi_hyperparameters(config.vi, n, tau, seed), shape, plan, noise,
                                seed=seed, summary_draws=config.summary_draws)
    else:
        density = config.synthetic.density
        fit = synthetic_posterior(likelihood, records, density_hyperparameters(density, n, seed),
                                  FlowShape(density.blocks, density.hidden_size, density.hidden_layers), plan,
                                  vi_hyperparameters(config.vi, n, seed=seed), shape, config.synthetic.datasets, n,
                                  noise, seed=seed, summary_draws=config.summary_draws)
    entry = _entry(job, plan, noise.guarantee)
    record_release(config.privacy.ledger_path, reserved.reservation, entry)  # at once: a later failure loses none
    guarantee = "non-private" if plan is None else noise.label
    result = {"key": job["job_id"], **job, "temperature": tau, "guarantee": guarantee,
              "plan": None if plan is None else plan.record(), "summary": fit.summary,
              "synthetic_tables": fit.parts, "seconds": time.perf_counter() - start}
    run_logger().info("posterior %s: fitted in %.0f s (%s)", job["job_id"], result["seconds"], guarantee)
    return _write(run_dir, job["job_id"], result, fit.draws)
