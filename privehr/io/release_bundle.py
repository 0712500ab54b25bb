"""The release bundle on disk: its manifest, its verification, its model card as text, and reading it back.

A bundle (``artifacts/<run-id>/release/``) is a directory that may leave the hospital alone. ``manifest.json``
lists every other file with its sha256 and the ledger releases it is made from (none for a public file), holds a
copy of those releases' ledger entries (without the source's id, their times and their membership snapshots) and
their total (epsilon, delta) by PRV, RDP and PLD, and the model card's data: ``card.json`` and ``card.md`` are that data
rendered, never a source. ``signature.json`` holds the hospital's Ed25519 signature of the manifest's exact bytes
and its public key (:mod:`privehr.io.bundle_signature`). A model's release binds the sha256 of its file in the ledger
(and so in the manifest's copy of the entry).

:func:`verify_bundle` checks the signature (against a pinned key fingerprint when given), that the bundle holds
plain files only, every one listed with its hash and of a kind a bundle holds, each model file against the hash its
release bound, that card.json and card.md are the manifest's card rendered byte for byte and that the card's
numbers are the manifest's (its total, its counts, its evaluations), and recomposes the total from the listed
entries; with the hospital's ledger it also checks that each entry, file hash included, is the ledger's own.

>>> sorted(BUNDLE_FILES)
['card.json', 'card.md', 'counts.json', 'evaluation.json', 'featurizer.json']
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.io.card_standards import reporting_problems
from privehr.io import accounting_cache
from privehr.io.bundle_signature import SIGNATURE, signature_problems, signature_record
from privehr.models.privacy.ledger import LedgerEntry, compose_entries
from privehr.models.privacy.neighbours import neighbouring_relation

__all__ = ["BUNDLE_FORMAT", "BUNDLE_FILES", "MANIFEST", "SIGNATURE", "write_manifest", "verify_bundle", "read_bundle",
           "Bundle", "render_card", "card_json", "bundle_total", "bundle_neighbours",
           "card_neighbours", "dp_claim", "calibration_text"]

accounting_cache.install()  # a bundle's total is composed again when it is read: by the project's stored curves

BUNDLE_FORMAT = "privehr-release-bundle/1"
MANIFEST = "manifest.json"
BUNDLE_FILES = {"card.json": "the model card (post-processing of the releases below)",
                "card.md": "the model card as text",
                "counts.json": "the stays per split every plan was built from",
                "featurizer.json": "the per-variable statistics and bounds that turn new stays into model inputs",
                "evaluation.json": "each model's DP evaluation: noisy score histograms and the metrics computed "
                                   "from them"}
# the dataset's id names the hospital's source; a release's membership snapshot is a keyed hash of its patients'
# ids, equal across runs on the same patients and different when one is removed; the time of each release would
# time the run, whose length follows the data's size: none of them is shipped
_PRIVATE_FIELDS = ("dataset", "created_utc", "members")
# what each file of a DP bundle must come from: (mechanism, at least, at most) releases
_SOURCES = {"featurizer.json": ("gaussian", 1, 1), "counts.json": ("dp", 1, 1), "evaluation.json": ("gaussian", 1, None)}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _listing(bundle: Path) -> tuple[set[str], set[str]]:
    """The bundle's plain files and its links (to files or folders: never followed), as paths inside it, without
    the manifest and its signature."""
    files, links = set(), set()
    for folder, dirs, names in os.walk(bundle):  # links to folders are listed, not entered
        for name in dirs + names:
            path = Path(folder, name)
            inside = path.relative_to(bundle).as_posix()
            if path.is_symlink():
                links.add(inside)
            elif path.is_file():
                files.add(inside)
    return files - {MANIFEST, SIGNATURE}, links


def public_entry(entry: LedgerEntry) -> dict:
    """A ledger entry as the bundle carries it: everything but the dataset's id, its time and its patients (the
    sha256 of the file it released is public)."""
    return {k: v for k, v in entry.as_dict().items() if k not in _PRIVATE_FIELDS}


def bundle_total(entries: list[dict], delta: float) -> dict:
    """The composed (epsilon, delta) of the bundle's releases by every accountant (the ledger's own composition)."""
    total = compose_entries([LedgerEntry.from_dict({**e, "dataset": "bundle"}) for e in entries], delta)
    return {"dp": total.dp, "releases": total.releases, "delta": total.delta, "epsilon": total.epsilon,
            "epsilon_prv": total.epsilon_dp_prv, "epsilon_rdp": total.epsilon_dp_rdp,
            "epsilon_pld": total.epsilon_dp_pld, "not_dp": total.not_dp}


def bundle_neighbours(unit: str, counts: dict | None, total: dict) -> dict:
    """The neighbouring relation a bundle's guarantee holds under, derived from what it ships: replace one ``unit``
    (a patient of a synthesis bundle, an ICU stay of a model bundle) with the group-privacy total where its counts
    are the exact, public ones (a model bundle's ``release.record_count: public``, a synthesis bundle's
    ``public_patient_count``), else add/remove one (:mod:`privehr.models.privacy.neighbours`). A model bundle's public
    counts are per split (train, dev, test: the split is a hash of each patient), so its replacement must stay in its
    split: a stay replaced by one hashed to another split changes the shipped counts."""
    counts = counts or {}
    public = counts.get("source") == "public" or "patients_delivered" in counts
    claimed = total["epsilon_prv"] if total.get("epsilon_prv") is not None else total.get("epsilon_rdp")
    per_split = public and "patients_delivered" not in counts  # a model bundle's counts: train, dev and test
    within = "its split (the counts of train, dev and test are public)" if per_split else None
    # the fewest records any of the bundle's releases ran on (the conservative reading of delta < 1/n): a synthesis
    # bundle's training patients, a model bundle's test split (its DP evaluation) or train and dev (its fits)
    stays = counts.get("stays") or {}
    sizes = [counts.get("training_patients") or counts.get("patients_delivered"),
             (stays.get("train", 0) + stays.get("dev", 0)) or None, stays.get("test")]
    records = min((s for s in sizes if s), default=None)
    return neighbouring_relation(claimed, total["delta"], unit, public, within=within, records=records)


def card_neighbours(card: dict, total: dict) -> dict:
    """:func:`bundle_neighbours` of a card (its kind names the unit) and the manifest's total."""
    return bundle_neighbours("patient" if card.get("kind") == "synthetic tables" else "ICU stay", card.get("counts"),
                             total)


