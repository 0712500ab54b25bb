"""Bundled Great Expectations suites (``*.json``) and table specs (``specs/``), installed as package data.

Code finds them with :func:`importlib.resources.files` (``privehr.io.expectation_suites.EXPECTATIONS_DIR``,
``privehr.core.specs.SPEC_DIR``), so an installed wheel works from any directory.
"""
