"""A small honest release bundle built as tasks/release_bundle.py builds one (its card, the ledger entries,
``write_manifest``) from two logistic regressions, without a pipeline run: for the forgery tests
(tests/io/test_bundle_forgery.py) and ``predict``'s (tests/tasks/test_predict.py)."""

from __future__ import annotations

import hashlib
import json
import io
from pathlib import Path

import numpy as np
import torch

from privehr.core.config import PipelineConfig
from privehr.core.strict_json import strict_dumps
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.io.bundle_signature import SIGNATURE, fingerprint, hospital_key, signature_record
from privehr.io.ledger import Ledger
from privehr.io.release_bundle import MANIFEST, bundle_total, public_entry, verify_bundle, write_manifest
from privehr.models.classifiers import build_classifier
from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms
from privehr.models.privacy.ledger import LedgerEntry
from privehr.tasks.release_bundle import LABEL_DEFINITIONS, _card, _guarantee

N_VARIABLES, N_HOURS, DELTA = 3, 24, 1e-5
CELLS = {"mort_icu": "mort_icu-logistic_regression-dp_sgd-bce-eps1",
         "los_3": "los_3-logistic_regression-dp_sgd-bce-eps1"}


def weights(label: str, seed: int, n_variables: int = N_VARIABLES) -> bytes:
    """A logistic regression's bundled model file (weights only), as the pipeline saves one."""
    model = build_classifier("logistic_regression", n_variables, N_HOURS, seed=seed)
    state = {"cell": {"label": label}, "seed": 0, "hyperparameters": {"max_grad_norm": 1.0},
             "state_dict": {k: v.detach() for k, v in model.state_dict().items()}, "training": {"epochs": 1},
             "architecture": {"model": "logistic_regression", "n_variables": n_variables, "n_hours": N_HOURS,
                              "hidden_size": 32}}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_bundle(tmp_path: Path, count_source: str = "dp", variables: list[str] | None = None,
                test_records: int = 400, sigma: float = 1.0) -> dict:
    """An honest bundle under ``tmp_path / "release"``: two DP-SGD logistic regressions over ``variables`` (three
    placeholders by default), their DP evaluations, record counts released by the geometric mechanism (``dp``) or
    exact (``public``: ``release.record_count: public``), a public featurizer; signed by the hospital's key beside
    ``tmp_path / "hospital" / "ledger.jsonl"``. ``test_records``: the size of the test split its DP evaluations
    count (many make them informative); ``sigma``: the fits' noise multiplier (the evaluations' is twice it). Returns
    its paths, entries, key fingerprint and total."""
    variables = variables or [f"v{i}" for i in range(N_VARIABLES)]
    config = PipelineConfig.model_validate({"device": "cpu"})
    ledger_path = tmp_path / "hospital" / "ledger.jsonl"
    out = tmp_path / "release"
    (out / "models").mkdir(parents=True)
    rng = np.random.default_rng(0)
    counts_entry = LedgerEntry("d", "r/record-counts#1", "dp", 0.1, run_id="r", what="record counts")
    entries, models, sources, evaluations = [counts_entry] if count_source == "dp" else [], [], {}, {}
    for k, (label, cell) in enumerate(CELLS.items()):
        weights_file = weights(label, k, len(variables))
        (out / f"models/{cell}.pt").write_bytes(weights_file)
        fit = LedgerEntry("d", f"r/final-fit#{k}", "dp_sgd", delta=DELTA, noise_multiplier=sigma, sample_rate=0.1,
                          steps=50, run_id="r", what="final fit", sha256=sha(weights_file))
        evaluation = LedgerEntry("d", f"r/DP-evaluation#{k}", "gaussian", delta=DELTA, noise_multiplier=2 * sigma,
                                 sample_rate=1.0, steps=1, run_id="r", what="DP evaluation")
        entries += [fit, evaluation]
        y = rng.integers(0, 2, test_records)
        scores = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, test_records), 0, 1)
        histograms = noisy_histograms(scores, y, 10, 2 * sigma,
                                      rng)
        metrics = metrics_from_histograms(histograms, 0.95, 50, records=test_records).as_dict()  # counts.json's
        evaluations[cell] = {"release": evaluation.release, "histograms": histograms.as_dict(), "metrics": metrics}
        sources[f"models/{cell}.pt"] = {"source": "dp", "releases": [fit.release], "about": "a bundled model"}
        models.append({"cell_id": cell, "file": f"models/{cell}.pt", "label": label,
                       "label_definition": LABEL_DEFINITIONS[label], "model": "logistic_regression", "loss": "bce",
                       "target_epsilon": 1.0, "release": fit.release,
                       "plan": {"noise_multiplier": sigma, "sample_rate": 0.1, "steps": 50, "max_grad_norm": 1.0,
                                "epsilon": 1.0}, "tuning": {"method": "none", "trials": 1},
                       "evaluation": metrics, "evaluation_release": evaluation.release})
    featurizer = {"variables": variables, "mean": [0.0] * len(variables), "std": [1.0] * len(variables),
                  "delta_fill": 100.0, "source": "public", "window_hours": N_HOURS,
                  "gap_hours": 6, "mask_beyond_outlier_bounds": False, "outlier_low": None, "outlier_high": None,
                  "note": "public statistics"}
    counts = {"source": count_source, "stays": {"train": 300, "dev": 50, "test": test_records},
              "epsilon": 0.1 if count_source == "dp" else None}
    (out / "featurizer.json").write_text(strict_dumps(featurizer, indent=1))
    (out / "counts.json").write_text(strict_dumps(counts, indent=1))
    (out / "evaluation.json").write_text(strict_dumps(evaluations, indent=1))
    every = sorted(e.release for e in entries)
    sources |= {"featurizer.json": {"source": "public", "releases": []},
                "counts.json": {"source": count_source,
                                "releases": [counts_entry.release] if count_source == "dp" else []},
                "evaluation.json": {"source": "dp",
                                    "releases": [e.release for e in entries if e.what == "DP evaluation"]},
                "card.json": {"source": "derived", "releases": every},
                "card.md": {"source": "derived", "releases": every}}
    total = bundle_total([public_entry(e) for e in entries], DELTA)
    guarantee, _ = _guarantee(total, "public", counts, "hash")
    card = _card(config, models, counts, featurizer, total, guarantee)
    key, created = hospital_key(ledger_path)
    with Ledger(ledger_path).transaction() as tx:  # the hospital's ledger holds the releases
        tx.append(entries)
    write_manifest(out, sources, entries, DELTA, {"run_id": "r", "guarantee": guarantee}, card, key)
    assert created and verify_bundle(out, entries, fingerprint(key.public_key()))["ok"]
    return {"bundle": out, "entries": entries, "fingerprint": fingerprint(key.public_key()), "ledger": ledger_path,
            "total": total}


def forge(bundle: Path, edit=None, key: Ed25519PrivateKey | None = None) -> dict:
    """Edit the manifest (``edit(manifest)``), rehash every listed plain file, recompose the total, and sign with
    ``key`` (a forger's own) or leave the hospital's signature as it was; return the forged manifest."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    if edit is not None:
        edit(manifest)
    for name, about in manifest["files"].items():
        path = bundle / name
        if path.is_file() and not path.is_symlink():
            about["sha256"] = sha(path.read_bytes())
    manifest["total"] = bundle_total(manifest["releases"], manifest["delta"])
    text = json.dumps(manifest, indent=1).encode()
    (bundle / MANIFEST).write_bytes(text)
    if key is not None:
        (bundle / SIGNATURE).write_text(json.dumps(signature_record(key, text)))
    return manifest


def rebind(bundle: Path, cell: str):
    """An edit that rewrites the model's release entry to bind the model file as it now is."""
    def edit(manifest):
        fit = manifest["files"][f"models/{cell}.pt"]["releases"][0]
        entry = next(e for e in manifest["releases"] if e["release"] == fit)
        entry["sha256"] = sha((bundle / f"models/{cell}.pt").read_bytes())
    return edit