def dp_claim(total: dict, neighbours: dict) -> str:
    """A DP bundle's (epsilon, delta) as its guarantee states it: the total, or under replace-one neighbours the
    group-privacy total, named."""
    if neighbours.get("meaningful") is False:
        return f"no meaningful guarantee under {neighbours['relation']} neighbours"
    if "epsilon" in neighbours:
        return f"(epsilon {neighbours['epsilon']:.3g}, delta {neighbours['delta']:.2g}) under " \
               f"{neighbours['relation']} neighbours"
    return f"(epsilon {total['epsilon_prv'] or total['epsilon_rdp']:.3g}, delta {total['delta']:.2g})"


def card_json(card: dict) -> str:
    """``card.json``'s exact text for the manifest's card."""
    return strict_dumps(card, indent=1)


def write_manifest(bundle: Path, sources: dict[str, dict], entries: list[LedgerEntry], delta: float,
                   header: dict, card: dict, key: Ed25519PrivateKey) -> dict:
    """Write ``card.json`` and ``card.md`` (rendered from ``card``), ``manifest.json`` for the files of ``bundle``
    described in ``sources`` (path -> {"source", "releases", "about"}; the card's two files among them) with the card
    inside, and ``signature.json`` (``key``'s signature of the manifest's bytes); refuse a file in the directory that
    is not described."""
    (bundle / "card.json").write_text(card_json(card))
    (bundle / "card.md").write_text(render_card(card))
    present, links = _listing(bundle)
    if present != set(sources) or links:
        raise RuntimeError(f"bundle files and their descriptions differ: {sorted((present ^ set(sources)) | links)}")
    carried = sorted((public_entry(e) for e in entries), key=lambda e: e["release"])  # not the ledger's order
    files = {path: {"sha256": _sha256(bundle / path), **about}  # no sizes: a JSON file's length follows its digits
             for path, about in sorted(sources.items())}
    manifest = {"format": BUNDLE_FORMAT, **header, "delta": delta, "files": files, "releases": carried,
                "total": bundle_total(carried, delta), "card": card}
    text = strict_dumps(manifest, indent=1).encode()
    (bundle / MANIFEST).write_bytes(text)
    (bundle / SIGNATURE).write_text(strict_dumps(signature_record(key, text), indent=1))
    return manifest


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _shape_problem(manifest) -> str | None:
    """One line when ``manifest`` is not shaped like a bundle's manifest (checked before anything reads it)."""
    if not isinstance(manifest, dict):
        return f"{MANIFEST} is a JSON {type(manifest).__name__}, not an object: not a privehr bundle's manifest"
    if manifest.get("format") != BUNDLE_FORMAT:
        return f"{MANIFEST}: format {str(manifest.get('format'))[:40]!r} is not {BUNDLE_FORMAT}"
    files, releases = manifest.get("files"), manifest.get("releases")
    if not isinstance(files, dict) or not all(
            isinstance(a, dict) and isinstance(a.get("sha256"), str) and isinstance(a.get("source"), str)
            and isinstance(a.get("releases"), list) and all(isinstance(r, str) for r in a["releases"])
            for a in files.values()):
        return f"{MANIFEST}: its files are not an object of {{sha256, source, releases}} entries"
    if not isinstance(releases, list) or not all(
            isinstance(e, dict) and isinstance(e.get("release"), str) and isinstance(e.get("mechanism"), str)
            for e in releases):
        return f"{MANIFEST}: its releases are not a list of ledger entries"
    if not isinstance(manifest.get("total"), dict) or not isinstance(manifest.get("card"), dict):
        return f"{MANIFEST}: it has no total or no card (a bundle written before cards were signed: write it again)"
    return None


