"""The hospital's signature on a release bundle: Ed25519 over the exact bytes of its ``manifest.json``.

The manifest lists every other file of the bundle with its sha256, so one signature covers them all. The signing key
is the hospital's, not a run's: ``<ledger>.signing-key`` beside the privacy ledger (``privacy.ledger_path``), created
on first use, owner-only (0600, its directory made 0700), never inside a run directory and never in a bundle. The
bundle carries the public key in ``signature.json``; its fingerprint is the sha256 of the raw 32-byte public key in
hex. A partner who pins that fingerprint (received by another channel than the bundle) knows the bundle was signed
by the holder of the hospital's key; without a pin, anyone may re-sign an edited bundle with a key of their own.

Bernstein et al. 2012, "High-speed high-security signatures" (Ed25519), J. Cryptographic Engineering.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     key, created = hospital_key(Path(d) / "ledger.jsonl")
...     signed = signature_record(key, b"{}")
...     problems = signature_problems(signed, b"{}", pinned=signed["fingerprint"])
...     forged = signature_problems(signed, b"{ }", pinned=None)
>>> created, problems, len(signed["fingerprint"]), forged[0].startswith("signature.json: the signature")
(True, [], 64, True)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from privehr.core.config.release import SignerTrust
from privehr.core.errors import InputError
from privehr.io.ledger.layout import LedgerLayout, write_private

__all__ = ["SIGNATURE", "SIGNATURE_FORMAT", "signing_key_path", "hospital_key", "fingerprint", "key_fingerprint",
           "signature_record", "signature_problems", "normalise_fingerprint", "trusted_signer"]

SIGNATURE = "signature.json"
SIGNATURE_FORMAT = "privehr-bundle-signature/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def signing_key_path(ledger_path: str | os.PathLike) -> Path:
    """Where the hospital's signing key lives: ``<ledger>.signing-key``, beside the privacy ledger."""
    return LedgerLayout(ledger_path).signing_key


def fingerprint(public: Ed25519PublicKey) -> str:
    """The sha256 of the raw 32-byte public key, in hex (what a partner pins)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def normalise_fingerprint(text: str) -> str:
    """A fingerprint as typed (any case, with ``sha256:``, colons or spaces) as 64 lowercase hex digits; refuse
    anything else in one line."""
    clean = re.sub(r"[\s:]", "", text.lower().removeprefix("sha256:"))
    if not _HEX64.fullmatch(clean):
        raise InputError(f"key fingerprint {text!r} is not 64 hex digits; give the fingerprint the hospital sent "
                         "you (the sha256 of its signing key, as `privehr release show` prints it)")
    return clean


def _read_key(path: Path) -> Ed25519PrivateKey:
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise InputError(f"the signing key {path} has mode {mode:04o}, not owner-only; nothing was signed. Run "
                         f"`chmod 600 {path}`" + (" and, as others could read it, treat the key as leaked: make a new "
                                                   "one and send partners its fingerprint" if mode & 0o044 else ""))
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as err:
        raise InputError(f"the signing key {path} cannot be read ({type(err).__name__}); restore it from a backup, "
                         "or move it away to make a new one (and send partners its fingerprint)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"the signing key {path} is not an Ed25519 key; move it away to make a new one")
    return key


def hospital_key(ledger_path: str | os.PathLike) -> tuple[Ed25519PrivateKey, bool]:
    """The hospital's signing key beside the ledger, and whether this call created it (0600 in a 0700 directory
    when the directory is new; an existing key that others may read is refused)."""
    path = signing_key_path(ledger_path)
    if path.exists():
        return _read_key(path), False
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not write_private(path, pem, exclusive=True):  # two runs creating it at once keep the first one's
        return _read_key(path), False
    return key, True


def key_fingerprint(ledger_path: str | os.PathLike) -> str | None:
    """The fingerprint of the hospital's signing key beside ``ledger_path``, or None when there is none yet."""
    path = signing_key_path(ledger_path)
    return fingerprint(_read_key(path).public_key()) if path.exists() else None


def signature_record(key: Ed25519PrivateKey, manifest: bytes) -> dict:
    """``signature.json``'s content: the public key, the signature of ``manifest``'s exact bytes, the fingerprint."""
    public = key.public_key()
    return {"format": SIGNATURE_FORMAT, "algorithm": "ed25519", "signs": "manifest.json",
            "public_key": public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex(),
            "fingerprint": fingerprint(public), "signature": key.sign(manifest).hex()}


