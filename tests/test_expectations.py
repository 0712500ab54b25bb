"""The committed suites are exactly what the specs generate, and GX's file context in the repo reads them."""

import json
import shutil
from pathlib import Path

import great_expectations as gx

from privehr.core.specs import SPEC_DIR, load_ehr_spec, load_mimic_spec
from privehr.io.expectation_suites import EXPECTATIONS_DIR, ehr_suite, mimic_suites, write_suites

ROOT = Path(__file__).resolve().parents[1]


def _generated(tmp_path):
    suites = mimic_suites(load_mimic_spec())
    suites += [ehr_suite(load_ehr_spec(p)) for p in sorted(SPEC_DIR.glob("*.yaml")) if p.stem != "mimic_extract"]
    return {Path(p).name: json.loads(Path(p).read_text()) for p in write_suites(suites, tmp_path)}


def test_committed_suites_match_the_specs(tmp_path):
    generated = _generated(tmp_path)
    committed = {p.name: json.loads(p.read_text()) for p in EXPECTATIONS_DIR.glob("*.json")}
    assert set(committed) == set(generated), "run `privehr expectations build` and commit expectations/"
    for name, suite in generated.items():
        assert committed[name] == suite, f"{name} is stale: run `privehr expectations build` and commit it"


def test_repository_gx_context_lists_the_suites(tmp_path):
    project = tmp_path / "repo"
    shutil.copytree(ROOT / "gx", project / "gx", ignore=shutil.ignore_patterns("uncommitted"))
    shutil.copytree(EXPECTATIONS_DIR, project / "expectations")
    context = gx.get_context(mode="file", project_root_dir=str(project))
    names = {s.name for s in context.suites.all()}
    assert names == {p.stem for p in EXPECTATIONS_DIR.glob("*.json")}
    patients = context.suites.get("mimic_extract_patients")
    assert {e.meta["severity"] for e in patients.expectations} == {"critical", "warning"}
