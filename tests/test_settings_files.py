"""Settings and spec files say what they mean: a key given twice is refused by name and line (YAML and JSON keep the
last value silently), and a section given as a single value beside its option is one line, not a TypeError."""

import pytest

from privehr.core.config import load_config
from privehr.core.errors import InputError
from privehr.core.specs import load_ehr_spec
from privehr.core.yaml_files import DuplicateKeyError, load_json, load_yaml


@pytest.mark.parametrize("text, words", [
    ("privacy:\n  budget_epsilon: 1\n  budget_epsilon: 2\n", "key 'budget_epsilon' given twice (lines 2 and 3)"),
    ("privacy: {delta: 1.0e-5, delta: 1.0e-6}\n", "key 'delta' given twice (line 1)"),
    ("seed: 1\nsplit: {seed: 2}\nseed: 3\n", "key 'seed' given twice (lines 1 and 3)"),
    ("- {name: hr}\n- {name: bp, valid_low: 1, valid_low: 2}\n", "key 'valid_low' given twice (line 2)")])
def test_a_key_given_twice_is_refused_by_name_and_line(text, words):
    with pytest.raises(DuplicateKeyError) as err:
        load_yaml(text)
    assert str(err.value) == f"{words}; keep one"


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine():
    assert load_yaml("a: {seed: 1}\nb: {seed: 2}\n") == {"a": {"seed": 1}, "b": {"seed": 2}}
    assert load_yaml("base: &b {seed: 1, m: 2}\nrun: {<<: *b, seed: 3}\n")["run"] == {"seed": 3, "m": 2}
    assert load_json('{"a": {"seed": 1}, "b": {"seed": 2}}') == {"a": {"seed": 1}, "b": {"seed": 2}}
    with pytest.raises(DuplicateKeyError, match="key 'seed' given twice; keep one"):
        load_json('{"seed": 1, "seed": 2}')


@pytest.mark.parametrize("suffix, text", [(".yaml", "privacy:\n  budget_epsilon: 1\n  budget_epsilon: 2\n"),
                                          (".json", '{"privacy": {"budget_epsilon": 1, "budget_epsilon": 2}}')])
def test_a_pipeline_config_with_a_key_twice_is_refused(tmp_path, suffix, text):
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    with pytest.raises(InputError, match=f"config file {path}: key 'budget_epsilon' given twice") as err:
        load_config(path)
    assert "\n" not in str(err.value)


def test_a_spec_with_a_key_twice_is_refused_naming_the_key_and_lines(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nattributes:\n  - name: hr\n    valid_low: 20\n    valid_low: 2\n")
    with pytest.raises(InputError, match=rf"^table spec {path}: key 'valid_low' given twice \(lines 4 and 5\); "
                                         "keep one$"):
        load_ehr_spec(path)


def test_a_section_given_as_a_value_beside_its_option_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data: 5\n")
    with pytest.raises(InputError, match=r"data: not a mapping\. Fix: give a mapping of settings \(key: value\), "
                                         r"e\.g\. data: \{hdf5_path: \.\.\.\}$"):
        load_config(path, **{"data.hdf5_path": "x.h5"})
    with pytest.raises(InputError, match="data: not a mapping"):  # the file alone: the same words
        load_config(path)