def _read(path: Path):
    """A bundle's JSON file, or None where it is missing or not JSON (its own problem is reported elsewhere)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def verify_bundle(bundle: str | Path, ledger: list[LedgerEntry] | None = None, pinned: str | None = None) -> dict:
    """Check a bundle alone (and against the hospital's ``ledger`` entries, and the signing key whose fingerprint
    is ``pinned``, when given): {"ok", "problems", "signed_by", ...}. Never raises on a bad bundle: every problem is
    one line."""
    bundle = Path(bundle)
    failed = {"bundle": str(bundle), "ok": False, "signed_by": None, "files": 0, "releases": 0, "total": {}}
    try:
        text = (bundle / MANIFEST).read_bytes()
        manifest = json.loads(text)
    except (OSError, ValueError) as err:
        return {**failed, "problems": [f"{MANIFEST} cannot be read ({type(err).__name__})"]}
    shape = _shape_problem(manifest)
    if shape is not None:
        return {**failed, "problems": [shape]}
    signed = _read(bundle / SIGNATURE)
    problems = signature_problems(signed, text, pinned) if (bundle / SIGNATURE).is_file() and \
        not (bundle / SIGNATURE).is_symlink() else [f"{SIGNATURE}: missing; the manifest is not signed"]
    signer = signed.get("fingerprint") if not problems[:1] or "not by the pinned key" in problems[0] else None
    files = manifest["files"]
    present, links = _listing(bundle)
    problems += [f"{p}: a symbolic link (a bundle holds plain files only; a link can point outside it)"
                 for p in sorted(links)]
    problems += [f"{p}: in the bundle but not in the manifest (unaccounted)" for p in sorted(present - set(files))]
    problems += [f"{p}: in the manifest but missing" for p in sorted(set(files) - present - links)]
    hashes = {p: _sha256(bundle / p) for p in sorted(set(files) & present)}
    problems += [f"{p}: sha256 differs from the manifest's" for p, h in hashes.items() if h != files[p]["sha256"]]
    listed = {e["release"]: e for e in manifest["releases"]}
    stated = manifest["total"]
    try:
        problems += _release_problems(manifest, files, listed)
        problems += _binding_problems(files, listed, hashes)
        problems += _card_problems(bundle, manifest, files, listed)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        problems.append(f"{MANIFEST}: malformed ({type(err).__name__}: {str(err)[:80]})")
    if ledger is not None:
        own = {e.release: public_entry(e) for e in ledger}
        problems += [f"release {r} is not in the ledger" for r in sorted(set(listed) - set(own))]
        problems += [f"release {r} differs from the ledger's entry" for r in sorted(set(listed) & set(own))
                     if own[r] != listed[r]]
        problems += [f"{p}: its sha256 is not the one the ledger bound to release {r} (weights swapped or edited)"
                     for p, h in hashes.items() if p.startswith("models/") for r in files[p]["releases"]
                     if own.get(r, {}).get("sha256") not in (None, h)]
    return {"bundle": str(bundle), "ok": not problems, "problems": problems, "signed_by": signer,
            "files": len(files), "releases": len(listed), "total": stated}


def _release_problems(manifest: dict, files: dict, listed: dict) -> list[str]:
    """The releases the files cite, the sources' needs, and the total recomposed from the listed entries."""
    problems = []
    cited = {r for about in files.values() for r in about["releases"]}
    if len(listed) != len(manifest["releases"]):
        problems.append("the manifest lists a release more than once")
    problems += _source_problems(files, listed, manifest.get("delta"))
    problems += [f"release {r} is cited by a file but not in the manifest" for r in sorted(cited - set(listed))]
    problems += [f"release {r} is in the manifest but no file comes from it" for r in sorted(set(listed) - cited)]
    problems += [f"release {r} is {e.get('status')}, not released" for r, e in listed.items()
                 if e.get("status") != "released"]
    stated = manifest["total"]
    try:
        again = bundle_total(list(listed.values()), manifest["delta"])
        for key in ("epsilon_prv", "epsilon_rdp", "epsilon_pld", "delta", "dp"):
            if not _close(again[key], stated.get(key)):
                problems.append(f"total {key}: the manifest says {stated.get(key)}, its releases compose to "
                                f"{again[key]}")
        if str(manifest.get("guarantee", "")).startswith("DP end to end") and not (
                again["dp"] and all(f.get("source") in ("public", "dp", "derived") for f in files.values())):
            problems.append("the manifest says DP end to end, but its releases or its files' sources do not")
    except (KeyError, TypeError, ValueError) as err:
        problems.append(f"the manifest's releases cannot be composed ({err})")
    return problems


