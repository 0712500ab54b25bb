"""``privehr release show|verify BUNDLE`` (the model card; the bundle's hashes and accounting) and ``privehr predict
BUNDLE --data NEW.h5 --out risks.csv`` (score new stays from the bundle alone)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from privehr.cli.common import emit
from privehr.core.config import ScoringConfig
from privehr.core.errors import InputError, settings_error

__all__ = ["add_release_parser", "add_predict_parser"]


def add_release_parser(sub, common: argparse.ArgumentParser) -> None:
    release = sub.add_parser("release", help="a run's release bundle: what may leave the hospital")
    release_sub = release.add_subparsers(dest="release_command", required=True)
    show = release_sub.add_parser("show", parents=[common], help="print the bundle's model card (rendered from its "
                                  "verified, signed manifest) and the fingerprint of the key that signed it")
    show.add_argument("bundle", type=Path, help="a run's release/ folder, or a copy of it")
    show.add_argument("--key-fingerprint", help="refuse a bundle not signed by the key with this fingerprint")
    show.set_defaults(func=release_show)
    verify = release_sub.add_parser("verify", parents=[common], help="check the manifest's signature, every file's "
                                    "sha256, that every file is accounted for, that each model is the file its "
                                    "release bound, that the card is the manifest's, and the bundle's total "
                                    "(epsilon, delta): exit status 0 if it holds, 1 with the problems")
    verify.add_argument("bundle", type=Path)
    verify.add_argument("--key-fingerprint", help="the hospital's signing key fingerprint (64 hex digits, received "
                                                  "by another channel than the bundle): refuse a bundle another key "
                                                  "signed")
    verify.add_argument("--ledger", type=Path, help="also check each release and each model file's hash against this "
                                                    "privacy ledger (inside the hospital), and the signature against "
                                                    "the signing key beside it (default for the key: the project's)")
    verify.add_argument("--trust-on-first-use", action="store_true", help="where no signer is trusted yet (no "
                        "fingerprint, no own key, none recorded), trust this bundle's and record it beside the ledger")
    verify.set_defaults(func=release_verify)


def add_predict_parser(sub, common: argparse.ArgumentParser) -> None:
    predict = sub.add_parser("predict", parents=[common], help="score the stays of a MIMIC-Extract file with a "
                             "release bundle's models (the bundle alone: window, featurizer and weights)")
    predict.add_argument("bundle", type=Path, help="a run's release/ folder, or a copy of it")
    predict.add_argument("--data", type=Path, required=True, help="MIMIC-Extract file of the stays to score")
    predict.add_argument("--out", type=Path, required=True, help=ScoringConfig.model_fields["out"].description)
    predict.add_argument("--model", action="append", help="a bundled model's cell id (repeatable; default: all)")
    fields = ScoringConfig.model_fields  # the help and the defaults are the settings' own (one place)
    predict.add_argument("--recalibrate", action="store_true", default=None,
                         help=fields["recalibrate"].description)
    predict.add_argument("--format", choices=get_args(fields["format"].annotation), default=None,
                         help=f"{fields['format'].description} (default: {fields['format'].default})")
    predict.add_argument("--key-fingerprint", help=fields["key_fingerprint"].description)
    predict.add_argument("--trust-on-first-use", action="store_true", default=None,
                         help=fields["trust_on_first_use"].description)
    predict.add_argument("--ledger", type=Path, help=fields["ledger_path"].description)
    predict.set_defaults(func=predict_command)


def _existing(path: Path, what: str) -> None:
    if not path.exists():
        raise InputError(f"{what} {path} does not exist")


def _pinned(args) -> str | None:
    from privehr.io.bundle_signature import normalise_fingerprint

    return normalise_fingerprint(args.key_fingerprint) if args.key_fingerprint is not None else None


def release_show(args) -> int:
    from privehr.io.release_bundle import read_bundle, render_card  # deferred for start-up time (torch)

    bundle = read_bundle(args.bundle, _pinned(args))  # the card is the signed manifest's, never card.md's text
    emit(args, {**bundle.card, "signed_by": bundle.signed_by},
         render_card(bundle.card) + f"\nSigned by the key with fingerprint {bundle.signed_by}"
         + ("" if args.key_fingerprint else " (not pinned: compare it with the one the hospital sent you)") + "\n")
    return 0


def release_verify(args) -> int:
    from privehr.core.config import SignerTrust, project_ledger
    from privehr.io.bundle_signature import trusted_signer
    from privehr.io.ledger import read_ledger
    from privehr.io.release_bundle import verify_bundle

    _existing(args.bundle, "release bundle")
    pinned = _pinned(args)
    if args.ledger is not None:
        _existing(args.ledger, "privacy ledger")
    report = verify_bundle(args.bundle, read_ledger(args.ledger) if args.ledger else None, pinned)
    signer = None
    if report["ok"]:  # the signature holds: whose key made it, against a key known beforehand
        try:
            signer = trusted_signer(report["signed_by"], SignerTrust(pinned, args.ledger or project_ledger(),
                                                                     args.trust_on_first_use))
        except InputError as err:
            report = report | {"ok": False, "problems": [str(err)]}
    total = report.get("total") or {}
    text = (f"release bundle {args.bundle}: verified ({report['files']} files, {report['releases']} releases; "
            f"epsilon {total.get('epsilon_prv')} (PRV), {total.get('epsilon_rdp')} (RDP), {total.get('epsilon_pld')} "
            f"(PLD) at delta {total.get('delta')}); signed by {signer}" if report["ok"] else
            f"release bundle {args.bundle}: DOES NOT VERIFY\n" + "\n".join(f"  - {p}" for p in report["problems"]))
    emit(args, {**report, "pinned": pinned, "signer": signer}, text)
    return 0 if report["ok"] else 1


def predict_command(args) -> int:
    from privehr.tasks.predict import score_stays  # deferred for start-up time (torch)

    _existing(args.data, "--data")
    given = {"format": args.format, "recalibrate": args.recalibrate, "key_fingerprint": args.key_fingerprint,
             "trust_on_first_use": args.trust_on_first_use, "ledger_path": args.ledger}
    try:
        config = ScoringConfig(bundle=args.bundle, data=args.data, out=args.out, models=args.model,
                               **{k: v for k, v in given.items() if v is not None})
    except ValueError as err:
        raise settings_error(err, "predict options") from None
    summary = score_stays(config.bundle, config.data, config.out, trust=config.signer_trust(), models=config.models,
                          chunk_rows=config.chunk_rows, out_format=config.format, recalibrate=config.recalibrate)
    where = "their rows say" if config.format == "csv" else "not_scored.csv says"
    short = f"; {summary['not_scored']} not scored ({where} why)" if summary["not_scored"] else ""
    calibration = [f"  {cell}: {text or 'not on its card (the bundle was made before calibration was released)'}"
                   for cell, text in summary["calibration"].items()]
    emit(args, summary, f"scored {summary['scored']} of {summary['stays']} stay(s) ({summary['in_cohort']} in the "
                        f"training cohort's definition{short}) with {', '.join(summary['models'])}; risks in "
                        f"{summary['out']}\nbundle: {summary['guarantee']}; signed by {summary['signer']}"
                        + ("\ncalibration on the training run's test split (DP, from the card; a slope below 1 means "
                           "risks too extreme, an intercept below 0 risks too high):\n" + "\n".join(calibration)
                           if calibration else "")
                        + (f"\nrecalibrated (DP, fitted on the run's test split): {', '.join(summary['recalibrated'])}"
                           if summary["recalibrated"] else "")
                        + "".join(f"\nnot recalibrated: {c}: {why}" for c, why in summary["not_recalibrated"].items()))
    return 0

