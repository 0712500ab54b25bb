"""Fuzzing the front door (Hypothesis): random tables and specs (kinds, bounds, categories, missing values,
encodings, separators, dot names) through `privehr spec draft`, `validate` and `synthesize` (MST, epsilon 1, one
release). Every example ends in a finished run or in exit status 2 with one message line; never a traceback (an
exception out of main), never a file outside the example's artifacts/<run>, never a cell in a message.

FUZZ_EXAMPLES generated examples run (PRIVEHR_FUZZ_EXAMPLES=200 runs a longer search) from the seed
PRIVEHR_FUZZ_SEED, which .ci/run derives from the commit under test and prints: every submission tries other inputs,
and a failure is replayed with the seed its log names. Like SQLite's fuzzers, every input that ever broke it stays
as an explicit @example below (those run every time, and are not counted as generated).

The examples run in one child process (`python tests/flows/test_fuzz_inputs.py`), as a user's commands would, against
the flow tests' Prefect server and with no test-runner capture around them: in-process under pytest's output capture,
Great Expectations' and Prefect's handlers outlive the captured streams.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from privehr.cli import main

FUZZ_EXAMPLES = int(os.environ.get("PRIVEHR_FUZZ_EXAMPLES", "5"))
FUZZ_SEED = int(os.environ.get("PRIVEHR_FUZZ_SEED", "0"))
CANARY = "86.4213"  # a value of every table: never in a message

NAMES = ["age", "hr", "sex", "outcome", "a.b", "..", "x y", "é", "1st", "lab_2"]


@st.composite
def tables(draw):
    """A table as (rows of cells, column names, target, encoding, separator) and spec mutations."""
    n = draw(st.integers(4, 40))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    columns = {}
    for name in names:
        kind = draw(st.sampled_from(["numeric", "integer", "binary", "categorical", "text"]))
        missing = st.sampled_from(["", "NA"])
        cell = {"numeric": st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: f"{v:.3f}"),
                "integer": st.integers(-5, 200).map(str),
                "binary": st.sampled_from(["0", "1"] if draw(st.booleans()) else ["yes", "no"]),
                "categorical": st.sampled_from(["a", "b", "c", "é"]),
                "text": st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=5)}[kind]
        columns[name] = draw(st.lists(st.one_of(cell, missing) if draw(st.booleans()) else cell, min_size=n,
                                      max_size=n))
    first = names[0]
    columns[first][0] = CANARY
    binary = [c for c in names if set(columns[c]) <= {"0", "1", "", "NA"} and {"0", "1"} <= set(columns[c])]
    return {"columns": columns, "target": draw(st.sampled_from([None, *binary])),
            "encoding": draw(st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1"])),
            "separator": draw(st.sampled_from([",", ",", ";", "\t"])),
            "mutation": draw(st.sampled_from([None, "swap_bounds", "drop_categories", "kind_numeric",
                                              "attribute_twice", "no_attributes", "derived", "nan_bound",
                                              "key_twice", "scalar_section"])),
            "expression": draw(expressions(names))}


# pieces of derived expressions: arithmetic over the table's names, and what a hostile spec would try
HOSTILE = ["__import__('os')", "x.__class__", "[1][0]", "'a'", "lambda: 1", "@v", "open", "sqrt(", "1e309", "**",
           "not ", "where(", "[x for x in y]", ".__globals__", "f'{1}'", ":="]


def expressions(names: list[str]):
    atoms = st.sampled_from([*names, "2", "0.5", "abs(", "maximum(", *HOSTILE])
    joins = st.sampled_from([" + ", " * ", " / ", " > ", " and ", " & ", " | ", "(", ")", ", ", "."])
    return st.lists(st.one_of(atoms, joins), min_size=1, max_size=8).map("".join)


def _write(case: dict, path: Path) -> None:
    columns = case["columns"]
    names = list(columns)
    rows = [case["separator"].join(names)]
    rows += [case["separator"].join(columns[c][i] for c in names) for i in range(len(columns[names[0]]))]
    path.write_bytes(("\n".join(rows) + "\n").encode(case["encoding"], errors="replace"))


def _mutate(spec_path: Path, mutation: str | None, expression: str = "") -> list[str]:
    """Mutate the drafted spec; return extra arguments for synthesize (a config file)."""
    if mutation is None or not spec_path.exists():
        return []
    if mutation == "scalar_section":  # a config section given as a scalar, with its own option on the command line
        config = spec_path.with_name("config.yaml")
        config.write_text("mice: 3\n")
        return ["--config", str(config)]
    if mutation == "key_twice":  # a spec's key given twice: YAML would keep the last silently
        text = spec_path.read_text()  # the first top-level key (a drafted spec opens with comment lines)
        first = next(line for line in text.splitlines() if line and not line.startswith(("#", " ", "-")))
        spec_path.write_text(text + first + "\n")
        return []
    spec = yaml.safe_load(spec_path.read_text())
    attributes = spec.get("attributes") or []
    if mutation == "derived":
        spec["derived"] = [{"name": "derived_x", "expression": expression}]
    if mutation == "nan_bound":
        for a in attributes:
            if a.get("valid_low") is not None:
                a["valid_low"] = float("nan")
                break
    if mutation == "no_attributes":
        spec["attributes"] = []
    elif mutation == "attribute_twice" and attributes:
        attributes.append(dict(attributes[0]))
    for a in attributes:
        if mutation == "swap_bounds" and a.get("valid_low") is not None and a.get("valid_high") is not None:
            a["valid_low"], a["valid_high"] = a["valid_high"] + 1, a["valid_low"]
            break
        if mutation == "drop_categories" and a.get("categories"):
            a.pop("categories")
            break
        if mutation == "kind_numeric" and a.get("kind") in ("binary", "categorical", "ordinal"):
            a["kind"] = "numeric"
            a.pop("categories", None)
            break
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return []


# never closed: Prefect's console handler keeps the stream it first saw (a closed one would fail its later logs)
_OUT, _ERR = io.StringIO(), io.StringIO()


def _command(argv: list[str]) -> tuple[int, str, str]:
    for stream in (_OUT, _ERR):
        stream.seek(0)
        stream.truncate()
    with redirect_stdout(_OUT), redirect_stderr(_ERR):
        code = main([*argv, "--json"])  # an exception other than an input error propagates: a traceback
    out, err = _OUT.getvalue(), _ERR.getvalue()
    assert "Traceback" not in out + err
    if code == 2:
        message = json.loads(out)["error"]
        assert message and "\n" not in message, message
        assert CANARY not in out + err, message
    return code, out, err


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def _check_example(case: dict, root: Path) -> str:
    root.mkdir(parents=True)
    table, spec, artifacts = root / "table.csv", root / "table.yaml", root / "artifacts"
    _write(case, table)
    raw = table.read_bytes()
    code, _, _ = _command(["spec", "draft", str(table), "--out", str(spec)]
                          + (["--target", case["target"]] if case["target"] else []))
    assert code in (0, 2)
    if code == 2:
        return "spec draft refused"
    extra = _mutate(spec, case["mutation"], case.get("expression", ""))
    code, out, _ = _command(["validate", str(table), "--ehr-spec", str(spec), "--artifacts-dir", str(artifacts),
                             "--run-id", "validate"])
    assert code in (0, 1, 2)
    if case["mutation"] in ("nan_bound", "key_twice") and spec.exists() and code != 2:
        assert "valid_low" not in spec.read_text() or case["mutation"] == "key_twice", "a NaN bound was accepted"
    code, out, _ = _command(["synthesize", "--data", str(table), "--spec", str(spec), "--synthesizers", "mst",
                             "--epsilon", "1", "--m", "1", "--runs", "1", "--releases", "1", "--no-non-private",
                             "--iterations", "2", "--artifacts-dir", str(artifacts), "--run-id", "synth", *extra])
    assert code in (0, 2)
    if case["mutation"] in ("key_twice", "scalar_section"):
        assert code == 2, f"{case['mutation']} was not refused"
    if case["mutation"] == "derived" and any(h.strip("(") in case["expression"] for h in HOSTILE if len(h) > 3):
        assert code == 2 or "__" not in case["expression"], "a hostile expression ran"
    assert table.read_bytes() == raw  # the input is only read
    # the example's own inputs: the table, its drafted spec and (the scalar-section mutation) the config it wrote
    outside = {f for f in _files(root) if f.parts[0] != "artifacts"} - {Path("table.csv"), Path("table.yaml"),
                                                                         Path("config.yaml")}
    assert not outside, outside
    inside = {f.parts[1] for f in _files(root) if f.parts[0] == "artifacts" and len(f.parts) > 2}
    assert inside <= {"validate", "synth", "_static", "privacy_ledger.jsonl.members"}, inside  # the ledger's own
    return "finished" if code == 0 else "refused"


YES_NO_TARGET = {"columns": {"age": ["86.4213", "40", "50", "60", "70", "80"], "outcome": ["yes", "no"] * 3},
                 "target": None, "encoding": "utf-8", "separator": ",", "mutation": "drop_categories"}
ONE_CLASS = {"columns": {"hr": ["86.4213", "70.5", "80.1", "90.2", "60.3", "75.5"], "outcome": ["0"] * 6},
             "target": None, "encoding": "utf-8", "separator": ",", "mutation": None}


EXPLICIT: list[dict] = []


def explicit(case: dict):
    """An input that once broke the front door: run every time, before the generated ones, and not counted as one."""
    EXPLICIT.append(case)
    return example(case=case)


@seed(FUZZ_SEED)
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=tables())
# inputs that broke it once (the issue's): a binary column of yes/no without categories, a one-class target,
# dot names, UTF-16, a tab-separated file, bounds the wrong way round
@explicit(YES_NO_TARGET)
@explicit(ONE_CLASS | {"target": "outcome"})
@explicit({"columns": {"..": ["86.4213", "1", "2", "3"], "a.b": ["0", "1", "0", "1"]}, "target": "a.b",
               "encoding": "utf-16", "separator": ",", "mutation": None})
@explicit({"columns": {"hr": ["86.4213", "1", "2", "3"], "sex": ["a", "b", "a", "é"]}, "target": None,
               "encoding": "utf-8", "separator": "\t", "mutation": "swap_bounds"})
@explicit({"columns": {"hr": ["86.4213", "70", "80", "90"]}, "target": None, "encoding": "utf-8",
               "separator": ",", "mutation": "attribute_twice"})
# a table large enough for both sides of the split (each patient's side is a hash of itself: a table of four can
# fall on one side, and is refused) that finishes, so the front door's other end is always reached
@explicit({"columns": {"hr": ["86.4213", "70.5", "80.1", "90.2", "60.3", "75.5", "88.0", "92.4", "66.1", "71.9",
                                  "79.3", "84.6"]}, "target": None, "encoding": "utf-8", "separator": ",",
               "mutation": None})
def fuzz_front_door(case):
    root = Path(tempfile.mkdtemp(prefix="privehr-fuzz-")) / "example"
    os.chdir(root.parent)  # the working directory: nothing may be written here but the example's own files
    outcome = _check_example(case, root)
    kind = "explicit" if case in EXPLICIT else "generated"
    print(f"fuzz example: {kind}: {outcome}", file=sys.__stderr__, flush=True)


def test_random_tables_and_specs_finish_or_stop_with_one_line(tmp_path):
    from prefect.settings import get_current_settings

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "PRIVEHR_LEDGER"}
    # the child's commands report to the flow tests' Prefect server (tests/flows/conftest.py), as a user's would to
    # a running one: a temporary server of its own cost the child about 20 s to start
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_URL": str(get_current_settings().api.url),
            "PRIVEHR_FUZZ_EXAMPLES": str(FUZZ_EXAMPLES), "PRIVEHR_FUZZ_SEED": str(FUZZ_SEED), "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, __file__], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=3600)
    replay = f"(seed {FUZZ_SEED}: PRIVEHR_FUZZ_SEED={FUZZ_SEED} PRIVEHR_FUZZ_EXAMPLES={FUZZ_EXAMPLES} replays it)"
    assert out.returncode == 0, replay + "\n" + out.stdout[-6000:] + out.stderr[-6000:]
    ran = [line.split(": ")[1:] for line in out.stderr.splitlines() if line.startswith("fuzz example: ")]
    generated = [outcome for kind, outcome in ran if kind == "generated"]
    assert len([kind for kind, _ in ran if kind == "explicit"]) == len(EXPLICIT), replay
    assert len(generated) >= FUZZ_EXAMPLES, (replay, ran)  # the generated examples ran, not only the explicit ones
    outcomes = [outcome for _, outcome in ran]
    assert "finished" in outcomes and "refused" in outcomes, outcomes  # both ends of the front door were reached


if __name__ == "__main__":
    fuzz_front_door()
