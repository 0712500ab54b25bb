"""Privacy ledger tasks: refuse over-budget runs before their releases are trained, record releases."""

from __future__ import annotations

import fcntl
import json
import math
from dataclasses import asdict
from pathlib import Path

from prefect import task

from models.dp_nf import noise_for_budget, poisson_batch
from models.dp_sgd import poisson_schedule
from models.privacy_accounting import calibrate_noise_multiplier
from models.privacy_ledger import LedgerEntry, LedgerTotal, compose_entries
from privehr.config import Budget, Cell, PipelineConfig, SynthesisConfig
from privehr.errors import InputError
from tasks.run_logging import run_logger

__all__ = ["read_ledger", "append_entries", "ledger_totals", "check_privacy_budget", "record_releases",
           "record_release", "planned_noise", "check_synthesis_budget"]


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    path = Path(path)
    if not path.exists():
        return []
    return [LedgerEntry(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def append_entries(path: str | Path, entries: list[LedgerEntry]) -> None:
    """Append under an exclusive lock, so concurrent runs never interleave lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.writelines(json.dumps(asdict(e)) + "\n" for e in entries)
        fcntl.flock(fh, fcntl.LOCK_UN)


def ledger_totals(path: str | Path, delta: float = 1e-5) -> list[LedgerTotal]:
    entries = read_ledger(path)
    return [compose_entries([e for e in entries if e.dataset == d], delta)
            for d in sorted({e.dataset for e in entries})]


def _dataset_id(run_dir: str) -> str:
    return json.loads((Path(run_dir) / "ingest.json").read_text())["sha256"]


def _fit_size(run_dir: str) -> int:
    counts = json.loads((Path(run_dir) / "split_manifest.json").read_text())["counts"]
    return counts["train"]["stays"] + counts["dev"]["stays"]


@task(name="check-privacy-budget")
def check_privacy_budget(run_dir: str, cells: list[Cell], chosen: list[dict], config: PipelineConfig) -> dict:
    """Compose the ledger with this run's planned DP-SGD releases; raise if the budget would be exceeded."""
    privacy, training = config.privacy, config.training
    dataset = _dataset_id(run_dir)
    n = _fit_size(run_dir)
    existing = [e for e in read_ledger(privacy.ledger_path) if e.dataset == dataset]
    recorded = {e.release for e in existing}
    planned = []
    for cell, hp in zip(cells, chosen):
        if cell.method != "dp_sgd":
            continue
        spend = calibrate_noise_multiplier(cell.target_epsilon, training.dp_sgd.delta,
                                           *poisson_schedule(n, hp["batch_size"], hp["epochs"]))
        planned += [LedgerEntry(dataset, _release(run_dir, cell, s), "dp_sgd", spend.epsilon, spend.delta,
                                spend.noise_multiplier, spend.sample_rate, spend.steps)
                    for s in range(training.seeds_for(cell)) if _release(run_dir, cell, s) not in recorded]
    return _enforce_budget(run_dir, dataset, existing, planned, privacy.budget_epsilon, privacy.budget_delta,
                           "DP-SGD releases")


def _enforce_budget(run_dir: str, dataset: str, existing: list[LedgerEntry], planned: list[LedgerEntry],
                    budget_epsilon: float | None, delta: float, what: str) -> dict:
    """Compose the dataset's recorded and planned releases, write privacy_budget.json, raise if over budget."""
    total = compose_entries(existing + planned, delta)
    summary = {"dataset": dataset, "existing_releases": len(existing), "planned_dp_releases": len(planned),
               "epsilon_dp_after_run": total.epsilon_dp, "delta": total.delta, "budget_epsilon": budget_epsilon}
    (Path(run_dir) / "privacy_budget.json").write_text(json.dumps(summary, indent=2))
    if budget_epsilon is not None and total.epsilon_dp > budget_epsilon:
        before = compose_entries(existing, delta).epsilon_dp if existing else 0.0
        raise InputError(
            f"privacy budget exceeded for dataset {dataset[:12]}: its DP releases have spent epsilon "
            f"{before:.3g} and this run's {len(planned)} {what} would bring it to {total.epsilon_dp:.3g} "
            f"(delta {total.delta:.2g}), above the budget {budget_epsilon:g}. Nothing was trained. "
            "Fewer budgets, seeds or grid cells, or a budget decision by the data custodian, are the ways on.")
    run_logger().info("privacy budget: %d planned %s, dataset epsilon after the run %.3g (budget %s)",
                      len(planned), what, total.epsilon_dp, budget_epsilon)
    return summary


def _release(run_dir: str, cell: Cell, seed: int) -> str:
    return f"{Path(run_dir).name}/models/{cell.cell_id}-seed{seed}.pt"


@task(name="record-releases")
def record_releases(run_dir: str, runs: list[dict], ledger_path: str) -> int:
    """Append one ledger entry per released model of this run not yet recorded; return how many."""
    dataset, run_id = _dataset_id(run_dir), Path(run_dir).name
    recorded = {e.release for e in read_ledger(ledger_path) if e.dataset == dataset}
    entries = []
    for r in runs:
        cell = Cell(**{k: r[k] for k in ("label", "model", "method", "loss", "target_epsilon")})
        release = _release(run_dir, cell, r["seed"])
        if release in recorded:  # a resumed run: recorded by its earlier attempt
            continue
        if r["method"] == "dp_sgd":
            entries.append(LedgerEntry(dataset, release, "dp_sgd", r["epsilon_prv"] if r["epsilon_prv"] is not None
                                       else r["epsilon_rdp"], r["delta"], r["noise_multiplier"], r["sample_rate"],
                                       r["steps"], run_id))
        elif r["method"] == "expm_nf":  # eps~ is a training parameter: composed nowhere, listed as unproven
            entries.append(LedgerEntry(dataset, release, "expm_nf", r["target_epsilon"], 0.0, run_id=run_id))
        else:
            entries.append(LedgerEntry(dataset, release, "non_private", math.inf, 0.0, run_id=run_id))
    append_entries(ledger_path, entries)
    run_logger().info("privacy ledger: recorded %d releases", len(entries))
    return len(entries)


def _synthesis_release(run_dir: str, job_id: str) -> str:
    return f"{'/'.join(Path(run_dir).parts[-2:])}/releases/{job_id}"


def record_release(run_dir: str, record_path: str | Path, dataset: str, ledger_path: str) -> bool:
    """The ledger entry of one trained DP-NF flow (its synthetic tables are post-processing); False if recorded."""
    r = json.loads(Path(record_path).read_text())
    release, run_id = _synthesis_release(run_dir, r["job"]["job_id"]), "/".join(Path(run_dir).parts[-2:])
    if release in {e.release for e in read_ledger(ledger_path) if e.dataset == dataset}:
        return False
    append_entries(ledger_path, [
        LedgerEntry(dataset, release, "dp_sgd", r["epsilon"], r["delta"], r["noise_multiplier"], r["sample_rate"],
                    r["steps"], run_id) if r["mechanism"] == "dp_sgd"
        else LedgerEntry(dataset, release, "non_private", math.inf, 0.0, run_id=run_id)])
    return True


def planned_noise(config: SynthesisConfig, budget: Budget, n: int) -> tuple[float | None, float, int]:
    """(sigma, q, T) of a DP-NF flow trained on ``n`` patients at ``budget``: known before anything is trained."""
    _, q = poisson_batch(n, config.dpnf.sample_rate)
    return noise_for_budget(budget.kind, budget.value, q, config.dpnf.steps, config.delta), q, config.dpnf.steps


@task(name="check-synthesis-budget")
def check_synthesis_budget(run_dir: str, config: SynthesisConfig, dataset: str) -> dict:
    """Compose the ledger with this run's planned DP-NF flows; raise before training if over ``budget_epsilon``."""
    n = json.loads((Path(run_dir) / "imputation.json").read_text())["patients"]["train"]
    existing = [e for e in read_ledger(config.ledger_path) if e.dataset == dataset]
    recorded = {e.release for e in existing}
    planned = []
    for job in config.jobs():
        sigma, q, steps = planned_noise(config, Budget(**job["budget"]), n)
        release = _synthesis_release(run_dir, job["job_id"])
        if sigma is not None and release not in recorded:
            planned.append(LedgerEntry(dataset, release, "dp_sgd", math.nan, config.delta, sigma, q, steps))
    return _enforce_budget(run_dir, dataset, existing, planned, config.budget_epsilon, config.delta, "DP-NF flows")
