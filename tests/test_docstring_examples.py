"""Every ``>>>`` example in the package runs and holds, in every layer (the docs cannot drift from the code)."""

import doctest
import importlib
import pkgutil

import pytest

import privehr
import privehr.flows
import privehr.models
import privehr.tasks

# the package's own folder, and the layers the wheel maps into it from the repository's top-level folders
MODULES = sorted({m.name for package in (privehr, privehr.models, privehr.tasks, privehr.flows)
                  for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                  if not m.name.endswith("__main__")})


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_examples_exist():
    counted = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted
                  for n in MODULES)
    assert counted >= 60
