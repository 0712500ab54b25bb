"""DP-NF synthesis: one flow per (imputation, budget, run), trained on that imputation's training
patients, and its synthetic tables in original units, raw and truncated to the spec's bounds.

Layout in the run directory (``job`` = ``imp<i>-<budget>-run<r>``):

* ``releases/<job>.json``: the release record: mechanism, sigma, q, T, delta, epsilon (PRV, RDP,
  GDP), mu, the scaling and whether the guarantee covers it, the files;
* ``synthetic/<job>-r<k>[-truncated].csv``: synthetic tables of DP flows (post-processing of a DP
  release);
* ``intermediate/flows/<job>.pt`` and, for non-private flows, ``intermediate/synthetic/``: a
  non-private flow can memorise patients, so it and its samples stay with the patient-level files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from models.classifiers import seeded_build
from models.derived_columns import add_derived
from models.device import resolve_device
from models.dp_nf import DensityHyperparameters, mean_log_likelihood, train_density
from models.gaussian_dp import sigma_for_mu
from models.maf import MAF
from models.privacy_accounting import calibrate_noise_multiplier
from models.table_scaling import AffineScaling
from privehr.config import Budget, SynthesisConfig
from privehr.specs import load_ehr_spec
from tasks.progress import progress_artifact
from tasks.run_directory import INTERMEDIATE
from tasks.run_logging import run_logger

__all__ = ["synthesize", "imputed_tables", "poisson_batch"]


def imputed_tables(run_dir: str | Path, imputation: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(train, test, imputation summary) of one MICE dataset of an ``impute`` task's run directory."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "imputation.json").read_text())
    folder = run_dir / INTERMEDIATE / "imputed"
    read = lambda part: pd.read_csv(folder / f"{part}_{imputation}.csv", index_col=0)  # noqa: E731
    return read("train"), read("test"), summary


def poisson_batch(n: int, sample_rate: float) -> tuple[int, float]:
    """(expected batch, effective q): Opacus samples at q = 1 / ceil(n / batch)."""
    batch = max(1, math.ceil(sample_rate * n))
    return batch, 1 / math.ceil(n / batch)


def _noise_multiplier(budget: Budget, q: float, steps: int, delta: float) -> float | None:
    if budget.kind == "mu":
        return sigma_for_mu(budget.value, q, steps)
    if budget.kind == "epsilon":
        return calibrate_noise_multiplier(budget.value, delta, q, steps).noise_multiplier
    return None


def _seed(job: dict) -> int:
    return 1000 * job["imputation"] + job["run"]


@task(name="synthesize")
def synthesize(run_dir: str, job: dict, config: SynthesisConfig, device: str = "auto") -> str:
    """Fit one DP-NF and sample ``config.releases`` synthetic tables; return the release record's path."""
    run_dir_path = Path(run_dir)
    path = run_dir_path / "releases" / f"{job['job_id']}.json"
    if config.resume and path.exists():  # written last: the flow and its tables are complete
        run_logger().info("synthesize %s: done by an earlier attempt of this run", job["job_id"])
        return str(path)
    spec = load_ehr_spec(config.spec)
    train, test, summary = imputed_tables(run_dir, job["imputation"])
    attributes = summary["attributes"]
    bounds = {a.name: (a.valid_low, a.valid_high) for a in spec.attributes if a.name in attributes}
    scaling = (AffineScaling.from_bounds(bounds, attributes) if config.scaling == "bounds"
               else AffineScaling.fit(train[attributes]))
    target = resolve_device(device)
    x = torch.tensor(scaling.transform(train), dtype=torch.float32, device=target)

    budget, nf = Budget(**job["budget"]), config.dpnf
    batch, q = poisson_batch(len(x), nf.sample_rate)
    sigma = _noise_multiplier(budget, q, nf.steps, config.delta)
    seed = _seed(job)
    flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers), seed).to(target)
    hp = DensityHyperparameters(learning_rate=nf.learning_rate, batch_size=batch, steps=nf.steps,
                                max_grad_norm=nf.max_grad_norm, seed=seed)
    release = train_density(flow, x, hp, sigma, config.delta,
                            progress=progress_artifact(f"DP-NF {job['job_id']}: DP-SGD steps"))

    # held-out log-likelihood in original units: log p(x) = log p(z) - sum log scale (seed 001 Table 1)
    x_test = torch.tensor(scaling.transform(test), dtype=torch.float32, device=target)
    test_log_likelihood = mean_log_likelihood(flow, x_test) - float(np.log(scaling.scale_).sum())
    private = release.mechanism == "dp_sgd"
    flows_dir = run_dir_path / INTERMEDIATE / "flows"
    out_dir = run_dir_path / ("synthetic" if private else f"{INTERMEDIATE}/synthetic")
    for folder in (flows_dir, out_dir, run_dir_path / "releases"):
        folder.mkdir(parents=True, exist_ok=True)
    torch.save(flow.state_dict(), flows_dir / f"{job['job_id']}.pt")

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
    record = {"job": job, "budget_label": budget.label, "seed": seed, **release.as_dict(),
              "expected_batch": batch, "training_patients": int(len(x)), "rows_per_table": rows,
              "test_log_likelihood": test_log_likelihood,
              "nonfinite_rows_dropped": nonfinite,
              "scaling": {"kind": config.scaling, "inside_guarantee": not scaling.private_},
              "history": release.history, "files": files,
              "flow": str(flows_dir / f"{job['job_id']}.pt"),
              "model": {"blocks": nf.blocks, "hidden_size": nf.hidden_size, "hidden_layers": nf.hidden_layers}}
    path.write_text(json.dumps(record, indent=2, default=float))
    run_logger().info("synthesize %s: %s, T=%d, q=%.3g, epsilon %s; %d tables of %d rows (%d non-finite dropped)",
                      job["job_id"], release.mechanism, nf.steps, q, release.epsilon, config.releases, rows, nonfinite)
    return str(path)
