"""A release bundle cannot be forged: each forgery of issue 41 fails ``release verify`` with a line naming it.

The bundle is built here as tasks/release_bundle.py builds one (its card, the ledger entries, ``write_manifest``)
from two small logistic regressions, without a pipeline run. A forger holds the bundle, not the hospital's signing
key: every edit below rewrites the manifest's hashes (and total) as a forger would, and either leaves the hospital's
signature (which then fails) or signs with a key of their own (which a pinned fingerprint, or the ledger, refuses).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.cli import main
from privehr.core.config import PipelineConfig
from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.io.bundle_signature import SIGNATURE, fingerprint, hospital_key, signature_record, signing_key_path
from privehr.io.privacy_ledger import Ledger
from privehr.io.release_bundle import MANIFEST, bundle_total, public_entry, read_bundle, verify_bundle, write_manifest
from privehr.models.classifiers import build_classifier
from privehr.models.evaluation.dp_evaluation import metrics_from_histograms, noisy_histograms
from privehr.models.privacy.ledger import LedgerEntry
from privehr.tasks.predict import apply_bundle
from privehr.tasks.release_bundle import LABEL_DEFINITIONS, _card, _guarantee

N_VARIABLES, N_HOURS, DELTA = 3, 24, 1e-5
CELLS = {"mort_icu": "mort_icu-logistic_regression-dp_sgd-bce-eps1",
         "los_3": "los_3-logistic_regression-dp_sgd-bce-eps1"}


def _weights(label: str, seed: int) -> bytes:
    model = build_classifier("logistic_regression", N_VARIABLES, N_HOURS, seed=seed)
    state = {"cell": {"label": label}, "seed": 0, "hyperparameters": {"max_grad_norm": 1.0},
             "state_dict": {k: v.detach() for k, v in model.state_dict().items()}, "training": {"epochs": 1},
             "architecture": {"model": "logistic_regression", "n_variables": N_VARIABLES, "n_hours": N_HOURS,
                              "hidden_size": 32}}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def made(tmp_path):
    """An honest bundle: two DP-SGD models, their DP evaluations, DP counts, a public featurizer; signed by the
    hospital's key beside ``ledger.jsonl``."""
    config = PipelineConfig.model_validate({"device": "cpu"})
    ledger_path = tmp_path / "hospital" / "ledger.jsonl"
    out = tmp_path / "release"
    (out / "models").mkdir(parents=True)
    rng = np.random.default_rng(0)
    counts_entry = LedgerEntry("d", "r/record-counts#1", "dp", 0.1, run_id="r", what="record counts")
    entries, models, sources, evaluations = [counts_entry], [], {}, {}
    for k, (label, cell) in enumerate(CELLS.items()):
        weights = _weights(label, k)
        (out / f"models/{cell}.pt").write_bytes(weights)
        fit = LedgerEntry("d", f"r/final-fit#{k}", "dp_sgd", delta=DELTA, noise_multiplier=1.0, sample_rate=0.1,
                          steps=50, run_id="r", what="final fit", sha256=_sha(weights))
        evaluation = LedgerEntry("d", f"r/DP-evaluation#{k}", "gaussian", delta=DELTA, noise_multiplier=2.0,
                                 sample_rate=1.0, steps=1, run_id="r", what="DP evaluation")
        entries += [fit, evaluation]
        y = rng.integers(0, 2, 400)
        histograms = noisy_histograms(np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 400), 0, 1), y, 10, 2.0, rng)
        metrics = metrics_from_histograms(histograms, 0.95, 50).as_dict()
        evaluations[cell] = {"release": evaluation.release, "histograms": histograms.as_dict(), "metrics": metrics}
        sources[f"models/{cell}.pt"] = {"source": "dp", "releases": [fit.release], "about": "a bundled model"}
        models.append({"cell_id": cell, "file": f"models/{cell}.pt", "label": label,
                       "label_definition": LABEL_DEFINITIONS[label], "model": "logistic_regression", "loss": "bce",
                       "target_epsilon": 1.0, "release": fit.release,
                       "plan": {"noise_multiplier": 1.0, "sample_rate": 0.1, "steps": 50, "max_grad_norm": 1.0,
                                "epsilon": 1.0}, "tuning": {"method": "none", "trials": 1},
                       "evaluation": metrics, "evaluation_release": evaluation.release})
    featurizer = {"variables": [f"v{i}" for i in range(N_VARIABLES)], "mean": [0.0] * N_VARIABLES,
                  "std": [1.0] * N_VARIABLES, "delta_fill": 100.0, "source": "public", "window_hours": N_HOURS,
                  "gap_hours": 6, "mask_beyond_outlier_bounds": False, "outlier_low": None, "outlier_high": None,
                  "note": "public statistics"}
    counts = {"source": "dp", "stays": {"train": 300, "dev": 50, "test": 50}, "epsilon": 0.1}
    (out / "featurizer.json").write_text(strict_dumps(featurizer, indent=1))
    (out / "counts.json").write_text(strict_dumps(counts, indent=1))
    (out / "evaluation.json").write_text(strict_dumps(evaluations, indent=1))
    every = sorted(e.release for e in entries)
    sources |= {"featurizer.json": {"source": "public", "releases": []},
                "counts.json": {"source": "dp", "releases": [counts_entry.release]},
                "evaluation.json": {"source": "dp",
                                    "releases": [e.release for e in entries if e.what == "DP evaluation"]},
                "card.json": {"source": "derived", "releases": every},
                "card.md": {"source": "derived", "releases": every}}
    total = bundle_total([public_entry(e) for e in entries], DELTA)
    guarantee, _ = _guarantee(total, "public", "dp", "hash")
    card = _card(config, models, counts, featurizer, total, guarantee)
    key, created = hospital_key(ledger_path)
    with Ledger(ledger_path).transaction() as tx:  # the hospital's ledger holds the releases
        tx.append(entries)
    write_manifest(out, sources, entries, DELTA, {"run_id": "r", "guarantee": guarantee}, card, key)
    assert created and verify_bundle(out, entries, fingerprint(key.public_key()))["ok"]
    return {"bundle": out, "entries": entries, "fingerprint": fingerprint(key.public_key()), "ledger": ledger_path,
            "total": total}


