"""DP-NF synthesis: one flow per (imputation, budget, run), trained on that imputation's training
patients, and its synthetic tables in original units, raw and truncated to the spec's bounds.

Layout in the run directory (``job`` = ``imp<i>-<budget>-run<r>``):

* ``releases/<job>.json``: the release record: mechanism, sigma, q, T, delta, epsilon (PRV, RDP,
  PLD, GDP), mu, where the noise came from (never the seed), the guarantee ("DP", or "not DP" for
  reproducible noise), the scaling and whether the guarantee covers it, the files; no count of
  private patients unless the spec declares it public. The flow enters the privacy ledger as soon as
  it is trained, under the reservation of the budget check, before it is saved anywhere;
* ``synthetic/<job>-r<k>[-truncated].csv``: synthetic tables of DP flows whose scaling is
  data-independent (post-processing of a DP release: releasable);
* ``intermediate/flows/<job>.pt`` (and the loss curve), and ``intermediate/synthetic/`` for the
  tables of non-private flows (they can memorise patients) or of flows scaled by training statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from models.classifiers import seeded_build
from models.derived_columns import add_derived
from models.device import resolve_device
from models.dp_nf import DensityHyperparameters, mean_log_likelihood, train_density
from models.maf import MAF
from models.noisy_count import noisy_count
from models.privacy_ledger import GUARANTEES, LedgerEntry
from models.randomness import NoiseSource, public_seed
from models.release_plan import ReleasePlan, rate_batch
from models.table_scaling import AffineScaling
from privehr.config import Budget, DPNFConfig, SynthesisConfig
from privehr.specs import load_ehr_spec
from tasks.compute import share_cores
from privehr.strict_json import strict_dumps
from tasks.privacy_ledger import record_release
from tasks.progress import progress_artifact
from tasks.run_directory import INTERMEDIATE
from tasks.run_logging import run_logger

__all__ = ["synthesize", "imputed_tables", "release_patient_count", "synthesis_plan", "density_hyperparameters",
           "synthetic_rows", "COUNT_KEY", "needs_noisy_count"]

COUNT_KEY = "patient-count"  # the reservation of the noisy patient count


def imputed_tables(run_dir: str | Path, imputation: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(train, test, imputation summary) of one MICE dataset of an ``impute`` task's run directory."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "imputation.json").read_text())
    folder = run_dir / INTERMEDIATE / "imputed"
    read = lambda part: pd.read_csv(folder / f"{part}_{imputation}.csv", index_col=0)  # noqa: E731
    return read("train"), read("test"), summary


def _seed(job: dict) -> int:
    """The job's seed for initialisation and for sampling tables from the released flow (public: neither is
    DP randomness); distinct for every (imputation, budget, run)."""
    return public_seed(job["job_id"])


def density_hyperparameters(nf: DPNFConfig, n: int, seed: int) -> DensityHyperparameters:
    """DP-NF's optimiser settings; the non-private flow's minibatch is the plans' expected batch b."""
    return DensityHyperparameters(learning_rate=nf.learning_rate, batch_size=rate_batch(n, nf.sample_rate),
                                  steps=nf.steps, seed=seed)


def synthesis_plan(config: SynthesisConfig, budget: Budget, n: int) -> ReleasePlan | None:
    """The plan of a DP-NF flow on ``n`` patients at ``budget`` (None: non-private), known before training."""
    if budget.kind == "non_private":
        return None
    nf = config.dpnf
    return ReleasePlan.for_steps(n, nf.sample_rate, nf.steps, kind=budget.kind, value=budget.value,
                                 delta=config.privacy.delta, max_grad_norm=nf.max_grad_norm)


def needs_noisy_count(config: SynthesisConfig, spec) -> bool:
    """Tables are sized by a noisy count unless rows is set or the spec declares the count public."""
    return config.rows is None and not spec.public_patient_count


def synthetic_rows(run_dir: str | Path, config: SynthesisConfig, spec, summary: dict) -> int:
    """Rows per synthetic table: ``rows``, else the delivery's patient count if the spec declares it public (the
    records delivered: the count after quarantine depends on private values), else the released noisy count."""
    if config.rows is not None:
        return config.rows
    if spec.public_patient_count:
        return summary["decisions"]["records_read"]
    return json.loads((Path(run_dir) / "released_count.json").read_text())["count"]


@task(name="release-patient-count")
def release_patient_count(run_dir: str, config: SynthesisConfig, reservation: str | None) -> int | None:
    """Release the table's patient count with epsilon-DP noise (two-sided geometric) when the tables need it."""
    spec = load_ehr_spec(config.spec)
    out = Path(run_dir) / "released_count.json"
    if not needs_noisy_count(config, spec) or out.exists():
        return None
    summary = json.loads((Path(run_dir) / "imputation.json").read_text())
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, COUNT_KEY)
    count = noisy_count(summary["patients"]["train"] + summary["patients"]["test"], config.count_epsilon,
                        noise.numpy_generator("count"))
    record_release(config.privacy.ledger_path, reservation, LedgerEntry(
        "", "", "dp", config.count_epsilon, guarantee=noise.guarantee, what="patient count"))
    out.write_text(json.dumps({"count": count, "epsilon": config.count_epsilon, "mechanism": "two-sided geometric",
                               "guarantee": noise.label}))
    run_logger().info("released the patient count with noise (epsilon %g)", config.count_epsilon)
    return count


