"""The release bundle on disk: its manifest, its verification, its model card as text, and reading it back.

A bundle (``artifacts/<run-id>/release/``) is a directory that may leave the hospital alone. ``manifest.json``
lists every other file with its sha256 and the ledger releases it is made from (none for a public file), holds a
copy of those releases' ledger entries (without the source's id, their times and their membership snapshots) and
their total (epsilon, delta) by PRV, RDP and PLD. :func:`verify_bundle` checks the hashes, that every file is listed
and every cited release is in the manifest, and recomposes the total from the listed entries; with the hospital's
ledger it also checks that each entry is the ledger's own.

>>> sorted(BUNDLE_FILES)
['card.json', 'card.md', 'counts.json', 'evaluation.json', 'featurizer.json']
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps
from privehr.models.privacy.ledger import LedgerEntry, compose_entries

__all__ = ["BUNDLE_FORMAT", "BUNDLE_FILES", "MANIFEST", "write_manifest", "verify_bundle", "read_bundle", "Bundle",
           "render_card", "bundle_total"]

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


def public_entry(entry: LedgerEntry) -> dict:
    """A ledger entry as the bundle carries it: everything but the dataset's id, its time and its patients."""
    return {k: v for k, v in entry.as_dict().items() if k not in _PRIVATE_FIELDS}


def bundle_total(entries: list[dict], delta: float) -> dict:
    """The composed (epsilon, delta) of the bundle's releases by every accountant (the ledger's own composition)."""
    total = compose_entries([LedgerEntry.from_dict({**e, "dataset": "bundle"}) for e in entries], delta)
    return {"dp": total.dp, "releases": total.releases, "delta": total.delta, "epsilon": total.epsilon,
            "epsilon_prv": total.epsilon_dp_prv, "epsilon_rdp": total.epsilon_dp_rdp,
            "epsilon_pld": total.epsilon_dp_pld, "not_dp": total.not_dp}


