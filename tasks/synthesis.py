"""DP-NF synthesis: one flow per (imputation, budget, run), trained on that imputation's training
patients, and its synthetic tables in original units, raw and truncated to the spec's bounds.

Layout in the run directory (``job`` = ``imp<i>-<budget>-run<r>``):

* ``releases/<job>.json``: the release record: mechanism, sigma, q, T, delta, epsilon (PRV, RDP,
  GDP), mu, where the noise came from, the scaling and whether the guarantee covers it, the files;
  the flow enters the privacy ledger as soon as it is trained;
* ``synthetic/<job>-r<k>[-truncated].csv``: synthetic tables of DP flows whose scaling is
  data-independent (post-processing of a DP release: releasable);
* ``intermediate/flows/<job>.pt`` (and the loss curve), and ``intermediate/synthetic/`` for the
  tables of non-private flows (they can memorise patients) or of flows scaled by training statistics.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from models.classifiers import seeded_build
from models.derived_columns import add_derived
from models.device import resolve_device
from models.dp_nf import DensityHyperparameters, mean_log_likelihood, poisson_batch, train_density
from models.maf import MAF
from models.table_scaling import AffineScaling
from privehr.config import Budget, SynthesisConfig
from privehr.specs import load_ehr_spec
from tasks.compute import share_cores
from tasks.privacy_ledger import planned_noise, record_release
from tasks.progress import progress_artifact
from tasks.run_directory import INTERMEDIATE
from tasks.run_logging import run_logger

__all__ = ["synthesize", "imputed_tables"]


def imputed_tables(run_dir: str | Path, imputation: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(train, test, imputation summary) of one MICE dataset of an ``impute`` task's run directory."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "imputation.json").read_text())
    folder = run_dir / INTERMEDIATE / "imputed"
    read = lambda part: pd.read_csv(folder / f"{part}_{imputation}.csv", index_col=0)  # noqa: E731
    return read("train"), read("test"), summary


def _seed(job: dict) -> int:
    """The job's seed for initialisation and sampling: distinct for every (imputation, budget, run)."""
    return int(hashlib.sha256(job["job_id"].encode()).hexdigest()[:8], 16)


@task(name="synthesize")
def synthesize(run_dir: str, job: dict, config: SynthesisConfig, dataset: str, device: str = "auto") -> str:
    """Fit one DP-NF, record it in the privacy ledger, sample ``config.releases`` synthetic tables; return
    the release record's path."""
    run_dir_path = Path(run_dir)
    path = run_dir_path / "releases" / f"{job['job_id']}.json"
    if config.resume and path.exists():  # written last: the flow and its tables are complete
        run_logger().info("synthesize %s: done by an earlier attempt of this run", job["job_id"])
        record_release(run_dir, path, dataset, str(config.ledger_path))  # in case that attempt died just before
        return str(path)
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
    batch, _ = poisson_batch(len(x), nf.sample_rate)
    sigma, q, _ = planned_noise(config, budget, len(x))
    seed = _seed(job)
    flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers), seed).to(target)
    hp = DensityHyperparameters(learning_rate=nf.learning_rate, batch_size=batch, steps=nf.steps,
                                max_grad_norm=nf.max_grad_norm, seed=seed)
    release = train_density(flow, x, hp, sigma, config.delta,
                            progress=progress_artifact(f"DP-NF {job['job_id']}: DP-SGD steps"),
                            noise_seed=seed + 1 if nf.reproducible_noise else None)

    # held-out log-likelihood in original units: log p(x) = log p(z) - sum log scale (seed 001 Table 1)
    x_test = torch.tensor(scaling.transform(test), dtype=torch.float32, device=target)
    test_log_likelihood = mean_log_likelihood(flow, x_test) - float(np.log(scaling.scale_).sum())
    releasable = release.mechanism == "dp_sgd" and not scaling.private_  # everything in it is covered by DP
    flows_dir = run_dir_path / INTERMEDIATE / "flows"
    out_dir = run_dir_path / ("synthetic" if releasable else f"{INTERMEDIATE}/synthetic")
    for folder in (flows_dir, out_dir, run_dir_path / "releases"):
        folder.mkdir(parents=True, exist_ok=True)
    torch.save(flow.state_dict(), flows_dir / f"{job['job_id']}.pt")
    # the loss curve is a statistic of the private training batches: kept with the patient-level files
    (flows_dir / f"{job['job_id']}.history.json").write_text(json.dumps(release.history))

    rows = config.rows or summary["patients"]["train"] + summary["patients"]["test"]
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
    record = {"job": job, "budget_label": budget.label, **release.as_dict(),
              "expected_batch": q * len(x), "training_patients": int(len(x)), "rows_per_table": rows,
              "test_log_likelihood": test_log_likelihood, "nonfinite_rows_dropped": nonfinite,
              "scaling": {"kind": config.scaling, "inside_guarantee": not scaling.private_},
              "releasable": releasable, "files": files, "flow": str(flows_dir / f"{job['job_id']}.pt"),
              "model": {"blocks": nf.blocks, "hidden_size": nf.hidden_size, "hidden_layers": nf.hidden_layers}}
    path.write_text(json.dumps(record, indent=2, default=float))
    record_release(run_dir, path, dataset, str(config.ledger_path))  # at once: a later failure loses no entry
    run_logger().info("synthesize %s: %s, T=%d, q=%.3g, epsilon %s; %d tables of %d rows (%d non-finite dropped)",
                      job["job_id"], release.mechanism, nf.steps, q, release.epsilon, config.releases, rows, nonfinite)
    return str(path)
