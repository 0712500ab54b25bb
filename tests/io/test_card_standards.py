"""The model card's map to TRIPOD+AI and the CHAI Applied Model Card (issue 41 item 6): every field it names is on
a real card, its DP fields carry the card's own values, every TRIPOD+AI subitem is either answered or listed as not
answered, card.md prints it, and ``release verify`` refuses a card whose map was edited (the bundle of
tests/oracles/small_bundle.py)."""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.io.bundle_signature import SIGNATURE, signature_record
from privehr.io.card_standards import (CHAI, NOT_COVERED, TRIPOD_AI, TRIPOD_AI_ITEMS, card_reporting,
                                       reporting_problems, resolve)
from privehr.io.release_bundle import MANIFEST, render_card, verify_bundle
from oracles import small_bundle


def _card(made) -> dict:
    return json.loads((made["bundle"] / "card.json").read_text())


def _dp(card: dict) -> dict:
    return {f["field"]: f["value"] for f in card["reporting"]["dp_fields"]}


def _resign(bundle, edit) -> None:
    """``edit`` the manifest's card, write card.json and card.md from it, rehash and sign with a stranger's key (an
    unpinned verify then trusts the signature: what is left is whether the card is consistent)."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    edit(manifest["card"])
    (bundle / "card.json").write_text(json.dumps(manifest["card"], indent=1))
    (bundle / "card.md").write_text(render_card(manifest["card"]))
    for name, about in manifest["files"].items():
        about["sha256"] = small_bundle.sha((bundle / name).read_bytes())
    text = json.dumps(manifest, indent=1).encode()
    (bundle / MANIFEST).write_bytes(text)
    (bundle / SIGNATURE).write_text(json.dumps(signature_record(Ed25519PrivateKey.generate(), text)))


def test_every_field_the_map_names_is_on_a_real_card(tmp_path):
    for counts in ("public", "dp"):
        card = _card(small_bundle.make_bundle(tmp_path / counts, counts))
        assert card["reporting"] == card_reporting(card)
        paths = {p for _, _, where in TRIPOD_AI for p in where} | {p for _, where, _ in CHAI for p in where}
        paths |= {p for f in card["reporting"]["dp_fields"] for p in f["where"]}
        assert len(paths) > 25
        missing = sorted(p for p in paths if not resolve(card, p))
        assert not missing, f"the map names fields no card holds: {missing}"
        assert reporting_problems(card) == []
    assert resolve(card, "models.plan.sample_rate") == [0.1, 0.1]  # a list field fans out over its entries
    assert resolve(card, "models.no_such_field") == [] and resolve(card, "privacy.neighbours.nope") == []


def test_the_dp_fields_are_the_cards_own_claim(tmp_path):
    public = _card(small_bundle.make_bundle(tmp_path / "public", "public", sigma=2.0))  # exact counts: replace-one
    dp = _dp(public)
    n = public["privacy"]["neighbours"]
    assert dp["neighbouring relation"] == n["relation"] and n["relation"].startswith("replace one ICU stay")
    assert (dp["epsilon"], dp["delta"]) == (n["epsilon"], n["delta"])  # the group-privacy total, as claimed
    assert dp["epsilon"] > public["privacy"]["epsilon_prv"]
    noisy = _card(small_bundle.make_bundle(tmp_path / "dp", "dp"))  # DP counts: add/remove one
    dp = _dp(noisy)
    assert dp["neighbouring relation"] == noisy["privacy"]["neighbours"]["relation"]
    assert "epsilon" not in noisy["privacy"]["neighbours"]
    assert (dp["epsilon"], dp["delta"]) == (noisy["privacy"]["epsilon_prv"], noisy["privacy"]["delta"])
    assert dp["unit of privacy"] == "one ICU stay" and dp["sampler"] == "Poisson"
    assert dp["accountants"] == "PRV, RDP, PLD"
    assert dp["tuning charged to the budget"] == "no search"
    assert dp["membership-inference audit"] == "not audited in this bundle"  # the bundle holds no audit result
    for method, charged in (("dp", "yes"), ("exact", "no")):
        tuned = {**noisy, "models": [{**m, "tuning": {"method": method, "trials": 4}} for m in noisy["models"]]}
        assert _dp({**tuned, "reporting": card_reporting(tuned)})["tuning charged to the budget"] == charged


def test_every_tripod_ai_subitem_is_answered_or_listed_as_not_answered():
    assert len(TRIPOD_AI_ITEMS) == 52 and len({i.rstrip("abcdefg") for i in TRIPOD_AI_ITEMS}) == 27
    answered = [i for i, _, _ in TRIPOD_AI]
    not_answered = [i for items, _, _ in NOT_COVERED for i in items.split(", ") if i != "-"]
    assert not set(answered) & set(not_answered)
    assert sorted(answered + not_answered, key=TRIPOD_AI_ITEMS.index) == list(TRIPOD_AI_ITEMS)
    assert {"14", "17", "19", "18e"} <= set(not_answered) and "-" in [i for i, _, _ in NOT_COVERED]
    assert {s for s, where, _ in CHAI if not where} >= {"Key metrics: fairness and equity"}
    assert all(why for _, where, why in CHAI if not where)


def test_card_md_prints_the_map_before_intended_use_and_the_bundle_verifies(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "public", sigma=2.0)
    card, text = _card(made), (made["bundle"] / "card.md").read_text()
    assert text.index("## Reporting standards") < text.index("## Intended use and limits")
    assert "| 12e | Performance measures: discrimination and calibration | models.evaluation.auroc, " in text
    assert f"| epsilon | {card['privacy']['neighbours']['epsilon']:.3g}; the claim" in text
    assert "| neighbouring relation | replace one ICU stay within its split" in text
    assert "| membership-inference audit | not audited in this bundle;" in text
    assert "| 19 | Patient and public involvement | the study report's |" in text
    assert "| Key metrics: fairness and equity | not on this card: " in text
    assert verify_bundle(made["bundle"], made["entries"], made["fingerprint"])["ok"]


def test_a_card_whose_map_was_edited_does_not_verify(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "dp")
    bundle = made["bundle"]

    def understated(card):
        next(f for f in card["reporting"]["dp_fields"] if f["field"] == "epsilon")["value"] = 0.01

    _resign(bundle, understated)
    problems = verify_bundle(bundle)["problems"]
    assert any("reporting map says epsilon 0.01; the card's fields make" in p for p in problems), problems

    made = small_bundle.make_bundle(tmp_path / "again", "dp")
    _resign(made["bundle"], lambda card: card["reporting"]["tripod_ai"][0]["where"].append("models.subgroups"))
    problems = verify_bundle(made["bundle"])["problems"]
    assert any("names 'models.subgroups', a field the card does not hold" in p for p in problems), problems

    made = small_bundle.make_bundle(tmp_path / "charged", "dp")
    _resign(made["bundle"], lambda card: card["reporting"]["dp_fields"][6].update(value="yes"))
    problems = verify_bundle(made["bundle"])["problems"]
    assert any("tuning charged to the budget 'yes'" in p for p in problems), problems


def test_old_cards_and_reworded_tables_still_verify(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "dp")
    card = _card(made)
    del card["reporting"]
    assert "Reporting standards" not in render_card(card) and reporting_problems(card) == []
    _resign(made["bundle"], lambda c: c.pop("reporting"))  # a bundle made before the card had a map
    assert verify_bundle(made["bundle"])["ok"]
    made = small_bundle.make_bundle(tmp_path / "reworded", "dp")  # the tables' wording is not a claim
    _resign(made["bundle"], lambda c: c["reporting"]["tripod_ai"][0].update(topic="Title"))
    assert verify_bundle(made["bundle"])["ok"]