def _forge(bundle: Path, edit=None, key: Ed25519PrivateKey | None = None) -> dict:
    """Edit the manifest (``edit(manifest)``), rehash every listed plain file, recompose the total, and sign with
    ``key`` (a forger's own) or leave the hospital's signature as it was; return the forged manifest."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    if edit is not None:
        edit(manifest)
    for name, about in manifest["files"].items():
        path = bundle / name
        if path.is_file() and not path.is_symlink():
            about["sha256"] = _sha(path.read_bytes())
    manifest["total"] = bundle_total(manifest["releases"], manifest["delta"])
    text = json.dumps(manifest, indent=1).encode()
    (bundle / MANIFEST).write_bytes(text)
    if key is not None:
        (bundle / SIGNATURE).write_text(json.dumps(signature_record(key, text)))
    return manifest


def _rebind(bundle: Path, cell: str):
    """An edit that rewrites the model's release entry to bind the model file as it now is."""
    def edit(manifest):
        fit = manifest["files"][f"models/{cell}.pt"]["releases"][0]
        entry = next(e for e in manifest["releases"] if e["release"] == fit)
        entry["sha256"] = _sha((bundle / f"models/{cell}.pt").read_bytes())
    return edit


def _problems(made, **kwargs) -> list[str]:
    report = verify_bundle(made["bundle"], **kwargs)
    assert not report["ok"]
    return report["problems"]


def _has(problems: list[str], *words: str) -> bool:
    return any(all(w in p for w in words) and "\n" not in p for p in problems)