def _binding_problems(files: dict, listed: dict, hashes: dict[str, str]) -> list[str]:
    """Each model file is the one its release bound: the sha256 its ledger entry recorded (copied in the manifest)."""
    problems = []
    for path, actual in hashes.items():
        if not path.startswith("models/"):
            continue
        bound = {listed[r].get("sha256") for r in files[path]["releases"] if r in listed} - {None}
        if not bound:
            problems.append(f"{path}: none of its releases binds a file hash (a bundle written before releases "
                            "bound their files: write it again)")
        elif bound != {actual}:
            problems.append(f"{path}: its sha256 is not the one its release bound (weights swapped between models "
                            "or edited)")
    return problems


def _card_problems(bundle: Path, manifest: dict, files: dict, listed: dict) -> list[str]:
    """card.json and card.md are the manifest's card rendered; the card's numbers are the manifest's (its total and
    guarantee, counts.json, evaluation.json); every file is one the card names or one every bundle holds."""
    card, problems = manifest["card"], []
    try:
        rendered = {"card.json": card_json(card), "card.md": render_card(card)}
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        return [f"{MANIFEST}: its card cannot be rendered ({type(err).__name__}: {str(err)[:60]})"]
    for name, text in rendered.items():
        path = bundle / name
        if name in files and path.is_file() and not path.is_symlink() and path.read_bytes() != text.encode():
            problems.append(f"{name}: not the card the manifest holds, rendered (the card was rewritten)")
    privacy, total = card["privacy"], manifest["total"]
    for key in ("epsilon_prv", "epsilon_rdp", "epsilon_pld", "delta", "releases"):
        if not _close(privacy.get(key), total.get(key)):
            problems.append(f"the card's {key} {privacy.get(key)} is not the manifest's total {total.get(key)}")
    if privacy.get("guarantee") != manifest.get("guarantee"):
        problems.append("the card's guarantee is not the manifest's")
    try:
        derived = card_neighbours(card, total)
    except (KeyError, TypeError, AttributeError):
        derived = None
    stated = privacy.get("neighbours")
    if derived is not None and derived.get("meaningful") is False:
        if str(manifest.get("guarantee", "")).startswith("DP"):
            problems.append("the guarantee claims DP where its relation holds no meaningful guarantee (group "
                            "privacy's delta is 1/n or more)")
        if isinstance(stated, dict) and "meaningful" not in stated:
            problems.append("the card claims a replace-one guarantee whose delta is 1/n or more: written before "
                            "privehr stopped claiming one there; write the bundle again from its run")
            stated = derived  # said once, above
    if stated is None and derived is not None and "epsilon" not in derived:
        pass  # a bundle made before the card named its relation claimed add/remove-one, which holds
    elif not (isinstance(stated, dict) and derived is not None and stated.keys() == derived.keys()
            and all(_close(stated[k], v) if k in ("epsilon", "delta") else stated[k] == v
                    for k, v in derived.items())):
        problems.append("the card's neighbouring relation is not the one its counts and the manifest's total make "
                        f"({derived['relation'] if derived else 'none'})")
    try:
        problems += reporting_problems(card)  # its map to TRIPOD+AI and CHAI, and its DP fields' values
    except (KeyError, TypeError, AttributeError):
        problems.append("the card's reporting map cannot be checked against its fields (the card was rewritten)")
    counts = _read(bundle / "counts.json") if "counts.json" in files else None
    if card.get("counts") != counts:
        problems.append("the card's counts are not counts.json's")
    if isinstance(counts, dict) and counts.get("source") != files["counts.json"].get("source"):
        problems.append("counts.json: its source is not the one the manifest lists for it")
    test_count = ((counts or {}).get("stays") or {}).get("test") if isinstance(counts, dict) else None
    for m in card.get("models") or []:
        e = m.get("evaluation") if isinstance(m, dict) else None
        if isinstance(e, dict) and e.get("records_source") == "record count" and e.get("records") != test_count:
            problems.append(f"{m.get('cell_id')}: the card's test count is not counts.json's")
    named = set(BUNDLE_FILES)
    if card.get("kind") == "synthetic tables":
        named |= {f for t in card["tables"] for f in t["files"]}
        named_data = {f for t in card["tables"] for f in t["files"]}
        problems += [f"{f}: a table the card names is not in the manifest" for f in sorted(named_data - set(files))]
        problems += [f"{t['job']}: the card's release {t['release']} is not its files'" for t in card["tables"]
                     for f in t["files"] if f in files and t["release"] not in files[f]["releases"]]
    else:
        evaluation = _read(bundle / "evaluation.json") or {}
        for m in card["models"]:
            named.add(m["file"])
            mine = evaluation.get(m["cell_id"]) or {}
            if m["file"] not in files or files[m["file"]]["releases"][:1] != [m["release"]]:
                problems.append(f"{m['cell_id']}: the card's model file or release is not the manifest's")
            if mine.get("metrics") != m["evaluation"] or mine.get("release") != m["evaluation_release"]:
                problems.append(f"{m['cell_id']}: the card's evaluation is not evaluation.json's")
    problems += [f"{p}: listed in the manifest, but not a file a bundle holds (not a model or table its card "
                 "names, nor one of " + ", ".join(sorted(BUNDLE_FILES)) + ")" for p in sorted(set(files) - named)]
    return problems