def signature_problems(record, manifest: bytes, pinned: str | None) -> list[str]:
    """What is wrong with ``record`` (``signature.json`` as read) as a signature of ``manifest`` by the key whose
    fingerprint is ``pinned`` (None: any key); one line each, never an exception."""
    if not isinstance(record, dict) or record.get("format") != SIGNATURE_FORMAT or \
            not all(isinstance(record.get(k), str) for k in ("public_key", "fingerprint", "signature")):
        return [f"{SIGNATURE}: not a privehr bundle signature (an Ed25519 public key, fingerprint and signature)"]
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(record["public_key"]))
        signature = bytes.fromhex(record["signature"])
    except ValueError:
        return [f"{SIGNATURE}: its public key or signature is not an Ed25519 one in hex"]
    signer = fingerprint(public)
    if record["fingerprint"] != signer:
        return [f"{SIGNATURE}: its fingerprint {record['fingerprint'][:16]}... is not its public key's ({signer})"]
    try:
        public.verify(signature, manifest)
    except InvalidSignature:
        return [f"{SIGNATURE}: the signature does not match manifest.json (the manifest was edited after signing)"]
    if pinned is not None and signer != pinned:
        return [f"{SIGNATURE}: signed by key {signer}, not by the pinned key {pinned} (another key signed this "
                "bundle: a forgery, or the hospital's key changed; ask the hospital by another channel)"]
    return []


def trusted_signer(signer: str, trust: SignerTrust) -> str:
    """How ``signer`` (a verified bundle's key fingerprint) is trusted under ``trust``, in words; refuse in one line
    a signer no pin, own key or earlier trust-on-first-use vouches for (anyone can sign a bundle with a key of their
    own: a signature proves who signed only against a key known beforehand)."""
    if trust.pinned is not None:
        pinned = normalise_fingerprint(trust.pinned)
        if signer != pinned:
            raise InputError(f"the release bundle is signed by key {signer}, not by the pinned key {pinned}: a forgery, "
                             "or the hospital's key changed; refused. Ask the hospital by another channel.")
        return f"the pinned key {signer}"
    layout = LedgerLayout(trust.ledger_path)
    own = key_fingerprint(trust.ledger_path)
    recorded = _recorded_signers(layout.trusted_signers)
    if signer == own:
        return f"the hospital's own signing key {signer} ({layout.signing_key})"
    if signer in recorded:
        return f"key {signer}, trusted on first use {recorded[signer]} ({layout.trusted_signers})"
    if trust.trust_on_first_use and own is None and not recorded:
        layout.trusted_signers.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_private(layout.trusted_signers, (json.dumps({signer: when}, indent=1) + "\n").encode())
        return f"key {signer}, trusted on first use now (recorded in {layout.trusted_signers})"
    if own or recorded:
        trusted = " or ".join(t for t in (own and "the hospital's own key", recorded and "a signer trusted on first use")
                              if t)
        raise InputError(f"the release bundle is signed by key {signer}, which is not {trusted}: a forgery, or the key "
                         "changed; refused. Pass --key-fingerprint if the hospital sent you this one by "
                         "another channel.")
    raise InputError(f"the release bundle is signed by key {signer}, which is not pinned; refused. Pass "
                     "--key-fingerprint with the fingerprint the hospital sent you by another channel, or, once, "
                     "--trust-on-first-use to record this signer.")


def _recorded_signers(path: Path) -> dict[str, str]:
    """The signers trusted on first use ({fingerprint: when}); an unreadable or shared file is refused."""
    if not path.exists():
        return {}
    if path.stat().st_mode & 0o077:
        raise InputError(f"the trusted signers {path} may be written by others (mode "
                         f"{path.stat().st_mode & 0o777:04o}); refused. Run `chmod 600 {path}`.")
    try:
        recorded = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise InputError(f"the trusted signers {path} is not readable JSON; restore it or remove it") from None
    if not isinstance(recorded, dict) or not all(_HEX64.fullmatch(str(k)) for k in recorded):
        raise InputError(f"the trusted signers {path} is not a map of key fingerprints; restore it or remove it")
    return {str(k): str(v) for k, v in recorded.items()}
