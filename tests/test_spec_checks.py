"""A spec is a file a steward may receive from someone else: its derived expressions can only compute (an
allow-listed tree, never Python's eval), its bounds, steps and categories are numbers and categories; everything
else is refused at validation, in one line naming the column, before any table is read or any file written."""

import ast
import json
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from privehr.cli import main
from privehr.core.errors import settings_error
from privehr.core.expressions import FUNCTIONS, ExpressionError, expression_names, parse_expression
from privehr.core.specs import EHRTableSpec, load_ehr_spec

ATTRIBUTES = [{"name": "age", "valid_low": 0, "valid_high": 120}, {"name": "d", "valid_low": 0, "valid_high": 80},
              {"name": "s", "valid_low": 5, "valid_high": 150}]


def _payloads(planted: str) -> dict[str, tuple[str, str]]:
    """name -> (expression, words of the refusal); ``planted``: a file the payloads would write."""
    return {
        "issue_payload": (f'age.__class__.__init__.__globals__["sys"].modules["os"].system("id > {planted}") + age',
                          "attribute access"),
        "dunder_name": ("__class__", "names starting with '__'"),
        "dunder_import": (f"__import__('os').system('touch {planted}')", "attribute access"),
        "import_call": ("__import__('os')", "calling '__import__'"),
        "lambda": (f"(lambda: __import__('os').system('touch {planted}'))()", "lambda"),
        "comprehension": ("[x for x in age]", "comprehensions"),
        "generator": ("sum(x for x in age)", "calling 'sum'"),
        "attribute_chain": ("age.values.sum()", "attribute access"),
        "attribute": ("age.real", "attribute access"),
        "local_variable": ("@age + 1", "'@'"),
        "matmul": ("age @ d", "'@'"),
        "subscript": ("age[0]", "subscripts"),
        "text": ("'x'", "text"),
        "fstring": ("f'{age}'", "f-strings"),
        "keyword": ("clip(age, 0, hi=1)", "keyword arguments"),
        "starred": ("maximum(*age)", "'*' unpacking"),
        "walrus": ("(x := age)", "':='"),
        "if_else": ("age if d else s", "if ... else"),
        "unknown_name": ("age + weight", "'weight' is not an attribute"),
        "unknown_function": ("open(age)", "calling 'open'"),
        "builtin_eval": (f"eval('__import__(\"os\").system(\"touch {planted}\")')", "calling 'eval'"),
        "statement": ("age; import os", "not a valid expression"),
        "two_lines": ("age\nimport os", "not a valid expression"),
        "membership": ("age in d", "'in'"),
        "constant_none": ("age + None", "the constant None"),
        "wrong_arity": ("abs(age, d)", "abs takes 1 argument"),
        "too_long": ("+".join(["age"] * 400), "longer than"),
        "empty": ("  ", "empty expression"),
    }


PAYLOADS = _payloads("/tmp/privehr-planted")


def _raw(expression: str, **spec) -> dict:
    return {"name": "t", "attributes": ATTRIBUTES, **spec,
            "derived": [{"name": "m", "expression": "2 / 3 * d + 1 / 3 * s"}, {"name": "x", "expression": expression}]}


@pytest.mark.parametrize("case", PAYLOADS)
def test_an_expression_outside_the_language_is_refused_by_the_spec_naming_the_column(case):
    expression, words = PAYLOADS[case]
    raw = _raw(expression)
    with pytest.raises(ValueError) as err:
        EHRTableSpec.model_validate(raw)
    message = str(settings_error(err.value, "table spec t.yaml", raw))
    assert message.startswith("table spec t.yaml: derived column 'x': ") and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize("expression", ["2 / 3 * d + 1 / 3 * s", "m > 20", "m > 20 & d < 5", "(m > 20) | (s < 9)",
                                        "not m > 20", "~(m > 20)", "0 < age <= 65", "age ** 2 // 3 % 7 - -d",
                                        "where(m > 20, log(s), sqrt(abs(d)))", "clip(maximum(d, s), 0, 100)",
                                        "exp(minimum(age, 1.5e1)) != 1", "m > 20 and (age < 40 or s >= 1e2)"])
def test_arithmetic_comparisons_and_the_named_functions_are_accepted(expression):
    spec = EHRTableSpec.model_validate(_raw(expression))
    assert [d.name for d in spec.derived] == ["m", "x"]


def test_a_derived_column_reads_only_attributes_and_the_derived_columns_above_it():
    raw = {"name": "t", "attributes": ATTRIBUTES, "derived": [{"name": "h", "expression": "m > 20"},
                                                              {"name": "m", "expression": "d + s"}]}
    with pytest.raises(ValueError, match="derived column 'h': 'm' is not an attribute of the spec or an earlier"):
        EHRTableSpec.model_validate(raw)


