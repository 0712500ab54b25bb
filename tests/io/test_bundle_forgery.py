"""A release bundle cannot be forged: each forgery of issue 41 fails ``release verify`` with a line naming it.

The bundle is built as tasks/release_bundle.py builds one (its card, the ledger entries, ``write_manifest``) from two
small logistic regressions, without a pipeline run (tests/oracles/small_bundle.py). A forger holds the bundle, not
the hospital's signing key: every edit below rewrites the manifest's hashes (and total) as a forger would, and either
leaves the hospital's signature (which then fails) or signs with a key of their own (which a pinned fingerprint, or
the ledger, refuses).
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.cli import main
from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.io.bundle_signature import SIGNATURE, fingerprint, hospital_key, signing_key_path
from privehr.io.release_bundle import MANIFEST, read_bundle, verify_bundle
from privehr.tasks.predict import apply_bundle
from oracles import small_bundle

N_VARIABLES, N_HOURS, DELTA = small_bundle.N_VARIABLES, small_bundle.N_HOURS, small_bundle.DELTA
CELLS = small_bundle.CELLS
_weights, _sha = small_bundle.weights, small_bundle.sha


@pytest.fixture
def made(tmp_path):
    """An honest bundle: two DP-SGD models, their DP evaluations, DP counts, a public featurizer; signed by the
    hospital's key beside ``ledger.jsonl``."""
    return small_bundle.make_bundle(tmp_path, "dp")


_forge, _rebind = small_bundle.forge, small_bundle.rebind


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
    assert f"signed by the hospital's own signing key {fp}" in capsys.readouterr().out
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


def test_counts_listed_as_public_but_released_with_noise_do_not_verify(made):
    """The relation is read off counts.json's own source: a manifest that lists it as public (no release behind it)
    while its content says dp would otherwise claim add/remove-one over counts it calls public."""
    _forge(made["bundle"], lambda m: m["files"]["counts.json"].update(source="public", releases=[]),
           Ed25519PrivateKey.generate())
    assert _has(_problems(made), "counts.json: its source is not the one the manifest lists")


def test_an_extra_file_listed_as_public(made):
    bundle = made["bundle"]
    (bundle / "notes.csv").write_text("icustay_id,risk\n1,0.5\n")
    _forge(bundle, lambda m: m["files"].update({"notes.csv": {"sha256": "", "source": "public", "releases": []}}),
           Ed25519PrivateKey.generate())
    assert _has(_problems(made), "notes.csv: listed in the manifest, but not a file a bundle holds")


