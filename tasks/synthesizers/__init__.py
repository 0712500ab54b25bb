"""Synthesizers of the synthesis flow, one class each, looked up by name (:func:`get_synthesizer`).

Importing this package registers the built-ins: ``maf`` (DP-NF), ``hflow`` (DP-HFlow), ``aim`` and ``mst``.
"""

from privehr.tasks.synthesizers.base import (SYNTHESIZERS, SynthesisJob, SynthesisMethod, Synthesized,
                                             get_synthesizer, register_synthesizer)
from privehr.tasks.synthesizers import flows, marginal  # noqa: F401  (register the built-ins)

__all__ = ["SynthesisMethod", "SynthesisJob", "Synthesized", "SYNTHESIZERS", "get_synthesizer",
           "register_synthesizer"]
