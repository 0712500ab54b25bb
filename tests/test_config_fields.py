"""Every configuration field is read somewhere: a test walks the schema of every config class and fails on
a field that no code outside the schema reads.

Static, by name and holder: a field ``f`` of a class held under the field name ``h`` (``training.dp_sgd``)
is read when some code reads ``<...>.h.f``, or ``x.f`` where ``x`` was assigned from ``<...>.h`` or is a
parameter or a local variable annotated with the class, or ``self.f`` in the class's own methods. A class
that is also a flow's parameter (no holder) counts any read of ``.f``. A class shared by two holders (one
set of fields for both) must be read as a whole in each, which is why the audit's shadows use the settings
classes without the grid's epsilons (``DPSGDSettings``, ``NonPrivateSettings``).
"""

import ast
import collections
import inspect
import typing
from pathlib import Path

from pydantic import BaseModel

import privehr.core.config as config_module
import privehr.core.inference_config as inference_config_module

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for folder in ("privehr", "flows", "tasks", "models") for p in (ROOT / folder).rglob("*.py")]


def _chain(node) -> list[str]:
    out = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        out.append(node.id)
    return out[::-1]


def _function_reads(fn, class_name: str | None, reads: dict) -> None:
    alias = collections.defaultdict(set)
    if class_name is not None:
        alias["self"].add(f"<{class_name}>")
    for arg in fn.args.args + fn.args.kwonlyargs:
        for node in ast.walk(arg.annotation) if arg.annotation is not None else ():
            if isinstance(node, ast.Name):
                alias[arg.arg].add(f"<{node.id}>")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                alias[arg.arg].add(f"<{node.value}>")
    for node in ast.walk(fn):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):  # x: SomeConfig = ...
            alias[node.target.id] |= {f"<{n.id}>" for n in ast.walk(node.annotation) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                else [(target, value)]
            for name, expr in pairs:
                for branch in ([expr.body, expr.orelse] if isinstance(expr, ast.IfExp) else [expr]):
                    if isinstance(name, ast.Name) and isinstance(branch, ast.Attribute):
                        alias[name.id].add(branch.attr)
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _chain(node)
            if len(chain) >= 2:
                reads[node.attr].add(chain[-2])
                if len(chain) == 2:
                    reads[node.attr] |= alias.get(chain[0], set())


def _reads() -> dict[str, set[str]]:
    """field name -> the names it was read under (holder field names, or <ClassName> for typed names)."""
    reads = collections.defaultdict(set)
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        in_class = {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    in_class[fn] = cls.name
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            _function_reads(fn, in_class.get(fn), reads)
    return reads


def _schema() -> tuple[dict[str, type[BaseModel]], dict[str, set[str]]]:
    classes, holders = {}, collections.defaultdict(set)

    def walk(cls):
        if cls.__name__ in classes:
            return
        classes[cls.__name__] = cls
        for name, field in cls.model_fields.items():
            types, i = [field.annotation], 0
            while i < len(types):
                types += list(typing.get_args(types[i]))
                i += 1
            for t in types:
                if inspect.isclass(t) and issubclass(t, BaseModel):
                    holders[t.__name__].add(name)
                    walk(t)

    for module in (config_module, inference_config_module):
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, BaseModel) and cls.__module__.startswith(module.__name__):
                walk(cls)
    return classes, holders


ROOTS = {"PipelineConfig", "SynthesisConfig", "EHRPrepareConfig", "StewardConfig", "AuditConfig", "InferenceConfig"}


def _unread(classes: dict, holders: dict, reads: dict) -> list[str]:
    unread = []
    for name, cls in sorted(classes.items()):
        typed = {f"<{base.__name__}>" for base in cls.__mro__}
        for field in cls.model_fields:
            seen = reads.get(field, set())
            if name in ROOTS and seen:
                continue
            if not seen & (holders[name] | typed):
                unread.append(f"{name}.{field} (held as {sorted(holders[name]) or 'a flow parameter'})")
    return unread


def test_every_config_field_is_read():
    classes, holders = _schema()
    assert {"PipelineConfig", "TrainingConfig", "DPSGDConfig", "AuditConfig", "InferenceConfig"} <= set(classes)
    unread = _unread(classes, holders, _reads())
    assert not unread, "config fields no code reads (read them or remove them): " + ", ".join(unread)


def test_the_walk_reports_an_unread_field_and_a_field_read_under_another_holder():
    """The check is not vacuous: a new field nobody reads is reported, and so is a field read only through
    another class's holder (the audit's shadows reading ``epsilons`` would not count for ``training.dp_sgd``)."""
    classes, holders = _schema()
    reads = _reads()

    class Shadows(config_module.DPSGDSettings):
        never_read_anywhere: int = 3

    fake = {**classes, "Shadows": Shadows}
    fake_holders = {**holders, "Shadows": {"shadow_training"}}
    reported = _unread(fake, collections.defaultdict(set, fake_holders), reads)
    assert any(r.startswith("Shadows.never_read_anywhere") for r in reported)
    assert any(r.startswith("Shadows.epochs") for r in reported)  # read as dp_sgd.epochs, never shadow_training
    assert not any(r.startswith(("DPSGDConfig.", "AuditConfig.")) for r in reported)
