"""Attacks on the printed guarantee, tried as a user (or an attacker who has the code) would.

(a) reuse a run id after deleting its directory; (b) two runs at once on one dataset under a budget;
(c) a ledger that cannot be written; (d) crashes between training and recording. And: two runs of one
configuration must release different weights (fresh noise), unless reproducible noise was asked for,
in which case every release says it is not DP.
"""

import json
import multiprocessing
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from privehr.flows.pipeline import pipeline
from privehr.cli import main
from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import ledger_totals, read_ledger
from privehr.models.privacy.release_plan import ReleasePlan

from oracles.ledger_race import reserve_at_the_barrier

# validation off: these attacks are on the ledger and the noise, and GX cost 4-12 s a run
GRID = {"validation": {"enabled": False}, "labels": ["mort_icu"],
        "training": {"models": ["logistic_regression"], "methods": ["dp_sgd"], "seeds": 2,
                     "dp_sgd": {"epochs": 1, "epsilons": [1.0]}}}


def _config(tmp_path, extract, run_id, **privacy) -> PipelineConfig:
    # the fits' releases alone: the record counts and the bundle's evaluations are attacked in test_release_bundle.py
    return PipelineConfig.model_validate({
        **GRID, "data": {"hdf5_path": str(extract)}, "artifacts_dir": str(tmp_path / "artifacts"), "run_id": run_id,
        "versioning": {"dvc": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl"), **privacy},
        "release": {"bundle": False, "record_count": "public"}})


def _weights(path: Path) -> list[torch.Tensor]:
    saved = torch.load(path)
    return list((saved.get("state_dict", saved)).values())


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_two_runs_release_different_weights_unless_reproducible_and_then_say_not_dp(tmp_path, small_extract, capsys):
    ehr = write_demo_ehr(tmp_path / "EHR_dataset.csv", seed=0)["path"]
    runs = {}
    for reproducible in (False, True):
        cfg = tmp_path / f"config-{reproducible}.yaml"
        cfg.write_text(yaml.safe_dump({
            **GRID, "privacy": {"ledger_path": str(tmp_path / f"ledger-{reproducible}.jsonl"),
                                "reproducible_noise": reproducible},
            "synthesis": {"path": str(ehr), "mice": {"m": 1, "max_iter": 2, "trace": False}, "mus": [2.0],
                          "epsilons": [], "non_private": False, "releases": 1,
                          "dpnf": {"steps": 20, "blocks": 1, "hidden_size": 8}}}))
        for name in ("first", "second"):  # same configuration and data, different run ids
            run_id = f"{name}-{reproducible}"
            assert main(["run", "--config", str(cfg), "--data", str(small_extract), "--run-id", run_id,
                         "--artifacts-dir", str(tmp_path / "artifacts"), "--no-dvc", "--json"]) == 0
            summary = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
            run_dir = Path(summary["run_dir"])
            runs[run_id] = {"dp_sgd": _weights(run_dir / "models" / "mort_icu-logistic_regression-dp_sgd-bce-eps1-seed0.pt"),
                            "dp_nf": _weights(run_dir / "synthesis" / "intermediate" / "flows" / "imp0-mu2-run0.pt"),
                            "dir": run_dir}
    for kind in ("dp_sgd", "dp_nf"):
        assert not _same(runs["first-False"][kind], runs["second-False"][kind]), kind  # fresh noise, every run
        assert _same(runs["first-True"][kind], runs["second-True"][kind]), kind  # seeded from the configuration

    label = "not DP (reproducible noise)"
    run_dir = runs["first-True"]["dir"]
    assert f"| {label} |" in (run_dir / "results.md").read_text()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {r["guarantee"] for r in metrics["results"]} == {label} and not metrics["privacy_ledger"]["dp"]
    records = [json.loads(p.read_text()) for p in (run_dir / "synthesis" / "releases").glob("imp*-run*.json")
               if not p.name.endswith(".evaluation.json")]
    assert records and all(r["guarantee"] == label and not r["releasable"] for r in records)
    entries = [e for e in read_ledger(tmp_path / "ledger-True.jsonl") if e.status == "released"]
    assert entries and {e.guarantee for e in entries} == {"reproducible"}
    assert main(["privacy", "ledger", "--ledger", str(tmp_path / "ledger-True.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "NOT DP" in out and label in out
    # the fresh-noise runs are DP, and their records carry no seed
    secret = runs["first-False"]["dir"]
    assert {r["guarantee"] for r in json.loads((secret / "metrics.json").read_text())["results"]} == {"DP"}
    assert "seed" not in json.dumps(torch.load(secret / "models" / "mort_icu-logistic_regression-dp_sgd-bce-eps1-seed0.pt")
                                    ["training"])


def test_a_reused_run_id_is_a_new_release_never_a_free_one(tmp_path, small_extract):
    """(a) Delete a run's directory and run the same id again: the ledger keeps both runs' releases."""
    config = _config(tmp_path, small_extract, "reused")
    pipeline(config)
    (first,) = ledger_totals(tmp_path / "ledger.jsonl")
    shutil.rmtree(tmp_path / "artifacts" / "reused")
    pipeline(config)
    (second,) = ledger_totals(tmp_path / "ledger.jsonl")
    assert first.releases == 2 and second.releases == 4 and second.epsilon_dp > first.epsilon_dp
    releases = [e.release for e in read_ledger(tmp_path / "ledger.jsonl")]
    assert len(releases) == len(set(releases))


def test_two_runs_at_once_cannot_both_spend_the_budget(tmp_path):
    """(b) Two processes check a budget of 1.2 at once, each planning epsilon ~1 (two compose to ~1.23): one is
    refused, and it saw the other's reservation; the ledger never exceeds the budget."""
    # each run plans its release as a run would (the same plan: calibrated once, here); the race is in the ledger
    plan = ReleasePlan.for_epochs(1000, batch_size=100, epochs=2, target_epsilon=1.0, delta=1e-5)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    ledger = str(tmp_path / "ledger.jsonl")
    workers = [ctx.Process(target=reserve_at_the_barrier, args=(ledger, 1.2, plan, barrier, results), name=str(i))
               for i in range(2)]
    for w in workers:
        w.start()
    outcomes = sorted(results.get(timeout=120) for _ in workers)
    for w in workers:
        w.join(timeout=60)
    assert outcomes[1] == "reserved" and "privacy budget exceeded" in outcomes[0]
    assert re.search(r"\[saw 0\.[1-9]\d*\]$", outcomes[0])  # not 0: it saw the other's reservation
    (total,) = ledger_totals(ledger)
    assert total.pending == 1 and total.epsilon_dp <= 1.2


def test_an_unwritable_ledger_stops_the_run_before_any_record_is_read(tmp_path, small_extract, capsys):
    """(c) A ledger that cannot be appended to is found before ingest, not after training."""
    for bad in (tmp_path / "a-directory", tmp_path / "a-file" / "ledger.jsonl"):
        (tmp_path / "a-directory").mkdir(exist_ok=True)
        (tmp_path / "a-file").write_text("")
        config = _config(tmp_path, small_extract, f"unwritable-{bad.parent.name}", ledger_path=str(bad))
        with pytest.raises(InputError, match="not writable.*nothing was read or trained"):
            pipeline(config)
        assert not (tmp_path / "artifacts" / config.run_id).exists()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**GRID, "privacy": {"ledger_path": str(tmp_path / "a-directory")}}))
    assert main(["run", "--config", str(cfg), "--data", str(small_extract), "--no-dvc", "--no-synthesis",
                 "--artifacts-dir", str(tmp_path / "artifacts")]) == 2
    err = capsys.readouterr().err
    assert "not writable" in err and "Traceback" not in err


def test_a_crash_after_training_leaves_the_release_counted(tmp_path, small_extract, monkeypatch):
    """(d) A model trained but never saved (the process died writing it) is in the ledger all the same; a crash
    during training leaves its reservation counted until the run is resumed, which retrains it as a new release."""
    import privehr.models.methods.dp_sgd
    import privehr.tasks.train

    real_write = privehr.tasks.train._write_model

    def disk_full(path, payload):
        if str(path).endswith("seed1.pt"):
            raise OSError("No space left on device")
        return real_write(path, payload)

    monkeypatch.setattr(privehr.tasks.train, "_write_model", disk_full)
    with pytest.raises(OSError, match="No space left"):
        pipeline(_config(tmp_path, small_extract, "crash-saving"))
    (total,) = ledger_totals(tmp_path / "ledger.jsonl")
    assert total.releases == 2 and total.pending == 0  # both trained, both counted, though one was never saved
    monkeypatch.setattr(privehr.tasks.train, "_write_model", real_write)

    real_train = privehr.models.methods.dp_sgd.train_dp_sgd

    def dies_in_training(*args, **kwargs):
        if not getattr(dies_in_training, "spared", False):
            dies_in_training.spared = True  # the first fit to start trains; the other dies mid-way
            return real_train(*args, **kwargs)
        raise RuntimeError("killed")

    ledger2 = tmp_path / "ledger2.jsonl"
    monkeypatch.setattr(privehr.models.methods.dp_sgd, "train_dp_sgd", dies_in_training)
    config = _config(tmp_path, small_extract, "crash-training", ledger_path=str(ledger2))
    # one fit at a time here (the two seeds would otherwise train as one batched group, below)
    config = config.model_copy(update={"training": config.training.model_copy(update={"batched": "off"})})
    with pytest.raises(RuntimeError, match="killed"):
        pipeline(config)
    (crashed,) = ledger_totals(ledger2)
    assert crashed.releases == 1 and crashed.pending == 1  # the reservation of the unfinished fit still counts
    monkeypatch.setattr(privehr.models.methods.dp_sgd, "train_dp_sgd", real_train)
    pipeline(config.model_copy(update={"resume": True}))
    (resumed,) = ledger_totals(ledger2)
    assert resumed.releases == 2 and resumed.pending == 0  # its void settled the dead reservation
    assert resumed.epsilon_dp == pytest.approx(crashed.epsilon_dp, rel=0.02)

    # a batched group (the two seeds as one model, CPU's default) that dies mid-way leaves both reservations counted
    real_batched = privehr.models.methods.dp_sgd.train_dp_sgd_batched
    seen = []

    def group_dies(models, *args, **kwargs):
        seen.append(len(models))
        raise RuntimeError("killed")

    ledger3 = tmp_path / "ledger3.jsonl"
    monkeypatch.setattr(privehr.models.methods.dp_sgd, "train_dp_sgd_batched", group_dies)
    config = _config(tmp_path, small_extract, "crash-group", ledger_path=str(ledger3))
    with pytest.raises(RuntimeError, match="killed"):
        pipeline(config)
    assert seen == [2]  # the default trained the two fits as one group
    (group,) = ledger_totals(ledger3)
    assert group.releases == 0 and group.pending == 2
    assert group.epsilon_dp == pytest.approx(crashed.epsilon_dp, rel=0.02)  # two reservations, as one fit and one dead
    monkeypatch.setattr(privehr.models.methods.dp_sgd, "train_dp_sgd_batched", real_batched)
    pipeline(config.model_copy(update={"resume": True}))
    (group_resumed,) = ledger_totals(ledger3)
    assert group_resumed.releases == 2 and group_resumed.pending == 0
    assert group_resumed.epsilon_dp == pytest.approx(resumed.epsilon_dp, rel=0.02)
    statuses = [e.status for e in read_ledger(ledger2)]
    assert statuses.count("void") == 1 and statuses.count("reserved") == 3


def test_a_run_refused_for_its_budget_says_what_it_spent_and_no_patient_passes_it(tmp_path, small_extract):
    """The grid cannot fit the budget: no decision reads the exact counts (one patient's presence would move it), so
    the run is refused on its released counts, after them, and says so (once, the message said nothing was reserved
    while the counts were spent). The ledger holds the budget the run asked for, the counts and nothing else, and no
    patient is above the budget."""
    from privehr.io.ledger import ledger_patients

    config = PipelineConfig.model_validate({
        **GRID, "data": {"hdf5_path": str(small_extract)}, "artifacts_dir": str(tmp_path / "artifacts"),
        "run_id": "over", "versioning": {"dvc": False},
        "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl"), "budget_epsilon": 0.5},
        "release": {"bundle": False, "record_count": "dp"}})
    with pytest.raises(InputError, match="Its record counts are in the ledger .* nothing was trained") as refused:
        pipeline(config)
    assert "\n" not in str(refused.value)
    assert [(e.status, e.what) for e in read_ledger(tmp_path / "ledger.jsonl")] == [
        ("reserved", "record counts"), ("released", "record counts")]
    assert ledger_patients(tmp_path / "ledger.jsonl")["max"] <= 0.5
