"""Synthesis: the synthesizers of the synthesis flow, one class each, looked up by name (:func:`get_synthesizer`,
:func:`create_synthesizer`), with what they share: the table codec, scaling, derived columns, and the AIM/MST
mechanisms on private-pgm.

Importing this package registers the built-ins: ``maf`` (DP-NF), ``hflow`` (DP-HFlow), ``aim`` and ``mst``.
"""

from privehr.models.synthesis.synthesizers import (SYNTHESIZERS, SynthesisData, SynthesisMethod, Synthesized,
                                                   choose_synthesizers, create_synthesizer, get_synthesizer,
                                                   register_synthesizer, synthesis_jobs, synthesizer_display_name,
                                                   synthesizer_rank)
from privehr.models.synthesis import flow_synthesizers, marginal_synthesizers  # noqa: F401  (register the built-ins)

__all__ = ["SynthesisMethod", "SynthesisData", "Synthesized", "SYNTHESIZERS", "get_synthesizer", "create_synthesizer",
           "register_synthesizer", "synthesizer_display_name", "synthesizer_rank", "choose_synthesizers",
           "synthesis_jobs"]
