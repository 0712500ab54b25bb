"""A run's directory: its default id carries no clock (run and release ids are shipped in bundles)."""

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from privehr.core.config import PipelineConfig
from privehr.io.ledger import release_id
from privehr.tasks.run_directory import create_run_directory, ledger_run, new_run_id


def test_a_default_run_id_is_random_with_no_start_time_and_its_release_ids_neither(tmp_path):
    today = datetime.now(timezone.utc)
    run_dir = Path(create_run_directory.fn(PipelineConfig(artifacts_dir=tmp_path / "artifacts")))
    assert re.fullmatch(r"run-[0-9a-f]{12}", run_dir.name) and run_dir.name != new_run_id()
    shipped = release_id(ledger_run(run_dir), "fit/cell-seed0")
    for clock in (today.strftime("%Y%m%d"), today.strftime("%Y-%m-%d"), f"T{today:%H}"):
        assert clock not in shipped
    assert json.loads((run_dir / "provenance.json").read_text())["created_utc"].startswith(today.strftime("%Y-%m-%d"))