def test_a_manifest_signed_by_another_key_fails_against_the_pinned_fingerprint(made, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVEHR_LEDGER", str(tmp_path / "elsewhere" / "ledger.jsonl"))  # a partner: no key of its own
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
    assert main(["release", "verify", str(bundle)]) == 1  # unpinned: it says which key signed it, and refuses
    assert f"signed by key {fingerprint(forger.public_key())}, which is not pinned" in capsys.readouterr().out
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


def test_exact_public_counts_make_the_card_claim_replace_one_at_the_group_privacy_total(tmp_path, capsys):
    """Issue 41 item 3: with the record counts shipped exactly, add/remove-one neighbours are told apart by the
    counts, so the card (and the guarantee) claims replace-one at (2 epsilon, (1 + e^epsilon) delta); a card that
    says add/remove-one, or the add/remove total, there fails verification."""
    # sigma 2: an add/remove total (2.8) at which group privacy keeps delta below 1/n (issue 55: never "DP" beside a
    # delta of 1/n or more; the next test)
    public, dp = (small_bundle.make_bundle(tmp_path / "public", "public", sigma=2.0),
                  small_bundle.make_bundle(tmp_path / "dp", sigma=2.0))
    assert dp["total"]["epsilon_prv"] > 0
    card = json.loads((dp["bundle"] / "card.json").read_text())
    assert card["privacy"]["neighbours"]["relation"] == "add/remove one ICU stay"
    assert "epsilon" not in card["privacy"]["neighbours"]
    card = json.loads((public["bundle"] / "card.json").read_text())
    eps, delta = public["total"]["epsilon_prv"], public["total"]["delta"]
    n = card["privacy"]["neighbours"]
    # per-split counts ship: a replacement must keep the stay's split (a review found the plain claim too broad)
    assert n["relation"] == "replace one ICU stay within its split (the counts of train, dev and test are public)"
    assert n["epsilon"] == pytest.approx(2 * eps) and n["delta"] == pytest.approx((1 + np.exp(eps)) * delta)
    assert f"epsilon {2 * eps:.3g}" in card["privacy"]["guarantee"] and "replace one ICU stay" in card["privacy"][
        "guarantee"]
    assert main(["release", "show", str(public["bundle"])]) == 0
    assert "replace one ICU stay within its split (the counts of train, dev and test are public), not by one more" \
        in capsys.readouterr().out
    assert verify_bundle(public["bundle"], public["entries"], public["fingerprint"])["ok"]

    def add_remove(manifest):  # the public-count bundle's card rewritten to claim add/remove-one
        manifest["card"]["privacy"]["neighbours"] = {"relation": "add/remove one ICU stay",
                                                     "why": "the ICU stay count is not released exactly"}
    _forge(public["bundle"], add_remove, Ed25519PrivateKey.generate())
    assert _has(_problems(public), "neighbouring relation", "(replace one ICU stay within its split")

    def understated(manifest):  # replace-one, at the add/remove total
        manifest["card"]["privacy"]["neighbours"] = n | {"epsilon": eps, "delta": delta}
    _forge(public["bundle"], understated, Ed25519PrivateKey.generate())
    assert _has(_problems(public), "neighbouring relation", "(replace one ICU stay within its split")


def test_where_group_privacy_leaves_delta_at_1_over_n_or_more_no_guarantee_is_claimed(tmp_path, capsys):
    """Issue 55.4: a synthesis card said "DP end to end: (epsilon 33.6, delta 2e+02)": group privacy of two at the add/
    remove total gives a delta no guarantee can carry. With the counts shipped exactly and a total whose replace-one
    delta is 1/n or more, the guarantee says so, names no epsilon, and the bundle verifies as that claim."""
    made = small_bundle.make_bundle(tmp_path, "public")  # sigma 1: add/remove epsilon 7.8, replace-one delta 0.025
    card = json.loads((made["bundle"] / "card.json").read_text())
    n = card["privacy"]["neighbours"]
    assert n["meaningful"] is False and n["epsilon"] is None and n["delta"] is None
    guarantee = card["privacy"]["guarantee"]
    assert guarantee.startswith("NOT DP end to end") and "no meaningful guarantee at this epsilon" in guarantee
    assert "DP end to end: (epsilon" not in guarantee
    assert verify_bundle(made["bundle"], made["entries"], made["fingerprint"])["ok"]
    assert main(["release", "show", str(made["bundle"]), "--key-fingerprint", made["fingerprint"]]) == 0
    assert "no meaningful guarantee" in capsys.readouterr().out

    def claims_dp(manifest):  # the guarantee rewritten to claim DP there (card and manifest alike)
        claim = f"DP end to end: (epsilon {2 * made['total']['epsilon_prv']:.3g}, delta 0.025)"
        manifest["guarantee"] = manifest["card"]["privacy"]["guarantee"] = claim
    _forge(made["bundle"], claims_dp, Ed25519PrivateKey.generate())
    assert _has(_problems(made), "claims DP where its relation holds no meaningful guarantee")

    def old_card(manifest):  # a card written before 55.4: replace-one at a delta of 1/n or more, no "meaningful"
        eps = made["total"]["epsilon_prv"]
        manifest["card"]["privacy"]["neighbours"] = {k: v for k, v in n.items() if k != "meaningful"} | {
            "epsilon": 2 * eps, "delta": 0.025}
    _forge(made["bundle"], old_card, Ed25519PrivateKey.generate())
    problems = _problems(made)
    assert _has(problems, "written before privehr stopped claiming one there")
    assert not _has(problems, "neighbouring relation is not the one")  # said once


@pytest.mark.parametrize("damage, words", [
    ("not_a_directory", "is not a directory; give the release/ folder"),
    ("no_manifest", "manifest.json cannot be read (FileNotFoundError)"),
    ("manifest_not_json", "manifest.json cannot be read (JSONDecodeError)"),
    ("card_rewritten", "does not verify"),
])
def test_release_show_on_a_bad_bundle_is_one_line_and_exit_2_and_never_shows_the_card(made, damage, words, capsys):
    """The README's bad-input row for ``release show``: what it shows is the verified manifest's card or nothing."""
    bundle = made["bundle"]
    target = bundle
    if damage == "not_a_directory":
        target = bundle / "card.json"
    elif damage == "no_manifest":
        (bundle / MANIFEST).unlink()
    elif damage == "manifest_not_json":
        (bundle / MANIFEST).write_text("{")
    else:
        card = json.loads((bundle / "card.json").read_text())
        card["title"] = "a better model"
        (bundle / "card.json").write_text(json.dumps(card))
    assert main(["release", "show", str(target)]) == 2
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in lines[0]
    assert "a better model" not in out.out + out.err and "## " not in out.out


def test_a_card_whose_test_count_is_not_counts_json_fails_verify(made):
    """The DP evaluation is read at counts.json's released test count; a card that names another count (a forger's
    rounder number, or the exact one) is refused, and the card says which count it is."""
    from privehr.io.release_bundle import render_card

    bundle = made["bundle"]
    card = json.loads((bundle / "card.json").read_text())
    counts = json.loads((bundle / "counts.json").read_text())
    assert all(m["evaluation"]["records_source"] == "record count"
               and m["evaluation"]["records"] == counts["stays"]["test"] for m in card["models"])
    assert "test stays (counts.json's DP count)" in render_card(card)

    def edit(manifest):
        for m in manifest["card"]["models"]:
            m["evaluation"]["records"] += 7
        (bundle / "card.json").write_text(json.dumps(manifest["card"]))
    _forge(bundle, edit, Ed25519PrivateKey.generate())
    problems = verify_bundle(bundle)["problems"]
    assert any("the card's test count is not counts.json's" in p for p in problems), problems
