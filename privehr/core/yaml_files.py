"""Settings and spec files as privehr reads them: YAML through the safe loader, and a key given twice in one mapping
refused by name and line (YAML and JSON would keep the last value silently: ``budget_epsilon: 1`` then ``2`` runs
at 2).

>>> load_yaml("privacy:\\n  budget_epsilon: 1\\n  budget_epsilon: 2\\n")
Traceback (most recent call last):
...
privehr.core.yaml_files.DuplicateKeyError: key 'budget_epsilon' given twice (lines 2 and 3); keep one
>>> load_yaml("base: &b {seed: 1}\\nrun: {<<: *b, seed: 2}\\n")["run"]  # a merge key's entries may be overridden
{'seed': 2}
"""

from __future__ import annotations

import json

import yaml

__all__ = ["DuplicateKeyError", "load_yaml", "load_json"]


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one mapping; ``str(err)`` names it and its lines (never a value)."""

    def __init__(self, key, lines: tuple[int, int] | None = None):
        super().__init__(key, lines)
        self.key, self.lines = key, lines

    def __str__(self) -> str:
        key = repr(self.key) if isinstance(self.key, (str, int, float)) and len(str(self.key)) <= 64 \
            and str(self.key).isprintable() else "a key"
        where = "" if self.lines is None else (f" (line {self.lines[0]})" if self.lines[0] == self.lines[1]
                                                else f" (lines {self.lines[0]} and {self.lines[1]})")
        return f"key {key} given twice{where}; keep one"


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}  # key -> its line
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # <<: its entries may be overridden
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, (seen[key], line))
                    seen[key] = line
                except TypeError:  # an unhashable key: the safe loader's own error follows
                    break
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """``text`` as YAML (safe loader).

    Raises:
        DuplicateKeyError: a mapping gives a key twice.
        yaml.YAMLError: the text is not YAML.
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def _unique(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    twice = next((k for k in keys if keys.count(k) > 1), None)
    if twice is not None:
        raise DuplicateKeyError(twice)
    return dict(pairs)


def load_json(text: str):
    """``text`` as JSON; a key given twice in an object raises :class:`DuplicateKeyError`."""
    return json.loads(text, object_pairs_hook=_unique)