def test_the_honest_bundle_verifies_pinned_against_the_ledger_and_the_key_beside_it(made, capsys):
    bundle, fp = made["bundle"], made["fingerprint"]
    key_path = signing_key_path(made["ledger"])
    assert key_path.stat().st_mode & 0o777 == 0o600 and key_path.parent.stat().st_mode & 0o777 == 0o700
    assert main(["release", "verify", str(bundle), "--key-fingerprint", fp.upper()]) == 0
    assert f"signed by the pinned key {fp}" in capsys.readouterr().out
    assert main(["release", "verify", str(bundle), "--ledger", str(made["ledger"])]) == 0  # pinned by the key beside it
    assert f"signed by the pinned key {fp}" in capsys.readouterr().out
    report = verify_bundle(bundle, made["entries"])
    assert report["ok"] and report["signed_by"] == fp
    assert main(["release", "show", str(bundle)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Model card:") and f"fingerprint {fp}" in text
    assert (bundle / "card.md").read_text() in text  # the card rendered from the manifest is card.md, byte for byte
    assert hospital_key(made["ledger"])[1] is False  # created once; the next bundle reuses it


def test_a_dp_models_weights_swapped_and_the_manifest_rehashed(made):
    bundle = made["bundle"]
    cell = CELLS["mort_icu"]
    (bundle / f"models/{cell}.pt").write_bytes(_weights("mort_icu", 99))  # e.g. the run's non-private weights
    _forge(bundle)
    assert _has(_problems(made), "signature does not match manifest.json")
    assert _has(_problems(made), f"models/{cell}.pt", "not the one its release bound")
    _forge(bundle, _rebind(bundle, cell), Ed25519PrivateKey.generate())  # the entry's hash too, the forger's key
    assert _has(_problems(made, pinned=made["fingerprint"]), "not by the pinned key")
    assert _has(_problems(made, ledger=made["entries"]), f"models/{cell}.pt", "the ledger bound")


def test_the_card_rewritten_to_say_epsilon_0_1(made, capsys):
    bundle = made["bundle"]
    stated = made["total"]["epsilon_prv"]
    card = json.loads((bundle / "card.json").read_text())
    card["privacy"]["epsilon_prv"] = 0.1
    (bundle / "card.json").write_text(strict_dumps(card, indent=1))
    (bundle / "card.md").write_text((bundle / "card.md").read_text().replace(f"{stated:.3f}", "0.100"))
    _forge(bundle, key=Ed25519PrivateKey.generate())  # rehashed and signed: unpinned, the signature holds
    problems = _problems(made)
    assert _has(problems, "card.json: not the card the manifest holds") and _has(problems, "card.md: not the card")
    _forge(bundle, lambda m: m["card"]["privacy"].update(epsilon_prv=0.1), Ed25519PrivateKey.generate())
    assert _has(_problems(made), "the card's epsilon_prv 0.1 is not the manifest's total")
    assert main(["release", "show", str(bundle)]) == 2  # show renders the manifest's card, and only a verified one
    assert "0.100" not in capsys.readouterr().out


def test_an_extra_file_listed_as_public(made):
    bundle = made["bundle"]
    (bundle / "notes.csv").write_text("icustay_id,risk\n1,0.5\n")
    _forge(bundle, lambda m: m["files"].update({"notes.csv": {"sha256": "", "source": "public", "releases": []}}),
           Ed25519PrivateKey.generate())
    assert _has(_problems(made), "notes.csv: listed in the manifest, but not a file a bundle holds")


def test_a_manifest_signed_by_another_key_fails_against_the_pinned_fingerprint(made, capsys):
    bundle = made["bundle"]
    forger = Ed25519PrivateKey.generate()
    _forge(bundle, key=forger)
    problems = _problems(made, pinned=made["fingerprint"])
    assert problems == [f"{SIGNATURE}: signed by key {fingerprint(forger.public_key())}, not by the pinned key "
                        f"{made['fingerprint']} (another key signed this bundle: a forgery, or the hospital's key "
                        "changed; ask the hospital by another channel)"]
    assert main(["release", "verify", str(bundle), "--key-fingerprint", made["fingerprint"]]) == 1
    assert "not by the pinned key" in capsys.readouterr().out
    assert main(["release", "verify", str(bundle), "--ledger", str(made["ledger"])]) == 1  # the key beside it
    capsys.readouterr()
    assert main(["release", "verify", str(bundle)]) == 0  # unpinned: it says which key signed it
    assert f"fingerprint {fingerprint(forger.public_key())} (not pinned" in capsys.readouterr().out
    assert main(["release", "verify", str(bundle), "--key-fingerprint", "abc"]) == 2


def test_models_swapped_between_labels(made):
    bundle = made["bundle"]
    a, b = (bundle / f"models/{c}.pt" for c in CELLS.values())
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    _forge(bundle, key=Ed25519PrivateKey.generate())
    problems = _problems(made)
    assert _has(problems, f"models/{CELLS['mort_icu']}.pt", "not the one its release bound")
    assert _has(problems, f"models/{CELLS['los_3']}.pt", "not the one its release bound")


def test_a_listed_symlink_to_a_file_outside_the_bundle(made, tmp_path):
    bundle = made["bundle"]
    target = bundle / f"models/{CELLS['mort_icu']}.pt"
    outside = tmp_path / "outside.pt"
    outside.write_bytes(target.read_bytes())  # the same bytes: its hash is right
    target.unlink()
    os.symlink(outside, target)
    assert _has(_problems(made), f"models/{CELLS['mort_icu']}.pt: a symbolic link")
    with pytest.raises(InputError, match="symbolic link"):
        read_bundle(bundle)


@pytest.mark.parametrize("manifest", [[1, 2], {"format": "privehr-release-bundle/1", "files": {"card.json": "x"},
                                                "releases": []},
                                      {"format": "privehr-release-bundle/1", "files": {}, "releases": ["r1"]}, "text"])
def test_a_manifest_that_is_a_list_or_whose_entries_are_strings_is_one_line(made, manifest, capsys):
    bundle = made["bundle"]
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    report = verify_bundle(bundle)
    assert not report["ok"] and len(report["problems"]) == 1 and MANIFEST in report["problems"][0]
    assert main(["release", "verify", str(bundle)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and len(out.out.strip().splitlines()) == 2
    assert main(["release", "show", str(bundle)]) == 2


def test_a_pickle_payload_is_refused_never_unpickled(made, tmp_path):
    bundle = made["bundle"]
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    cell = CELLS["mort_icu"]
    (bundle / f"models/{cell}.pt").write_bytes(pickle.dumps(Payload()))
    _forge(bundle, _rebind(bundle, cell), Ed25519PrivateKey.generate())  # unpinned it verifies: the load refuses
    loaded = read_bundle(bundle)
    mean, count = np.zeros((2, N_HOURS, N_VARIABLES)), np.ones((2, N_HOURS, N_VARIABLES))
    with pytest.raises(InputError, match="not a weights-only PyTorch file") as err:
        apply_bundle(loaded, mean, count, [cell])
    assert "\n" not in str(err.value) and not marker.exists()
    assert apply_bundle(loaded, mean, count, [CELLS["los_3"]])[CELLS["los_3"]].shape == (2,)  # an honest model scores
