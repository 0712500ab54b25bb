"""Test-only oracles: slow exact references the tests compare the models against (never shipped)."""
