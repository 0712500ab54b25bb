"""Preset grids (``demo``, ``full``) and the loader that layers a profile, a YAML/JSON file and overrides."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from privehr.core.errors import InputError, settings_error, where_in_text
from privehr.core.config.pipeline import PipelineConfig
from privehr.core.yaml_files import DuplicateKeyError, load_json, load_yaml

__all__ = ["BRIDGES_2023_EPSILONS", "SU_2023_MUS", "DEMO_SYNTHESIS", "load_config", "PROFILES"]


BRIDGES_2023_EPSILONS = [1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0]
SU_2023_MUS = [6.10, 3.92, 2.45, 1.49]

DEMO_SYNTHESIS = {"path": "data/ehr/EHR_dataset.csv", "mice": {"m": 2}, "runs": 1, "releases": 2}

PROFILES: dict[str, dict] = {
    # the demo's dev split holds ~18 deaths: its AUROC keeps rising while the model overfits, its loss does not
    "demo": {"synthesis": DEMO_SYNTHESIS, "training": {"non_private": {"early_stopping": "loss"}}},
    # Bridges et al. 2023: epsilon 1e-4 ... 10, both losses, 10 seeds (10 flows x 1000 samples), a real search
    "full": {"training": {"seeds": 10, "search_budget": 10, "losses": ["bce", "l2"],
                          "dp_sgd": {"epsilons": BRIDGES_2023_EPSILONS},
                          "dp_expm_nf": {"epsilons": BRIDGES_2023_EPSILONS},
                          "expm_nf": {"epsilons": BRIDGES_2023_EPSILONS, "seeds": 10, "eval_samples": 1000,
                                      "models": ["logistic_regression", "grud"],
                                      "steps": 300, "samples": 32, "grud_samples": 16, "grud_batch_size": 256}},
             # Su et al. 2023: 5 imputations x 10 flows x 10 releases, T = 8000, their four mu budgets; the two largest
             # are above the epsilon ceiling at delta 1e-5 (epsilon 44 and 24), so they run labelled weak
             "synthesis": {**DEMO_SYNTHESIS, "mice": {"m": 5}, "runs": 10, "releases": 10, "dpnf": {"steps": 8000},
                           "mus": SU_2023_MUS},
             "privacy": {"allow_above_ceiling": True}},
}


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(path: str | Path | None = None, profile: str = "demo", **overrides) -> PipelineConfig:
    """A ``PipelineConfig``: a profile, then a YAML/JSON file (optional), then dotted overrides.

    ``overrides`` maps dotted keys to values, e.g. ``{"data.hdf5_path": "x.h5"}``.
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise InputError(f"config file not found: {path}")
        try:
            text = path.read_text()
            raw = (load_json(text) if path.suffix == ".json" else load_yaml(text)) or {}
        except DuplicateKeyError as err:
            raise InputError(f"config file {path}: {err}") from None
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise InputError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}"
                             f"{where_in_text(err)}; fix that line") from None
        except (UnicodeDecodeError, IsADirectoryError) as err:
            raise InputError(f"config file {path} cannot be read as UTF-8 text ({type(err).__name__}); save it as "
                             "UTF-8") from None
        if not isinstance(raw, dict):
            raise InputError(f"config file {path} must hold a mapping of settings")
    # a copy: the overrides below write into nested dicts, which must never be the profile's own (one call's options
    # leaked into every later load_config of the process: a worker's next run, the next test)
    raw = _merge(copy.deepcopy(PROFILES[profile]), raw)
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = raw
        *parents, leaf = dotted.split(".")
        for i, key in enumerate(parents):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):  # `data: 5` in the file, and --data
                section = ".".join(parents[:i + 1])
                raise InputError(f"configuration {path if path is not None else '(profile and options)'}: {section}: "
                                 f"not a mapping. Fix: give a mapping of settings (key: value), e.g. "
                                 f"{section}: {{{'.'.join(dotted.split('.')[i + 1:])}: ...}}")
        node[leaf] = value
    try:
        return PipelineConfig.model_validate(raw)
    except ValueError as err:
        raise settings_error(err, "configuration " + (str(path) if path is not None else "(profile and options)"), raw) from None