@task(name="synthesize")
def synthesize(run_dir: str, job: dict, config: SynthesisConfig, reservation: str | None,
               device: str = "auto") -> str:
    """Fit one DP-NF, record it in the privacy ledger under ``reservation``, sample ``config.releases``
    synthetic tables; return the release record's path."""
    run_dir_path = Path(run_dir)
    path = run_dir_path / "releases" / f"{job['job_id']}.json"
    if config.resume and path.exists():  # written last: the flow and its tables are complete (and recorded)
        run_logger().info("synthesize %s: done by an earlier attempt of this run", job["job_id"])
        return str(path)
    if reservation is None:
        raise RuntimeError(f"synthesize {job['job_id']}: no reservation from the budget check")
    share_cores()
    spec = load_ehr_spec(config.spec)
    train, test, summary = imputed_tables(run_dir, job["imputation"])
    attributes = summary["attributes"]
    bounds = {a.name: (a.valid_low, a.valid_high) for a in spec.attributes if a.name in attributes}
    scaling = (AffineScaling.from_bounds(bounds, attributes) if config.scaling == "bounds"
               else AffineScaling.fit(train[attributes]))
    target = resolve_device(device)
    x = torch.tensor(scaling.transform(train), dtype=torch.float32, device=target)

    budget, nf = Budget(**job["budget"]), config.dpnf
    plan = synthesis_plan(config, budget, len(x))
    seed = _seed(job)
    flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers), seed).to(target)
    hp = density_hyperparameters(nf, len(x), seed)
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, job["job_id"])
    release = train_density(flow, x, hp, plan, noise,
                            progress=progress_artifact(f"DP-NF {job['job_id']}: DP-SGD steps"))
    guarantee = "non_private" if plan is None else noise.guarantee
    record_release(config.privacy.ledger_path, reservation,  # at once: a later failure loses no entry
                   LedgerEntry("", "", "non_private", what="DP-NF flow") if plan is None
                   else plan.ledger_entry(guarantee, "DP-NF flow"))

    # held-out log-likelihood in original units: log p(x) = log p(z) - sum log scale (seed 001 Table 1)
    x_test = torch.tensor(scaling.transform(test), dtype=torch.float32, device=target)
    test_log_likelihood = mean_log_likelihood(flow, x_test) - float(np.log(scaling.scale_).sum())
    releasable = guarantee == "dp" and not scaling.private_  # everything in it is covered by DP
    flows_dir = run_dir_path / INTERMEDIATE / "flows"
    out_dir = run_dir_path / ("synthetic" if releasable else f"{INTERMEDIATE}/synthetic")
    for folder in (flows_dir, out_dir, run_dir_path / "releases"):
        folder.mkdir(parents=True, exist_ok=True)
    torch.save(flow.state_dict(), flows_dir / f"{job['job_id']}.pt")
    # the loss curve is a statistic of the private training batches: kept with the patient-level files
    (flows_dir / f"{job['job_id']}.history.json").write_text(json.dumps(release.history))

    rows = synthetic_rows(run_dir, config, spec, summary)
    generator = torch.Generator().manual_seed(seed + 7919)
    files, nonfinite = [], 0
    for k in range(config.releases):
        table = scaling.inverse_transform(flow.sample(rows, generator).cpu().numpy())
        finite = np.isfinite(table.to_numpy()).all(axis=1)
        nonfinite += int((~finite).sum())
        table = table[finite].reset_index(drop=True)
        truncated = table.clip(lower=pd.Series({c: b[0] for c, b in bounds.items()}),
                               upper=pd.Series({c: b[1] for c, b in bounds.items()}), axis=1)
        for name, part in ((f"{job['job_id']}-r{k}.csv", table), (f"{job['job_id']}-r{k}-truncated.csv", truncated)):
            add_derived(part, spec.derived).to_csv(out_dir / name, index=False)
            files.append({"release": k, "truncated": name.endswith("-truncated.csv"), "path": str(out_dir / name)})
    record = {"job": job, "budget_label": budget.label, **release.as_dict(), "guarantee": GUARANTEES[guarantee],
              **({"patients_delivered": summary["decisions"]["records_read"]} if spec.public_patient_count else {}),
              "rows_per_table": rows,
              "test_log_likelihood": test_log_likelihood, "nonfinite_rows_dropped": nonfinite,
              "scaling": {"kind": config.scaling, "inside_guarantee": not scaling.private_},
              "releasable": releasable, "files": files, "flow": str(flows_dir / f"{job['job_id']}.pt"),
              "model": {"blocks": nf.blocks, "hidden_size": nf.hidden_size, "hidden_layers": nf.hidden_layers}}
    path.write_text(strict_dumps(record, indent=2, default=float))
    run_logger().info("synthesize %s: %s (%s), T=%d, epsilon %s; %d tables (%d non-finite rows dropped)",
                      job["job_id"], release.mechanism, GUARANTEES[guarantee], nf.steps, release.epsilon,
                      config.releases, nonfinite)
    return str(path)
