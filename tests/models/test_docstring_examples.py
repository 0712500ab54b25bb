"""Every ``>>>`` example in the models and core layers runs and holds (the docs cannot drift from the code)."""

import doctest
import importlib
import pkgutil

import pytest

import privehr.core as core
import privehr.models as models

MODULES = sorted(m.name for package in (models, core)
                 for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_examples_exist():
    counted = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted
                  for n in MODULES)
    assert counted >= 20
