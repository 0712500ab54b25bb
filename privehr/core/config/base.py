"""The names the configuration declares (labels, models, methods, losses, clipping modes) and the strict base
class every config model shares."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from privehr.core.registry import NAME_PATTERN

__all__ = ["AuditedMethod", "DPSGDClipping", "FineGrainedClipping", "Label", "Loss", "Method", "Model", "PositiveFloat",
           "RunId", "RUN_ID_PATTERN", "BUILTIN_METHODS"]


Label = Literal["mort_hosp", "mort_icu", "los_3", "los_7"]
Model = Literal["logistic_regression", "grud"]
# A training method is one registered class in privehr.models.methods, found by its name: a module that registers
# another is all it takes (this bottom layer cannot import the registry, which refuses a name it does not hold in one
# line, before anything is read). The ones privehr ships, for the schema and the docs:
BUILTIN_METHODS = ("non_private", "dp_sgd", "expm_nf", "dp_expm_nf")
Method = Annotated[str, Field(pattern=NAME_PATTERN, json_schema_extra={"examples": list(BUILTIN_METHODS)})]
AuditedMethod = Method
Loss = Literal["bce", "l2"]
# per-sample clipping of DP-SGD (privehr.models.dpsgd.trainer) and of DP-HFlow's fine-grained modes
# (privehr.models.dpsgd.fine_grained_clipping): the models read their mode names from these
DPSGDClipping = Literal["ghost", "hooks", "functorch"]
FineGrainedClipping = Literal["flat", "per_layer", "per_unit", "sparsified"]
# a privacy budget is a finite positive number: inf, nan and "Infinity" are refused (inf is no privacy at all)
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# a run id names one directory inside artifacts_dir: it starts with a letter or digit, so ".", "..", ".hidden" and
# "_static" (the artifacts directory's shared Data Docs assets) can never be one
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN, description="a directory name inside artifacts_dir: letters, "
                                                                 "digits, '.', '_', '-', starting with a letter or "
                                                                 "digit (default: a UTC timestamp plus a random "
                                                                 "suffix)")]


def _moved(old: str, new: str):
    """A validator refusing a setting that moved, with where it lives now."""
    def check(cls, data):
        if isinstance(data, dict) and old in data:
            raise ValueError(f"{old} moved to {new} (one setting for every release and the ledger)")
        return data
    return model_validator(mode="before")(check)

def _resume_needs_run_id(config):
    if config.resume and not config.run_id:
        raise ValueError("resume needs the run_id of the run to continue")
    return config


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
