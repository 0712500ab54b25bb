"""The model card's map to TRIPOD+AI and the CHAI Applied Model Card (issue 41 item 6): every field it names is on
a real card, its DP fields carry the card's own values, the items a card cannot answer are listed, card.md prints
it, and ``release verify`` refuses a card whose map was edited (the bundle of tests/oracles/small_bundle.py)."""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.io.card_standards import CHAI, NOT_COVERED, TRIPOD_AI, card_reporting, resolve
from privehr.io.bundle_signature import SIGNATURE, signature_record
from privehr.io.release_bundle import MANIFEST, bundle_total, render_card, verify_bundle
from oracles import small_bundle


def test_every_field_the_map_names_is_on_a_real_card_and_the_dp_fields_are_its_values(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "public")
    card = json.loads((made["bundle"] / "card.json").read_text())
    reporting = card["reporting"]
    assert reporting == card_reporting(card)
    paths = {p for _, _, where in TRIPOD_AI for p in where} | {p for _, where in CHAI for p in where}
    paths |= {f["where"] for f in reporting["dp_fields"] if f["where"]}
    missing = sorted(p for p in paths if not resolve(card, p))
    assert not missing, f"the map names fields no card holds: {missing}"
    dp = {f["field"]: f["value"] for f in reporting["dp_fields"]}
    assert dp["epsilon"] == card["privacy"]["epsilon_prv"] and dp["delta"] == card["privacy"]["delta"]
    assert dp["neighbouring relation"] == card["privacy"]["neighbours"]["relation"]
    assert dp["neighbouring relation"].startswith("replace one ICU stay")  # exact public counts: replace-one
    assert dp["tuning charged to the budget"].startswith("no search")
    assert dp["membership-inference audit"].startswith("not audited")
    assert {i for i, _, _ in NOT_COVERED} >= {"14", "17", "19", "-"}
    assert not {i for i, _, _ in NOT_COVERED} & {i for i, _, _ in TRIPOD_AI}
    text = (made["bundle"] / "card.md").read_text()
    assert "## Reporting standards" in text and "| 12f | Calibration | models.evaluation.calibration_slope, " in text
    assert text.index("## Reporting standards") < text.index("## Intended use and limits")
    assert verify_bundle(made["bundle"])["ok"]


def test_a_card_whose_map_was_edited_does_not_verify(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "dp")
    bundle = made["bundle"]
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["card"]["reporting"]["dp_fields"][4]["value"] = 0.01  # the map's epsilon, understated
    card = manifest["card"]
    (bundle / "card.json").write_text(json.dumps(card, indent=1))
    (bundle / "card.md").write_text(render_card(card))
    for name, about in manifest["files"].items():
        path = bundle / name
        if path.is_file():
            about["sha256"] = small_bundle.sha(path.read_bytes())
    manifest["total"] = bundle_total(manifest["releases"], manifest["delta"])
    text = json.dumps(manifest, indent=1).encode()
    (bundle / MANIFEST).write_bytes(text)
    (bundle / SIGNATURE).write_text(json.dumps(signature_record(Ed25519PrivateKey.generate(), text)))
    problems = verify_bundle(bundle)["problems"]
    assert any("map to TRIPOD+AI and CHAI is not the one its fields make" in p for p in problems), problems


def test_a_card_made_before_the_map_renders_without_it(tmp_path):
    made = small_bundle.make_bundle(tmp_path, "dp")
    card = json.loads((made["bundle"] / "card.json").read_text())
    del card["reporting"]
    assert "Reporting standards" not in render_card(card)