def _tuning_problems(path: str, entries: list[dict]) -> list[str]:
    """A DP model file cites its final fit alone, or (tuned by DP dev scores) its final fit, its search's K >= 2
    trials and their K scores: search trial 0..K-1 (DP-SGD) and search score 0..K-1 (Gaussian)."""
    whats = sorted((str(e.get("mechanism")), str(e.get("what"))) for e in entries)
    trials = sum(w.startswith("search trial ") for _, w in whats)
    expected = [("dp_sgd", "final fit")]
    if trials:
        expected += [(m, f"search {kind} {k}") for m, kind in (("dp_sgd", "trial"), ("gaussian", "score"))
                     for k in range(trials)]
    if whats != sorted(expected) or trials == 1:
        return [f"{path}: a DP model needs its final fit (DP-SGD), and, if tuned, every search trial (DP-SGD) with its "
                f"DP score (Gaussian); it cites {[f'{m} {w}' for m, w in whats]}"]
    return []


def _source_problems(files: dict, listed: dict, delta) -> list[str]:
    """Each file cites the releases its source needs: a DP model its DP-SGD release (and, tuned by DP dev scores,
    its search's trials and scores), a DP featurizer its Gaussian release, DP counts their count release, the
    evaluation one Gaussian release per model; every Gaussian or DP-SGD release at the manifest's delta."""
    problems = []
    models = [p for p in files if p.startswith("models/")]
    for path, about in files.items():
        mechanisms = [listed[r]["mechanism"] for r in about.get("releases", []) if r in listed]
        if path in models:
            if about.get("source") == "dp":
                problems += _tuning_problems(path, [listed[r] for r in about.get("releases", []) if r in listed])
            continue
        elif path.startswith("tables/") and about.get("source") == "dp":  # a synthetic table: its one DP release
            expected = (None, 1, 1)
        elif path in _SOURCES and about.get("source") in ("dp", "reproducible"):
            mechanism, least, most = _SOURCES[path]
            expected = (mechanism, len(models) if path == "evaluation.json" else least,
                        len(models) if path == "evaluation.json" else most)
        else:
            expected = (None, 0, 0) if about.get("source") == "public" else None
        if expected is not None:
            mechanism, least, most = expected
            mine = [m for m in mechanisms if mechanism is None or m == mechanism]
            if not least <= len(mine) <= (most if most is not None else len(mine)) or len(mine) != len(mechanisms):
                problems.append(f"{path}: its source {about.get('source')!r} needs {least} {mechanism or 'no'} "
                                f"release(s); it cites {mechanisms}")
    for r, e in listed.items():
        if e.get("mechanism") in ("gaussian", "dp_sgd") and e.get("delta") != delta:
            problems.append(f"release {r} was made at delta {e.get('delta')}, the manifest composes at {delta}")
    return problems


