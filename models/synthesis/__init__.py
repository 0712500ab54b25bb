"""Synthesis: the synthesizers of the synthesis flow, one class each, looked up by name (:func:`get_synthesizer`,
:func:`create_synthesizer`), with what they share: the table codec, scaling, derived columns, and the AIM/MST
mechanisms on private-pgm.

Importing this package imports every module in it: the built-ins ``maf`` (DP-NF), ``hflow`` (DP-HFlow), ``aim``,
``mst`` and ``aim_dyadic`` register themselves, and so does any synthesizer a module added here defines.
"""

import importlib
import pkgutil

from privehr.models.synthesis.synthesizers import (SYNTHESIZERS, SynthesisData, SynthesisMethod, Synthesized,
                                                   choose_synthesizers, create_synthesizer, get_synthesizer,
                                                   register_synthesizer, synthesis_jobs, synthesizer_display_name,
                                                   synthesizer_rank)
from privehr.models.synthesis import flow_synthesizers, marginal_synthesizers  # noqa: F401,E402  (the built-ins)

for _module in pkgutil.iter_modules(__path__):  # any other module here registers its synthesizer on import
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["SynthesisMethod", "SynthesisData", "Synthesized", "SYNTHESIZERS", "get_synthesizer", "create_synthesizer",
           "register_synthesizer", "synthesizer_display_name", "synthesizer_rank", "choose_synthesizers",
           "synthesis_jobs"]