def test_the_names_an_expression_reads_come_from_its_tree():
    assert expression_names("where(m > 20 & d < 5, abs(s), age)") == ["m", "d", "s", "age"]
    assert expression_names("abs_d + abs(d)") == ["abs_d", "d"]  # a function's name is not a column
    with pytest.raises(ExpressionError, match="attribute access"):
        expression_names("d.__class__")


def test_numbers_too_large_to_be_finite_are_refused():
    with pytest.raises(ExpressionError, match="too large to be finite"):
        parse_expression("d * 1e400", ["d"])


def test_the_bundled_specs_derived_columns_still_validate():
    spec = load_ehr_spec("harrod_ehr")
    assert {d.name: d.expression for d in spec.derived} == {
        "mean_pap": "2 / 3 * pap_diastolic + 1 / 3 * pap_systolic", "hypertensive": "mean_pap > 20"}


# 2. numbers that are numbers

def _one(attribute: dict, **spec) -> str:
    raw = {"name": "t", "attributes": [attribute], **spec}
    with pytest.raises(ValueError) as err:
        EHRTableSpec.model_validate(raw)
    message = str(settings_error(err.value, "table spec t.yaml", raw))
    assert "\n" not in message
    return message


@pytest.mark.parametrize("field", ["valid_low", "valid_high", "outlier_low", "outlier_high"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_bound_that_is_nan_or_infinite_is_refused_naming_the_attribute_and_bound(field, value):
    message = _one({"name": "hr", field: value})
    assert message == f"table spec t.yaml: attribute 'hr', {field}: not a finite number. Fix: give a finite number"


@pytest.mark.parametrize("text", ["valid_low: .nan", "valid_high: .inf", "outlier_low: -.Inf", "valid_low: .NaN"])
def test_yaml_nan_and_infinity_bounds_are_refused_when_the_spec_is_loaded(text, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\nattributes:\n  - {{name: hr, {text}}}\n")
    with pytest.raises(ValueError, match=r"attribute 'hr', \w+: not a finite number"):
        load_ehr_spec(path)


@pytest.mark.parametrize("step, words", [(math.nan, "step: not a finite number"), (math.inf, "step: not a finite"),
                                         (0, "step must be a positive number"),
                                         (-5, "step must be a positive number")])
def test_a_step_must_be_finite_and_above_zero(step, words):
    assert words in _one({"name": "score", "kind": "integer", "valid_low": 0, "step": step})


@pytest.mark.parametrize("categories, words", [
    ([], "list its categories"), (None, "list its categories"), (["a", math.nan], "a category is NaN or infinite"),
    (["a", math.inf], "a category is NaN or infinite"), (["a", "a"], "its categories repeat"),
    (["a", " "], "a category is empty text"), (["a", "none"], "a category is one of file.na_tokens")])
def test_categories_are_nonempty_distinct_and_readable(categories, words):
    message = _one({"name": "smoker", "kind": "categorical", "categories": categories})
    assert "'smoker'" in message and words in message, message


def test_a_category_is_refused_only_when_it_is_one_of_this_spec_s_na_tokens():
    attribute = {"name": "smoker", "kind": "categorical", "categories": ["none", "current"]}
    spec = EHRTableSpec.model_validate({"name": "t", "attributes": [attribute], "file": {"na_tokens": ["", "NA"]}})
    assert spec.bounds()["smoker"].levels == ["none", "current"]


# the console commands that read a spec refuse it in one line, before anything runs or is written

@pytest.fixture()
def planted_spec(tmp_path):
    planted = tmp_path / "planted"
    expression = _payloads(str(planted))["issue_payload"][0]
    path = tmp_path / "received.yaml"
    path.write_text(yaml.safe_dump(_raw(expression), sort_keys=False))
    return path, planted


@pytest.mark.parametrize("command", [["spec", "validate", "{spec}"],
                                     ["expectations", "build", "--spec", "{spec}"],
                                     ["ehr-prepare", "--data", "{table}", "--spec", "{spec}"],
                                     ["validate", "{table}", "--ehr-spec", "{spec}"],
                                     ["synthesize", "--data", "{table}", "--spec", "{spec}", "--epsilon", "1",
                                      "--synthesizers", "mst"]])
def test_every_command_that_reads_a_spec_refuses_the_payload_in_one_line_writing_nothing(
        command, planted_spec, tmp_path, capsys, monkeypatch):
    spec, planted = planted_spec
    table = tmp_path / "table.csv"
    table.write_text("age,d,s\n40,10,30\n")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [a.format(spec=spec, table=table) for a in command] + ["--json"]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    out, err = capsys.readouterr()
    message = json.loads(out)["error"]
    assert message.startswith(f"table spec {spec}: derived column 'x': not allowed: attribute access") and \
        "\n" not in message
    assert err.strip() == f"privehr: error: {message}" and "Traceback" not in err
    assert not planted.exists() and sorted(p.name for p in tmp_path.iterdir()) == before
    assert not any(work.iterdir())


def test_spec_validate_says_a_good_spec_is_valid(capsys):
    assert main(["spec", "validate", "harrod_ehr", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["spec"] == "harrod_ehr" and summary["derived"] == ["mean_pap", "hypertensive"]


# the expression language, fuzzed: any string is a checked tree or one ExpressionError line, never another exception,
# and a checked tree evaluates to one number per row

TOKENS = ["age", "d", "s", "m", "(", ")", "+", "-", "*", "/", "**", "//", "%", ">", "<=", "==", "!=", "&", "|", "~",
          "not", "and", "or", ",", "1", "0", "2.5", "1e400", "abs", "where", "clip", "log", ".", "__class__",
          "__import__", "[", "]", "'os'", "lambda", ":", "@", ":=", "for", "in", "if", "else", "x", "=", ";", "\n",
          "*", "**", "{", "}", "f'{age}'", "True", "None", "eval", "open", "system"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12), st.sampled_from([" ", ""]))
def test_any_string_is_a_checked_tree_or_one_line_and_a_tree_computes(tokens, sep):
    import numpy as np
    import pandas as pd

    from privehr.models.data.derived_columns import evaluate

    expression = sep.join(tokens)
    frame = pd.DataFrame({"age": [40.0, 0.0, np.nan], "d": [1.0, -2.0, 0.0], "s": [3.0, 0.0, 9.0],
                          "m": [0.0, 1.0, 2.0]})
    try:
        tree = parse_expression(expression, frame.columns)
    except ExpressionError as err:
        assert "\n" not in str(err) and str(err)
        return
    allowed = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp,
               ast.Call, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    assert all(isinstance(node, allowed) for node in ast.walk(tree)), ast.dump(tree)
    assert all(node.func.id in FUNCTIONS for node in ast.walk(tree) if isinstance(node, ast.Call))
    value = evaluate(expression, frame)
    assert len(value) == 3 and value.dtype.kind in "if"


_LEAVES = st.sampled_from(["age", "d", "s", "m", "1", "0", "2.5", "1e300"])
GRAMMAR = st.recursive(_LEAVES, lambda e: st.one_of(
    st.tuples(e, st.sampled_from(["+", "-", "*", "/", "**", "//", "%", ">", "<=", "==", "!=", "&", "|", "and", "or"]),
              e).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    e.map(lambda x: f"-{x}"), e.map(lambda x: f"(not {x})"), e.map(lambda x: f"~{x}"),
    st.tuples(st.sampled_from(["abs", "log", "sqrt", "exp"]), e).map(lambda t: f"{t[0]}({t[1]})"),
    st.tuples(st.sampled_from(["where", "clip"]), e, e, e).map(lambda t: f"{t[0]}({t[1]}, {t[2]}, {t[3]})")),
    max_leaves=8).filter(lambda e: len(e) <= 400)  # unary wrappers add no leaf: kept within the parser's nesting


@settings(max_examples=200, deadline=None, derandomize=True)
@given(GRAMMAR)
def test_every_expression_of_the_language_is_accepted_and_computes_one_number_per_row(expression):
    import numpy as np
    import pandas as pd

    from privehr.models.data.derived_columns import evaluate

    frame = pd.DataFrame({"age": [40.0, 0.0, np.nan], "d": [1.0, -2.0, 0.0], "s": [3.0, 0.0, 9.0],
                          "m": [0.0, 1.0, 2.0]})
    value = evaluate(expression, frame)  # numpy's inf and nan, never an exception
    assert len(value) == 3 and value.dtype.kind in "if"


def test_a_drafted_spec_has_finite_bounds_when_the_table_holds_infinity(tmp_path):
    from privehr.io.spec_draft import draft_spec

    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n1,inf,-inf\n2,3,nan\n3,4.5,inf\n")
    spec, notes = draft_spec(table, None, 20)
    attributes = {a["name"]: a for a in spec["attributes"]}
    assert (attributes["b"]["valid_low"], attributes["b"]["valid_high"]) == (3.0, 4.5)
    assert "valid_low" not in attributes["c"]
    assert any(n.startswith("b: 1 infinite value(s)") for n in notes)
    assert any(n.startswith("c: no finite value") for n in notes)
    EHRTableSpec.model_validate(spec)
