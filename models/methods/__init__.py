"""Training methods of the grid, one module each, looked up by name (:func:`get_method`, :func:`create_method`).

Importing this package registers the built-in methods: ``non_private``, ``dp_sgd``, ``expm_nf`` and
``dp_expm_nf``.
"""

from privehr.models.methods.base import (TRAINING_METHODS, CellData, ClassifierMethod, Evaluation, FitSpec, Release,
                                         TrainingMethod, create_method, epsilon_label, fit_groups, get_method, grid,
                                         is_baseline, method_display_name, register_method, seeds_of)
from privehr.models.methods import dp_expm_nf, dp_sgd, expm_nf, non_private  # noqa: F401  (register the built-ins)

__all__ = ["TrainingMethod", "ClassifierMethod", "FitSpec", "CellData", "Release", "Evaluation", "register_method",
           "get_method", "create_method", "TRAINING_METHODS", "grid", "seeds_of", "fit_groups", "method_display_name",
           "is_baseline", "epsilon_label"]
