"""Per-layer DP-SGD rules, one file per layer type, registered on import (as Opacus's ``grad_sample/``): each gives
a layer's per-sample squared gradient norms and clipped sums from its inputs and output gradients (ghost clipping,
:mod:`privehr.models.dpsgd.ghost_clipping`), and, for privehr's own layers, Opacus's per-sample rule.

A new layer type is one new file here with ``@register_ghost_rule(TheLayer)`` and an ``example()``; the common
harness (tests/models/dpsgd/test_rules.py) checks every registered rule against ``torch.func``.
"""

from privehr.models.dpsgd.rules.base import GHOST_RULES, Call, GhostRule, register_ghost_rule, rule_of
from privehr.models.dpsgd.rules import (input_decay, linear, low_rank_linear, masked_linear,  # noqa: F401  (registers)
                                        stacked_input_decay, stacked_linear)

__all__ = ["GHOST_RULES", "Call", "GhostRule", "register_ghost_rule", "rule_of"]
