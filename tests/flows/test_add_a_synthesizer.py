"""Adding a synthesizer is one module and its test (issue 58): the recipe in docs/architecture.md, written as it stands
into a temporary module and imported, is a synthesizer privehr-synthesize runs: its job in the grid, its release
reserved and recorded in the ledger, its tables in the report. No other file names it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from privehr.core.config import SynthesisConfig
from privehr.flows.synthesis import synthesize_ehr
from privehr.io.demo_data import write_demo_ehr
from privehr.io.ledger import read_ledger
from privehr.models.privacy.ledger import GUARANTEES
from privehr.models.synthesis import SYNTHESIZERS

ROOT = Path(__file__).resolve().parents[2]


def _recipe() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(r"## Adding a synthesizer\n.*?```python\n(.*?)```", text, re.S).group(1)


def test_the_documented_recipe_is_a_synthesizer_the_flow_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(SYNTHESIZERS, "_items", dict(SYNTHESIZERS._items))  # the registry as it was, after
    module = tmp_path / "independent_synthesizer.py"
    module.write_text(_recipe())
    spec = importlib.util.spec_from_file_location("independent_synthesizer", module)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "independent" in SYNTHESIZERS
    table = tmp_path / "ehr.csv"
    write_demo_ehr(table, seed=3)
    config = SynthesisConfig.model_validate({
        "path": str(table), "artifacts_dir": str(tmp_path / "artifacts"), "run_id": "toy", "synthesizers":
        ["independent"], "mus": [], "epsilons": [], "mice": {"m": 1, "max_iter": 2}, "runs": 1, "releases": 1,
        "privacy": {"ledger_path": str(tmp_path / "ledger.jsonl")}})
    summary = synthesize_ehr(config, "cpu")
    assert summary["synthesizers"] == ["independent"] and summary["flows"] == 1
    released = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e.status == "released"]
    assert [e.what for e in released if e.guarantee == "non_private"] == ["independent columns"]
    report = (tmp_path / "artifacts" / "toy" / "report.md").read_text()
    assert "independent columns" in report and GUARANTEES["non_private"] in report  # its name, from its class