@dataclass(frozen=True)
class Bundle:
    """A verified bundle, read back: what ``privehr predict`` needs and the card (the signed manifest's own)."""

    path: Path
    manifest: dict
    card: dict
    featurizer: dict | None  # None: a bundle of synthetic tables
    signed_by: str | None = None  # the fingerprint of the key that signed its manifest
    model_files: dict[str, bytes] = field(default_factory=dict)  # bundled model files by cell id, as verified
    manifest_sha256: str = ""    # of the verified manifest's bytes

    def models(self) -> dict[str, bytes]:
        """Bundled model files by cell id: the bytes that were verified (never read from the folder again)."""
        return self.model_files


def read_bundle(bundle: str | Path, pinned: str | None = None) -> Bundle:
    """Read a bundle after verifying it (signed by the key whose fingerprint is ``pinned``, when given); a bundle that
    does not verify is refused (its first problem named). The card is the manifest's, never card.json's text."""
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise InputError(f"release bundle {bundle} is not a directory; give the release/ folder of a run (or a copy "
                         "of it)")
    # what is verified is what is used: a private copy is verified and read, never the folder again (a file swapped
    # between the check and its use would otherwise be used unverified)
    with tempfile.TemporaryDirectory(prefix="privehr-bundle-") as private:
        copy = Path(private) / "bundle"
        shutil.copytree(bundle, copy, symlinks=True)  # links stay links: the verification refuses them
        report = verify_bundle(copy, pinned=pinned)
        if not report["ok"]:
            raise InputError(f"release bundle {bundle} does not verify: {report['problems'][0]}"
                             + (f" (and {len(report['problems']) - 1} more)" if len(report["problems"]) > 1 else "")
                             + ". Copy the bundle again from its run, or run `privehr release verify` for the list.")
        text = (copy / MANIFEST).read_bytes()
        manifest = json.loads(text)
        featurizer = copy / "featurizer.json"  # a bundle of synthetic tables has none
        models = {Path(p).stem: (copy / p).read_bytes() for p in manifest["files"] if p.startswith("models/")}
        return Bundle(bundle, manifest, manifest["card"], json.loads(featurizer.read_text()) if featurizer.exists()
                      else None, report["signed_by"], models, hashlib.sha256(text).hexdigest())


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def _neighbours_line(privacy: dict) -> str:
    n = privacy.get("neighbours")
    if n is None:  # a bundle made before the card named its relation
        return "- Neighbouring datasets: add/remove one record."
    if "epsilon" not in n:
        return f"- Neighbouring datasets differ by {n['relation']} ({n['why']}): the total above holds as it is."
    delta = "n/a" if n["delta"] is None else f"{n['delta']:.2g}"
    return (f"- Neighbouring datasets differ by {n['relation']}, not by one more or less: {n['why']}. Under that "
            f"relation: epsilon {_fmt(n['epsilon'])} at delta {delta}.")


