"""The layers are enforced, not hoped for: import-linter's contracts (pyproject.toml) hold on the installed
layout, they are the rules the README states, and a forbidden import breaks them.

import-linter walks a package's directory, and privehr's subpackages live in the repository's top-level
folders (setuptools package-dir), so the tests lay the package out as the wheel does (from the same
package-dir table) and lint that copy.
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LINT = Path(sys.executable).with_name("lint-imports")


def _installed_layout(tmp_path: Path) -> Path:
    """privehr as the wheel installs it: each package of tool.setuptools.package-dir at its dotted path."""
    site = tmp_path / "site"
    for package, folder in sorted(PYPROJECT["tool"]["setuptools"]["package-dir"].items()):
        target = site.joinpath(*package.split("."))
        if not target.exists():
            shutil.copytree(ROOT / folder, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                            dirs_exist_ok=True)
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        assert site.joinpath(*package.split(".")).is_dir(), package
    return site


def _lint(site: Path, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(LINT), "--config", str(config), "--no-cache"], cwd=site, env=env,
                          capture_output=True, text=True, timeout=300)


def _config(tmp_path: Path, contracts: list[dict]) -> Path:
    lines = ["[importlinter]", "root_package = privehr", "include_external_packages = True", ""]
    for c in contracts:
        lines.append(f"[importlinter:contract:{c['id']}]")
        for key, value in c.items():
            if key == "id":
                continue
            lines.append(f"{key} =" + ("".join(f"\n    {v}" for v in value) if isinstance(value, list)
                                       else f" {value}"))
        lines.append("")
    path = tmp_path / "importlinter.ini"
    path.write_text("\n".join(lines))
    return path


CONTRACTS = PYPROJECT["tool"]["importlinter"]["contracts"]


def test_the_contract_is_the_layering_the_readme_states():
    """Deleting or reordering a layer, or a forbidden library, fails here."""
    layers = next(c for c in CONTRACTS if c["id"] == "layers")
    assert layers["type"] == "layers" and layers["layers"] == [
        "privehr.cli", "privehr.flows", "privehr.tasks", "privehr.io", "privehr.models | privehr.simulate",
        "privehr.core"]
    pure = next(c for c in CONTRACTS if c["id"] == "pure-math")
    assert {"prefect", "h5py", "great_expectations", "dvc"} <= set(pure["forbidden_modules"])
    assert set(pure["source_modules"]) == {"privehr.models", "privehr.simulate"}
    models = next(c for c in CONTRACTS if c["id"] == "models-layers")
    assert models["containers"] == ["privehr.models"] and models["layers"] == [
        "methods", "expm | inference | synthesis", "dpsgd", "classifiers | nf", "data | evaluation | privacy | audit"]
    packages = {p.name for p in (ROOT / "models").iterdir() if (p / "__init__.py").exists()}
    assert packages == {name.strip() for layer in models["layers"] for name in layer.split("|")}  # every package
    core = next(c for c in CONTRACTS if c["id"] == "core-bottom")
    assert {"prefect", "torch"} <= set(core["forbidden_modules"])
    readme = (ROOT / "README.md").read_text()
    for layer in ("privehr.cli", "privehr.flows", "privehr.tasks", "privehr.io", "privehr.models", "privehr.core",
                  "privehr.simulate"):
        assert f"`{layer}`" in readme, f"the README's Architecture section does not name {layer}"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return _installed_layout(tmp_path_factory.mktemp("layout"))


def test_the_code_keeps_the_contracts(site, tmp_path):
    result = _lint(site, _config(tmp_path, CONTRACTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module,line,broken", [
    ("core/errors.py", "import privehr.tasks.train", "layers"),        # core may not reach up
    ("models/nf/maf.py", "import privehr.io.pages", "layers"),            # models may not read files
    ("models/nf/maf.py", "import prefect", "pure-math"),                  # nor orchestrate
    ("io/pages.py", "import privehr.flows.pipeline", "layers"),        # io may not call flows
    ("models/classifiers/grud.py", "import privehr.models.dpsgd.trainer", "models-layers"),  # a model, not its trainer
    ("models/nf/maf.py", "import privehr.models.synthesis.codec", "models-layers"),         # a flow, not its use
    ("models/expm/mechanism.py", "import privehr.models.synthesis.codec", "models-layers"),  # siblings stay apart
])
def test_a_forbidden_import_breaks_a_contract(site, tmp_path, module, line, broken):
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    path = copy / "privehr" / module
    path.write_text(path.read_text() + f"\n{line}  # a violation planted by the test\n")
    result = _lint(copy, _config(tmp_path, CONTRACTS))
    assert result.returncode != 0 and "BROKEN" in result.stdout
    name = next(c["name"] for c in CONTRACTS if c["id"] == broken)
    assert re.search(re.escape(name) + r"\s*BROKEN", result.stdout), result.stdout


def test_the_wheel_installs_only_privehr(tmp_path):
    """`pip install .` puts one top-level package in site-packages, with its bundled suites and specs."""
    source = tmp_path / "source"  # built from a copy: setuptools writes build/ and *.egg-info beside the sources
    for name in ("pyproject.toml", "README.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    for folder in {f.split("/")[0] for f in PYPROJECT["tool"]["setuptools"]["package-dir"].values()}:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(source)], check=True, timeout=300, capture_output=True)
    wheel = next(tmp_path.glob("privehr-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"privehr"}
    for required in ("privehr/flows/pipeline.py", "privehr/tasks/train.py", "privehr/models/nf/maf.py",
                     "privehr/io/validation.py", "privehr/core/config/training.py", "privehr/cli/__init__.py",
                     "privehr/simulate/severity_simulator.py", "privehr/expectations/harrod_ehr.json",
                     "privehr/expectations/specs/harrod_ehr.yaml", "privehr/expectations/specs/mimic_vitals_labs.csv",
                     "privehr/resources/mimic_extract_variables.csv"):
        assert required in names, required
    assert not any(n.startswith("privehr/tests/") or "/oracles/" in n for n in names)
    # every module of the source tree is in the wheel (a subpackage missing from `packages` would not be)
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        for module in (ROOT / folder).rglob("*.py"):
            installed = "/".join([*package.split("."), *module.relative_to(ROOT / folder).parts])
            assert installed in names, f"{module.relative_to(ROOT)} is not in the wheel (add its package to `packages`)"


def test_the_flows_read_as_their_dags():
    """A flow wires tasks: the pipeline's body stays a page (about 50 lines), and no flow picks its tasks' inputs by
    a string's prefix (a typed record says what each task takes: tasks/release_budget.py's GridReservations)."""
    import ast

    for path in sorted((ROOT / "flows").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("startswith", "endswith"):
                pytest.fail(f"{path.name}:{node.lineno} filters by a string's prefix or suffix")
    tree = ast.parse((ROOT / "flows" / "pipeline.py").read_text())
    (flow,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pipeline"]
    assert flow.end_lineno - flow.lineno + 1 <= 55, f"the pipeline flow is {flow.end_lineno - flow.lineno + 1} lines"
