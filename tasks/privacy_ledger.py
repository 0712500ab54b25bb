"""Privacy ledger tasks: refuse over-budget runs before their releases are trained, record releases."""

from __future__ import annotations

import fcntl
import json
import math
from dataclasses import asdict
from pathlib import Path

from prefect import task

from models.dp_sgd import poisson_schedule
from models.privacy_accounting import calibrate_noise_multiplier
from models.privacy_ledger import LedgerEntry, LedgerTotal, compose_entries
from privehr.config import Cell, PipelineConfig
from privehr.errors import InputError
from tasks.run_logging import run_logger

__all__ = ["read_ledger", "append_entries", "ledger_totals", "check_privacy_budget", "record_releases",
           "record_synthesis_releases"]


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
    total = compose_entries(existing + planned, privacy.budget_delta)
    summary = {"dataset": dataset, "existing_releases": len(existing), "planned_dp_releases": len(planned),
               "epsilon_dp_after_run": total.epsilon_dp, "delta": total.delta, "budget_epsilon": privacy.budget_epsilon}
    (Path(run_dir) / "privacy_budget.json").write_text(json.dumps(summary, indent=2))
    if privacy.budget_epsilon is not None and total.epsilon_dp > privacy.budget_epsilon:
        before = compose_entries(existing, privacy.budget_delta).epsilon_dp if existing else 0.0
        raise InputError(
            f"privacy budget exceeded for dataset {dataset[:12]}: its DP releases have spent epsilon "
            f"{before:.3g} and this run's {len(planned)} DP-SGD releases would bring it to {total.epsilon_dp:.3g} "
            f"(delta {total.delta:.2g}), above the budget {privacy.budget_epsilon:g}. Nothing was trained. "
            "Fewer epsilons, seeds, labels or models, or a budget decision by the data custodian, are the ways on.")
    run_logger().info("privacy budget: %d planned DP releases, dataset epsilon after the run %.3g (budget %s)",
                      len(planned), total.epsilon_dp, privacy.budget_epsilon)
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


@task(name="record-synthesis-releases")
def record_synthesis_releases(run_dir: str, record_paths: list[str], dataset: str, ledger_path: str) -> int:
    """One ledger entry per trained flow (its synthetic tables are post-processing); return how many were new."""
    run_id = "/".join(Path(run_dir).parts[-2:])
    recorded = {e.release for e in read_ledger(ledger_path) if e.dataset == dataset}
    entries = []
    for path in record_paths:
        r = json.loads(Path(path).read_text())
        release = f"{run_id}/releases/{r['job']['job_id']}"
        if release in recorded:
            continue
        entries.append(LedgerEntry(dataset, release, "dp_sgd", r["epsilon"], r["delta"], r["noise_multiplier"],
                                   r["sample_rate"], r["steps"], run_id) if r["mechanism"] == "dp_sgd"
                       else LedgerEntry(dataset, release, "non_private", math.inf, 0.0, run_id=run_id))
    append_entries(ledger_path, entries)
    run_logger().info("privacy ledger: recorded %d DP-NF releases", len(entries))
    return len(entries)