def _privacy_lines(privacy: dict) -> list[str]:
    return ["## Privacy", "", f"**{privacy['guarantee']}**", "",
            f"- Total over this bundle's {privacy['releases']} release(s), at delta {privacy['delta']:.2g}, "
            f"under add/remove-one neighbours: epsilon {_fmt(privacy['epsilon_prv'])} (PRV), "
            f"{_fmt(privacy['epsilon_rdp'])} (RDP), {_fmt(privacy['epsilon_pld'])} (PLD).", _neighbours_line(privacy),
            *[f"- {item}" for item in privacy["covers"]], "", "Not covered:", "",
            *[f"- {item}" for item in privacy["not_covered"]], ""]


def _render_tables_card(card: dict) -> str:
    """The card of a synthesis run's bundle (synthetic tables) as Markdown."""
    table = card["table"]
    lines = [f"# Data card: {card['title']}", "", card["summary"], "", *_privacy_lines(card["privacy"]),
             "## The tables", "",
             f"- Columns: the {len(table['attributes'])} attributes of the spec {table['spec']}"
             + (f" and the derived columns {', '.join(table['derived'])}" if table["derived"] else "")
             + f"; missing values handled {table['missing'].replace('_', ' ')}.",
             *([f"- Rows sized by the patient count ({card['counts']['source']})."] if card.get("counts") else []), ""]
    for t in card["tables"]:
        eps = _fmt(t["epsilon"]) if t["epsilon"] is not None else "n/a"
        lines += [f"- {t['job']}: {t['synthesizer']} at {t['budget']} ({t['mechanism']}, epsilon {eps} alone); "
                  f"{t['rows']} rows per table; files: {', '.join(t['files'])}"]
    lines += ["", "## Intended use and limits", "", *[f"- {item}" for item in card["intended_use"]], ""]
    return "\n".join(lines)


def _informs(e: dict, key: str) -> bool:
    """Whether the card may print metric ``key`` of DP evaluation ``e`` as a number (a bundle made before the flag
    existed prints every metric, as it did)."""
    return (e.get("informative") or {}).get(key, True)


#: the DP metrics a card prints, in order (a bundle made before calibration was released prints the first four)
DP_METRICS = (("auroc", "AUROC"), ("auprc", "AUPRC"), ("prevalence", "prevalence"), ("ece", "ECE"),
              ("calibration_slope", "calibration slope"), ("calibration_intercept", "calibration intercept"))


def _count_source(card: dict) -> str:
    """How the card's test count was made: a DP count or the exact one a spec declared public (counts.json)."""
    source = (card.get("counts") or {}).get("source")
    return {"dp": " (counts.json's DP count)", "public": " (counts.json's exact count, declared public)"}.get(
        source, " (counts.json's count)")


def _dp_metric(e: dict, key: str, name: str) -> str:
    """One DP metric as the card prints it: the number and its interval, or why there is no number."""
    low, high = e["intervals"][key]
    if _informs(e, key):
        return f"{name} {_fmt(e[key])} [{_fmt(low)}, {_fmt(high)}]" if key != "ece" else f"{name} {_fmt(e[key])}"
    defined = _fmt(low) != "n/a" and _fmt(high) != "n/a"  # none where the noisy counts leave it undefined
    return (f"{name} not informative (" + (f"interval [{_fmt(low)}, {_fmt(high)}]" if defined else
                                           "undefined on these noisy counts: a class or score range too thin")
            + needed_text(e, key) + ")")


def needed_text(e: dict, key: str) -> str:
    """How many test stays metric ``key`` of DP evaluation ``e`` would need, as "; ..." after its reason, said as
    it was made (:class:`~privehr.models.evaluation.dp_evaluation.DPMetrics`' ``needed_basis``); empty where
    nothing was computed."""
    needed = (e.get("needed_records") or {}).get(key)
    if not needed:
        return ""
    width = f"{e['informative_width']:g}"
    return {"lower bound": f"; at least about {needed:,} test stays would be needed, from the DP noise on the "
                           "thinner class's count alone",
            "calibrated model": f"; about {needed:,} test stays would narrow it to {width} if the model were "
                                "calibrated at these scores"}.get((e.get("needed_basis") or {}).get(key),
                                                                  f"; about {needed:,} test stays would narrow it to {width}")


def calibration_text(evaluation: dict) -> str:
    """A model's DP calibration as the card prints it (slope and intercept with intervals, or why not), for
    ``privehr predict`` to print beside the risks; empty for a bundle made before calibration was released."""
    return ", ".join(_dp_metric(evaluation, key, name) for key, name in DP_METRICS[4:] if key in evaluation["intervals"])


