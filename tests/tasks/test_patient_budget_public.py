"""Whether a run goes on, and who takes part, is decided on public and released values only (issue 54.4): the start
check used to plan the whole run on the exact training count, so with a budget inside the gap between two batch-size
plans, D without patient X was always refused and D with X released a bundle. Here D and D minus X sit on either side
of such a boundary, the same counts are released to both, and every decision is the same for everyone else; no
decision reads the exact counts (reading them fails the test)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.core.records import RecordCounts
from privehr.io.ledger import Ledger, reserve, set_budget
from privehr.models.methods import grid
from privehr.models.privacy.patient_accounting import patient_curves
from privehr.models.privacy.rdp_filter import BudgetSetting
from privehr.tasks.cohort import build_cohort
from privehr.tasks.patient_budget import leave_out_spent_patients
from privehr.tasks.record_counts import check_preprocessing_budget, release_record_counts
from privehr.tasks.release_budget import plan_grid
from privehr.tasks.run_directory import create_run_directory, read_summary
from privehr.tasks.split import split_cohort

ORDER = 8.0


def _run(root: Path, extract, run_id: str, batch_size: int, exclude=()) -> tuple[str, str, str, PipelineConfig]:
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(extract)}, "artifacts_dir": str(root), "run_id": run_id, "labels": ["mort_icu"],
        "privacy": {"ledger_path": str(root / "ledger.jsonl")}, "release": {"bundle": False},
        "training": {"models": ["logistic_regression"], "methods": ["dp_sgd"], "seeds": 1,
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0], "batch_size": batch_size}}})
    run_dir = create_run_directory.fn(config)
    cohort = build_cohort.fn(str(extract), run_dir)
    manifest = split_cohort.fn(cohort, config.split, run_dir, exclude=list(exclude))
    return run_dir, cohort, manifest, config


def _cost(run_dir: str, config: PipelineConfig, n: int, dev: int, budget: BudgetSetting, past=()) -> float:
    """What the grid planned on ``n`` training and ``dev`` dev stays costs, by the filter, a patient who took part in
    ``past`` (releases citing no snapshot: everyone's)."""
    counts = RecordCounts(source="public", stays={"train": n, "dev": dev, "test": 10}, epsilon=None, release=None)
    planned = [e for e, _ in plan_grid(run_dir, grid(config.training, config.labels), config, counts).values()]
    past = [replace(e, members=None) for e in past]
    before = patient_curves(past, {}, 1e-5, patients=np.array([1], dtype=np.uint64), budget=budget)
    return float(before.plus(planned).epsilon[0])


def _copy_ledger(source: Path, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for item in source.parent.iterdir():
        if item.name.startswith(source.name):
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, root / item.name)


def test_one_patient_at_a_batch_size_boundary_moves_no_decision(tmp_path, small_extract, monkeypatch):
    probe, cohort, manifest, _ = _run(tmp_path / "probe", small_extract, "probe", 128)
    n, dev = (read_summary(probe, "split_summary").stays(s) for s in ("train", "dev"))
    x = json.loads(Path(manifest).read_text())["subjects"]["train"][0]  # patient X: one stay in train
    everyone = [s for part in json.loads(Path(manifest).read_text())["subjects"].values() for s in part]
    # the batch size that puts D and D minus X on either side of a plan: the final fit trains on train and dev, and
    # ceil((n + dev) / b) is 2 with X and 1 without
    at, b = BudgetSetting(3.0, 1e-5, ORDER), n + dev - 1
    _, _, _, config = _run(tmp_path / "plans", small_extract, "plans", b)
    assert _cost(probe, config, n, dev, at) != _cost(probe, config, n - 1, dev, at)  # the exact count moves the plan
    # the project's ledger: every patient has spent what leaves room for the cheaper plan only
    ledger = Ledger(tmp_path / "ledger0" / "ledger.jsonl")
    from privehr.models.privacy.release_plan import ReleasePlan

    past = ReleasePlan.for_epochs(1000, batch_size=100, epochs=1, target_epsilon=0.3, delta=1e-5).ledger_entry(
        "dp", "final fit")
    reserve(ledger, "earlier", "earlier-run", {"fit": past}, None, 1e-5, False, "grid release(s)",
            members=ledger.write_members(everyone))
    spent = [e for e in ledger.read()]
    cheap, dear = sorted((_cost(probe, config, n, dev, at, spent), _cost(probe, config, n - 1, dev, at, spent)))
    assert cheap < dear
    set_budget(ledger.path, (cheap + dear) / 2, order=ORDER)  # planned on the exact count, X would decide the run

    def exact_counts_read(run_dir, name, *args, **kwargs):
        if name == "split_summary":
            pytest.fail("a budget decision read the exact counts")
        return read_summary(run_dir, name, *args, **kwargs)

    def no_exact_counts(patch, modules):
        for module in modules:
            patch.setattr(f"{module}.read_summary", exact_counts_read, raising=False)

    decided, counts = {}, None
    for name, exclude in (("with-x", []), ("without-x", [x])):
        root = tmp_path / name
        _copy_ledger(ledger.path, root)  # each on the same ledger as it stands
        run_dir, cohort, manifest, config = _run(root, small_extract, name, b, exclude)
        assert read_summary(run_dir, "split_summary").stays("train") == n - len(exclude)
        with monkeypatch.context() as patch:
            no_exact_counts(patch, ("privehr.tasks.patient_budget", "privehr.tasks.record_counts",
                                    "privehr.tasks.release_budget"))
            manifest = leave_out_spent_patients.fn(cohort, manifest, run_dir, config, "preprocessing")
            reserved = check_preprocessing_budget.fn(run_dir, config)
        if counts is None:  # the counts are the one mechanism that reads the exact counts: both get the same ones
            release_record_counts.fn(run_dir, config, reserved.get("record-counts"))
            counts = (Path(run_dir) / "record_counts.json").read_bytes()
        else:
            (Path(run_dir) / "record_counts.json").write_bytes(counts)
        with monkeypatch.context() as patch:
            no_exact_counts(patch, ("privehr.tasks.patient_budget", "privehr.tasks.release_budget"))
            try:
                leave_out_spent_patients.fn(cohort, manifest, run_dir, config, "grid")
                outcome = "goes on"
            except InputError as refused:
                outcome = "refused" if "no one is left" in str(refused) else str(refused)
        left = set(json.loads((Path(run_dir) / "intermediate" / "members.json").read_text())["left_out"])
        decided[name] = (outcome, left - {x})
    assert decided["with-x"] == decided["without-x"]  # for everyone but X, the same: X's presence decided nothing
