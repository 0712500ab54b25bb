"""Training methods of the grid, one module each, looked up by name (:func:`get_method`, :func:`create_method`).

Importing this package imports every module in it, and each registers its method: the built-ins ``non_private``,
``dp_sgd``, ``expm_nf`` and ``dp_expm_nf``, and any module added here (adding a method is that module and its test).
"""

import importlib
import pkgutil


from privehr.models.methods.base import (TRAINING_METHODS, CellData, ClassifierMethod, Evaluation, FitSpec, Release,
                                         TrainingMethod, create_method, epsilon_label, fit_groups, get_method, grid,
                                         is_baseline, method_display_name, register_method, seeds_of)
from privehr.models.methods import dp_expm_nf, dp_sgd, expm_nf, non_private  # noqa: F401,E402  (the built-ins)

for _module in pkgutil.iter_modules(__path__):  # any other module here registers its method on import
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TrainingMethod", "ClassifierMethod", "FitSpec", "CellData", "Release", "Evaluation", "register_method",
           "get_method", "create_method", "TRAINING_METHODS", "grid", "seeds_of", "fit_groups", "method_display_name",
           "is_baseline", "epsilon_label"]