def render_card(card: dict) -> str:
    """The bundle's card as Markdown (the conventions of Mitchell et al. 2019's model cards; a synthesis run's
    bundle has a card of its tables)."""
    if card.get("kind") == "synthetic tables":
        return _render_tables_card(card)
    privacy, cohort = card["privacy"], card["cohort"]
    lines = [f"# Model card: {card['title']}", "", card["summary"], "", *_privacy_lines(privacy),
             "## Task and cohort", "",
             f"- Input: the first {cohort['window_hours']} hours of an ICU stay ({cohort['variables']} hourly "
             f"variables, MIMIC-Extract format); prediction at hour {cohort['window_hours']}.",
             f"- Cohort: {cohort['definition']}",
             f"- Records per split the plans were built from ({card['counts']['source']}): "
             + ", ".join(f"{k} {v}" for k, v in card["counts"]["stays"].items()), "",
             "## Models and their DP evaluation", ""]
    for m in card["models"]:
        e = m["evaluation"]
        lines += [f"### {m['cell_id']}", "",
                  f"- Label: {m['label']} ({m['label_definition']}); model: {m['model']}; trained by DP-SGD "
                  f"(sigma {m['plan']['noise_multiplier']:.3g}, q {m['plan']['sample_rate']:.3g}, "
                  f"{m['plan']['steps']} steps, clip {m['plan']['max_grad_norm']:g}); epsilon "
                  f"{_fmt(m['plan']['epsilon'])} alone.",
                  f"- DP evaluation on about {e['records']:.0f} test stays"
                  + (_count_source(card) if e.get("records_source") == "record count" else "")
                  + (f" at epsilon {_fmt(e['epsilon'])}" if e.get("epsilon") is not None else "") + ": "
                  + ", ".join(_dp_metric(e, key, name) for key, name in DP_METRICS if key in e["intervals"])
                  + f" ({round(e['confidence'] * 100)} % intervals: test sampling and DP noise).", ""]
        silent = [name for key, name in (("auroc", "AUROC"), ("auprc", "AUPRC")) if not _informs(e, key)]
        if silent:
            lines[-1:] = [f"- {' and '.join(silent)} not informative: the DP noise and this many test stays leave "
                          f"an interval wider than {e['informative_width']:g}; they are not results. More test "
                          "stays or a larger evaluation epsilon (release.evaluation_epsilon) narrow it.", ""]
    lines += _reporting_lines(card.get("reporting"))
    lines += ["## Intended use and limits", "", *[f"- {item}" for item in card["intended_use"]], ""]
    return "\n".join(lines)


def _reporting_lines(reporting: dict | None) -> list[str]:
    """The card's map to TRIPOD+AI and the CHAI Applied Model Card (:mod:`privehr.io.card_standards`); nothing for
    a card made before it had one."""
    if not reporting:
        return []
    def value(r: dict) -> str:
        v = f"{r['value']:.3g}" if isinstance(r["value"], float) else str(r["value"])
        return v + (f"; {r['note']}" if r.get("note") else "")

    def fields(where) -> str:  # a list of card.json paths (a card of 2026-11-28 may hold one path or none)
        return ", ".join(where) if isinstance(where, list) else where or ""

    return ["## Reporting standards", "",
            "Where this card answers TRIPOD+AI (Collins et al., BMJ 2024) and the CHAI Applied Model Card (2024 "
            "draft), by its fields in card.json; the DP fields neither names; the TRIPOD+AI items it does not answer.",
            "", "| TRIPOD+AI item | topic | card fields |", "|---|---|---|",
            *[f"| {r['item']} | {r['topic']} | {fields(r['where'])} |" for r in reporting["tripod_ai"]], "",
            "| CHAI section | card fields |", "|---|---|",
            *[f"| {r['section']} | {fields(r['where']) or 'not on this card: ' + r.get('why', 'not released')} |"
              for r in reporting["chai"]], "",
            "| DP field | on this card | card fields |", "|---|---|---|",
            *[f"| {r['field']} | {value(r)} | {fields(r.get('where')) or 'none'} |" for r in reporting["dp_fields"]],
            "", "| not answered (TRIPOD+AI item) | topic | why |", "|---|---|---|",
            *[f"| {r['item']} | {r['topic']} | {r['why']} |" for r in reporting["not_covered"]], ""]