def write_manifest(bundle: Path, sources: dict[str, dict], entries: list[LedgerEntry], delta: float,
                   header: dict) -> dict:
    """Write ``manifest.json`` for the files of ``bundle`` described in ``sources`` (path -> {"source", "releases",
    "about"}); refuse a file in the directory that is not described."""
    present = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {MANIFEST}
    if present != set(sources):
        raise RuntimeError(f"bundle files and their descriptions differ: {sorted(present ^ set(sources))}")
    carried = sorted((public_entry(e) for e in entries), key=lambda e: e["release"])  # not the ledger's order
    files = {path: {"sha256": _sha256(bundle / path), **about}  # no sizes: a JSON file's length follows its digits
             for path, about in sorted(sources.items())}
    manifest = {"format": BUNDLE_FORMAT, **header, "delta": delta, "files": files, "releases": carried,
                "total": bundle_total(carried, delta)}
    (bundle / MANIFEST).write_text(strict_dumps(manifest, indent=1))
    return manifest


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def verify_bundle(bundle: str | Path, ledger: list[LedgerEntry] | None = None) -> dict:
    """Check a bundle alone (and against the hospital's ``ledger`` entries when given): {"ok", "problems", ...}.
    Never raises on a bad bundle; a missing or unreadable manifest is one problem."""
    bundle = Path(bundle)
    problems: list[str] = []
    try:
        manifest = json.loads((bundle / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        return {"bundle": str(bundle), "ok": False, "problems": [f"{MANIFEST} cannot be read ({type(err).__name__})"]}
    files = manifest.get("files", {})
    present = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {MANIFEST}
    problems += [f"{p}: in the bundle but not in the manifest (unaccounted)" for p in sorted(present - set(files))]
    problems += [f"{p}: in the manifest but missing" for p in sorted(set(files) - present)]
    problems += [f"{p}: sha256 differs from the manifest's" for p in sorted(set(files) & present)
                 if _sha256(bundle / p) != files[p]["sha256"]]
    if manifest.get("format") != BUNDLE_FORMAT:
        problems.append(f"format {manifest.get('format')!r} is not {BUNDLE_FORMAT}")
    cited = {r for about in files.values() for r in about.get("releases", [])}
    listed = {e["release"]: e for e in manifest.get("releases", [])}
    if len(listed) != len(manifest.get("releases", [])):
        problems.append("the manifest lists a release more than once")
    problems += _source_problems(files, listed, manifest.get("delta"))
    problems += [f"release {r} is cited by a file but not in the manifest" for r in sorted(cited - set(listed))]
    problems += [f"release {r} is in the manifest but no file comes from it" for r in sorted(set(listed) - cited)]
    problems += [f"release {r} is {e.get('status')}, not released" for r, e in listed.items()
                 if e.get("status") != "released"]
    stated = manifest.get("total", {})
    try:
        again = bundle_total(list(listed.values()), manifest["delta"])
        for key in ("epsilon_prv", "epsilon_rdp", "epsilon_pld", "delta", "dp"):
            if not _close(again[key], stated.get(key)):
                problems.append(f"total {key}: the manifest says {stated.get(key)}, its releases compose to "
                                f"{again[key]}")
        if manifest.get("guarantee", "").startswith("DP end to end") and not (
                again["dp"] and all(f.get("source") in ("public", "dp", "derived") for f in files.values())):
            problems.append("the manifest says DP end to end, but its releases or its files' sources do not")
    except (KeyError, TypeError, ValueError) as err:
        problems.append(f"the manifest's releases cannot be composed ({err})")
    if ledger is not None:
        own = {e.release: public_entry(e) for e in ledger}
        problems += [f"release {r} is not in the ledger" for r in sorted(set(listed) - set(own))]
        problems += [f"release {r} differs from the ledger's entry" for r in sorted(set(listed) & set(own))
                     if own[r] != listed[r]]
    return {"bundle": str(bundle), "ok": not problems, "problems": problems, "files": len(files),
            "releases": len(listed), "total": stated}


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
    """A verified bundle, read back: what ``privehr predict`` needs and the card."""

    path: Path
    manifest: dict
    card: dict
    featurizer: dict | None  # None: a bundle of synthetic tables

    def models(self) -> dict[str, Path]:
        """Bundled model files by cell id."""
        return {Path(p).stem: self.path / p for p in self.manifest["files"] if p.startswith("models/")}


def read_bundle(bundle: str | Path) -> Bundle:
    """Read a bundle after verifying it; a bundle that does not verify is refused (its first problem named)."""
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise InputError(f"release bundle {bundle} is not a directory; give the release/ folder of a run (or a copy "
                         "of it)")
    report = verify_bundle(bundle)
    if not report["ok"]:
        raise InputError(f"release bundle {bundle} does not verify: {report['problems'][0]}"
                         + (f" (and {len(report['problems']) - 1} more)" if len(report["problems"]) > 1 else "")
                         + ". Copy the bundle again from its run, or run `privehr release verify` for the list.")
    manifest = json.loads((bundle / MANIFEST).read_text())
    featurizer = bundle / "featurizer.json"  # a bundle of synthetic tables has none
    return Bundle(bundle, manifest, json.loads((bundle / "card.json").read_text()),
                  json.loads(featurizer.read_text()) if featurizer.exists() else None)


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def _privacy_lines(privacy: dict) -> list[str]:
    return ["## Privacy", "", f"**{privacy['guarantee']}**", "",
            f"- Total over this bundle's {privacy['releases']} release(s), at delta {privacy['delta']:.2g}: "
            f"epsilon {_fmt(privacy['epsilon_prv'])} (PRV), {_fmt(privacy['epsilon_rdp'])} (RDP), "
            f"{_fmt(privacy['epsilon_pld'])} (PLD).",
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
        ci = e["intervals"]
        lines += [f"### {m['cell_id']}", "",
                  f"- Label: {m['label']} ({m['label_definition']}); model: {m['model']}; trained by DP-SGD "
                  f"(sigma {m['plan']['noise_multiplier']:.3g}, q {m['plan']['sample_rate']:.3g}, "
                  f"{m['plan']['steps']} steps, clip {m['plan']['max_grad_norm']:g}); epsilon "
                  f"{_fmt(m['plan']['epsilon'])} alone.",
                  f"- AUROC {_fmt(e['auroc'])} [{_fmt(ci['auroc'][0])}, {_fmt(ci['auroc'][1])}], AUPRC "
                  f"{_fmt(e['auprc'])} [{_fmt(ci['auprc'][0])}, {_fmt(ci['auprc'][1])}], prevalence "
                  f"{_fmt(e['prevalence'])}, ECE {_fmt(e['ece'])} ({round(e['confidence'] * 100)} % intervals: "
                  "test sampling and DP noise).", ""]
    lines += ["## Intended use and limits", "", *[f"- {item}" for item in card["intended_use"]], ""]
    return "\n".join(lines)
