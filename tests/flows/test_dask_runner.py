"""The pipeline's fan-out on a local Dask cluster (worker processes) gives the thread runner's results."""

import json
from pathlib import Path

from privehr.flows.pipeline import on_dask, pipeline
from privehr.core.config import PipelineConfig


def test_dask_cluster_runs_the_grid_like_the_thread_pool(tmp_path, small_extract):
    def config(name):
        return PipelineConfig.model_validate({
            "data": {"hdf5_path": str(small_extract)}, "artifacts_dir": str(tmp_path), "run_id": name,
            "versioning": {"dvc": False}, "validation": {"enabled": False},  # the runner is the claim, not GX
            # the runners are compared number for number, so the DP noise is seeded (and every release marked not DP)
            "privacy": {"ledger_path": str(tmp_path / f"{name}.jsonl"), "reproducible_noise": True},
            # one label: the runners are the claim, not the grid's size (every method still fans out, two seeds
            # each); batches of 16 of 142 training stays (q = 1/9): the DP plans calibrate in 1 s, not 5 s at q 0.9
            "labels": ["mort_icu"], "release": {"bundle": False},
            "training": {"models": ["logistic_regression"], "seeds": 2, "non_private": {"max_epochs": 2},
                         "dp_sgd": {"epochs": 1, "epsilons": [1.0], "batch_size": 16},
                         "expm_nf": {"epsilons": [1.0], "steps": 3, "eval_samples": 3, "seeds": 2},
                         "dp_expm_nf": {"epochs": 1, "epsilons": [1.0], "eval_samples": 3, "batch_size": 16}}})

    on_cluster = on_dask(n_workers=2)(config("dask"))
    on_threads = pipeline(config("threads"))
    # one label x (non-private, DP-SGD, ExpM+NF, the DP-trained ExpM flow) x seeds
    assert on_cluster["runs"] == on_threads["runs"] == 1 * 4 * 2
    assert on_cluster["results"] == on_threads["results"]  # seeded everywhere: same numbers on any runner
    assert {r["guarantee"] for r in on_threads["results"] if r["method"] == "dp_sgd"} == {"not DP (reproducible noise)"}
    results = [p for p in (Path(tmp_path) / "dask" / "models").glob("*.json") if not p.name.endswith(".draws.json")]
    rows = [json.loads(p.read_text())["value"] for p in results]
    assert len(rows) == 8  # every fit ran in a worker process and wrote its result into the shared run directory
