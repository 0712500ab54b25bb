"""Adding a training method is one module and its test (issue 58): the recipe in docs/architecture.md, written as it
stands into a temporary module and imported, is a method the pipeline runs: the grid has its cells, the budget check
reserves its releases, the fit task trains them, the report and the ledger name them. No other file names it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from privehr.core.config import PipelineConfig
from privehr.flows.pipeline import pipeline
from privehr.io.ledger import read_ledger
from privehr.models.methods import TRAINING_METHODS
from privehr.models.privacy.ledger import GUARANTEES

ROOT = Path(__file__).resolve().parents[2]


def _recipe() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(r"## Adding a training method\n.*?```python\n(.*?)```", text, re.S).group(1)


def test_the_documented_recipe_is_a_method_the_pipeline_runs(tmp_path, small_extract, monkeypatch):
    monkeypatch.setattr(TRAINING_METHODS, "_items", dict(TRAINING_METHODS._items))  # the registry as it was, after
    module = tmp_path / "prior_method.py"
    module.write_text(_recipe())
    spec = importlib.util.spec_from_file_location("prior_method", module)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers it, as its package would on import
    assert "prior" in TRAINING_METHODS
    config = PipelineConfig.model_validate({
        "data": {"hdf5_path": str(small_extract)}, "artifacts_dir": str(tmp_path / "artifacts"), "run_id": "toy",
        "labels": ["los_3"], "validation": {"enabled": False}, "versioning": {"dvc": False},
        "release": {"bundle": False}, "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")},
        "training": {"models": ["logistic_regression"], "methods": ["prior", "non_private"], "seeds": 1,
                     "non_private": {"max_epochs": 2}}})
    pipeline(config)
    results = json.loads((tmp_path / "artifacts" / "toy" / "metrics.json").read_text())["results"]
    toy = [r for r in results if r["method"] == "prior"]
    assert len(toy) == 1 and toy[0]["guarantee"] == GUARANTEES["non_private"] and 0 <= toy[0]["auroc_median"] <= 1
    report = (tmp_path / "artifacts" / "toy" / "results.md").read_text()
    assert "training prevalence" in report  # its display name, from its class
    released = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e.status == "released"]
    assert sum(e.what == "final fit" and e.guarantee == "non_private" for e in released) == 2  # the toy's and the baseline's
