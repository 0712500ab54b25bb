"""A registry of named implementations, the pattern of Opacus's accountant and grad-sampler registries.

Each implementation is a class with a ``name``; decorating it with :meth:`Registry.register` stores the class
under that name, and code looks implementations up by the name the configuration holds instead of branching
on it: ``registry[name]`` is the class, ``registry.create(name, *settings)`` a configured instance (Opacus's
``create_accountant``). Where the bottom layer declares the names (a ``Literal`` in the config, so that
pydantic and the deployments' schemas can check them), the registry refuses any other name.

>>> shapes = Registry("shape", declared=("circle", "square"))
>>> @shapes.register
... class Circle:
...     name = "circle"
>>> shapes["circle"].name, shapes.create("circle").name, "square" in shapes
('circle', 'circle', False)
>>> shapes["hexagon"]
Traceback (most recent call last):
...
privehr.core.errors.InputError: unknown shape 'hexagon'; choose one of ('circle',)
>>> named = Registry("shape", requires=("display_name",))
>>> @named.register
... class Square:
...     name = "square"
Traceback (most recent call last):
...
ValueError: shape 'square' does not set display_name
>>> @named.register  # doctest: +ELLIPSIS
... class Triangle:
...     name = "Triangle"
Traceback (most recent call last):
...
ValueError: shape name 'Triangle' is not one a configuration can hold (^[a-z][a-z0-9_]*$: lowercase ...
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Generic, TypeVar

from privehr.core.errors import InputError

__all__ = ["Registry", "NAME_PATTERN"]

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"  # the names a configuration holds (privehr.core.config: Method, Synthesizer)

T = TypeVar("T")


class Registry(Generic[T]):
    """Registered classes by name; ``create`` configures one."""

    def __init__(self, what: str, declared: tuple[str, ...] | None = None, requires: tuple[str, ...] = ()):
        self.what, self.declared, self.requires = what, declared, requires
        self._items: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: store ``cls`` under ``cls.name``; refused where it lacks an attribute every
        implementation must set (``requires``: a display name, say, so that no table elsewhere has to name it)."""
        if not re.fullmatch(NAME_PATTERN, str(getattr(cls, "name", ""))):
            raise ValueError(f"{self.what} name {getattr(cls, 'name', None)!r} is not one a configuration can hold "
                             f"({NAME_PATTERN}: lowercase letters, digits and _)")
        if self.declared is not None and cls.name not in self.declared:
            raise ValueError(f"{self.what} {cls.name!r} is not declared in the configuration (one of "
                             f"{self.declared})")
        if cls.name in self._items:
            raise ValueError(f"{self.what} {cls.name!r} is registered twice")
        missing = [a for a in self.requires if not cls.__dict__.get(a)]  # its own: not a parent's
        if missing:
            raise ValueError(f"{self.what} {cls.name!r} does not set {', '.join(missing)}")
        self._items[cls.name] = cls
        return cls

    def create(self, name: str, *args, **kwargs) -> T:
        """An instance of the class registered as ``name``, configured by ``args`` and ``kwargs``."""
        return self[name](*args, **kwargs)

    def __getitem__(self, name: str) -> type[T]:
        try:
            return self._items[name]
        except KeyError:
            raise InputError(f"unknown {self.what} {name!r}; choose one of {tuple(self._items)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self):
        return self._items.items()

    def keys(self):
        return self._items.keys()

    def values(self):
        return self._items.values()
