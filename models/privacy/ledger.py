"""The privacy ledger: what every release from a dataset has cost, composed, and never understated.

The ledger is a list of entries per dataset. An entry is one of:

* a **reservation** (``status="reserved"``): a release a run has planned and the budget check has
  admitted, written before any private record is touched, so a second run on the same dataset sees
  it at once;
* a **release** (``status="released"``): a trained model or flow, written as soon as it exists and
  before it is saved anywhere; it settles its reservation;
* a **void** (``status="void"``): a reservation its run gave up (a resumed run re-plans the releases
  its crashed attempt never made). Only a reservation with no release can be voided; a release is
  counted whatever happened to its reservation.

What counts is every release plus every reservation not yet settled: a crash between the budget
check and the end of a run leaves the reserved spend counted.

Composition of what counts (one source, or one patient's releases, at the ledger's delta):

* DP-SGD entries (Poisson-subsampled Gaussian: DP-SGD classifiers, DP-SGD search trials, DP-NF
  flows) and Gaussian entries (one Gaussian mechanism on the whole data: a release's featurizer
  statistics, its DP evaluation histograms; sample rate 1, one step) compose *exactly* as one
  heterogeneous history by PRV (claimed), RDP and PLD;
* other (epsilon, delta)-DP entries compose by basic composition (Dwork and Roth, Theorem 3.16);
* the DP total adds the two; its delta is the ledger's delta plus the other entries' deltas;
* RDP's total of a source (the ``epsilon_dp_rdp`` column) is the Gaussian history's RDP at the minimum over orders
  plus the other entries' epsilons: valid for a sequence fixed in advance, as PRV's and PLD's are. A **budget binds
  elsewhere**: per patient, across sources, on the Renyi filter at one order fixed in advance
  (``models/privacy/rdp_filter.py`` and ``models/privacy/patient_accounting.py``);
* a release without a proven guarantee (non-private, ExpM+NF whose eps~ is a training parameter,
  DP-SGD or DP-NF with reproducible noise) makes the dataset's total **not DP**; the DP-only total is
  still shown beside it, named as such.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields

from privehr.models.privacy.accounting import Composition, compose_history, rdp_epsilon, recompose_history

__all__ = ["LedgerEntry", "LedgerTotal", "compose_entries", "MECHANISMS",
           "GAUSSIAN_MECHANISMS",
           "GUARANTEES", "STATUSES", "effective_entries", "dataset_id_of", "CHAIN_FIELDS", "chain_start", "chain_tag",
           "head_tag", "guarantee_label", "WEAK"]

MECHANISMS = ("dp_sgd", "gaussian", "dp", "non_private", "expm_nf")  # dp: any other (epsilon, delta)-DP release
GAUSSIAN_MECHANISMS = ("dp_sgd", "gaussian")  # composed exactly, as (sigma, q, T) histories
STATUSES = ("reserved", "released", "void")
GUARANTEES = {  # an entry's guarantee -> how the ledger and the report name it
    "dp": "DP",
    "reproducible": "not DP (reproducible noise)",
    "tuned": "not DP (hyperparameters chosen on private dev data)",
    "unproven": "not DP (ExpM+NF: eps~ is a training parameter, no guarantee is proven)",
    "non_private": "not DP (non-private)",
}
_DEFAULT_GUARANTEE = {"dp_sgd": "dp", "gaussian": "dp", "dp": "dp", "non_private": "non_private", "expm_nf": "unproven"}


def _canonical(subject) -> str:
    try:
        number = float(subject)
    except (TypeError, ValueError):
        return str(subject).strip()
    return str(int(number)) if math.isfinite(number) and number == int(number) else str(subject).strip()


def dataset_id_of(subject_ids: Iterable, key: bytes) -> str:
    """The default dataset id: HMAC-SHA256, under the ledger's secret ``key``, of the sorted distinct subject
    ids (10005, 10005.0 and "10005" alike).

    A re-export of the same patients gets the same id, whatever the file's bytes; a delivery with other
    patients gets another (a steward who wants overlapping deliveries to share a budget assigns one id).
    The key matters: an unkeyed hash, printed in every run's artifacts, would let anyone who knows all
    patients but one test whether that one is in the data (hash the list with and without them).

    >>> key = bytes(32)
    >>> dataset_id_of([3, 1, 2], key) == dataset_id_of(["2", "3.0", 1, 1], key) != dataset_id_of([1, 2], key)
    True
    """
    ids = sorted({_canonical(s) for s in subject_ids})
    return "subjects-hmac:" + hmac.new(key, "\n".join(ids).encode(), hashlib.sha256).hexdigest()


_FIELDS: dict[type, frozenset] = {}  # a ledger's every line is read through from_dict: its field names, once


@dataclass(frozen=True)
class LedgerEntry:
    """One line of the ledger (see the module docstring for statuses and guarantees)."""

    dataset: str                  # the dataset's id (steward-assigned, or a keyed hash of its sorted subject ids)
    release: str                  # unique forever: <run-id>/<what>#<random token>
    mechanism: str
    epsilon: float | None = None  # claimed epsilon of a DP release; eps~ for ExpM+NF; None for non-private
    delta: float = 0.0            # a "dp" entry's delta (summed); dp_sgd entries compose at the dataset's delta
    noise_multiplier: float | None = None  # dp_sgd and gaussian: noise std over the L2 sensitivity (or the clip norm)
    sample_rate: float | None = None       # gaussian: 1
    steps: int | None = None               # gaussian: 1
    run_id: str = ""
    status: str = "released"
    guarantee: str | None = None  # None: the mechanism's default (dp_sgd/dp -> dp, ...)
    reservation: str | None = None  # a release or a void: the reservation it settles
    what: str = ""                # "final fit", "search trial", "DP-NF flow", ...
    created_utc: str = ""
    epsilon_prv: float | None = None
    epsilon_rdp: float | None = None
    epsilon_pld: float | None = None
    members: str | None = None    # the membership snapshot of the patients it used (None: every patient of the source)
    sha256: str | None = None     # the sha256 of the file it released, where one was saved (a model's weights)

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; choose one of {MECHANISMS}")
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; choose one of {STATUSES}")
        if self.guarantee is None:
            object.__setattr__(self, "guarantee", _DEFAULT_GUARANTEE[self.mechanism])
        if self.guarantee not in GUARANTEES:
            raise ValueError(f"unknown guarantee {self.guarantee!r}; choose one of {sorted(GUARANTEES)}")
        if self.epsilon is not None and not math.isfinite(self.epsilon):  # old ledgers wrote Infinity
            object.__setattr__(self, "epsilon", None)
        if self.mechanism == "gaussian" and (self.sample_rate, self.steps) != (1.0, 1):
            raise ValueError("a gaussian entry is one step on the whole data: sample_rate 1 and steps 1")
        if self.status != "void" and self.mechanism in GAUSSIAN_MECHANISMS and None in (
                self.noise_multiplier, self.sample_rate, self.steps):
            raise ValueError(f"a {self.mechanism} entry needs noise_multiplier, sample_rate and steps")
        if self.status != "void" and self.guarantee == "dp" and self.mechanism == "dp" and self.epsilon is None:
            raise ValueError("a DP entry needs its epsilon")

    @classmethod
    def from_dict(cls, raw: dict) -> "LedgerEntry":
        known = _FIELDS.get(cls) or _FIELDS.setdefault(cls, frozenset(f.name for f in fields(cls)))
        return cls(**{k: v for k, v in raw.items() if k in known})

    def as_dict(self) -> dict:
        return asdict(self)


def effective_entries(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """What counts: every release, and every reservation no release or void has settled."""
    settled = {e.reservation for e in entries if e.status != "reserved" and e.reservation}
    return [e for e in entries if e.status == "released" or (e.status == "reserved" and e.release not in settled)]


@dataclass
class LedgerTotal:
    """The composed cost of one dataset's releases (see :func:`compose_entries`)."""

    dataset: str
    releases: int                       # released entries
    pending: int                        # reservations not yet settled (counted)
    delta: float
    dp: bool                            # False once any counted entry has no proven guarantee
    epsilon: float | None               # the dataset's guarantee: epsilon_dp if dp, else None ("not DP")
    epsilon_dp: float                   # the guarantee of the DP entries alone (claim: PRV, else RDP)
    epsilon_dp_prv: float | None
    epsilon_dp_rdp: float
    epsilon_dp_pld: float | None
    epsilon_other_basic: float
    delta_other: float
    counts: dict = field(default_factory=dict)     # counted entries by mechanism
    not_dp: dict = field(default_factory=dict)     # counted entries without a guarantee, by label
    unproven_epsilon_tilde: list = field(default_factory=list)
    patients: dict | None = None  # per-patient spend where releases cite membership snapshots (the ledger view's)
    distinct_mechanisms: int = 0  # distinct (sigma, q) after k-fold composition (PRV and PLD cost grows with them)

    @property
    def guarantee(self) -> str:
        return f"DP: epsilon {self.epsilon_dp:.4g} at delta {self.delta:.2g}" if self.dp else "not DP"

    @property
    def why_not_dp(self) -> str:
        """The counted releases without a guarantee, e.g. "12 release(s) not DP (non-private)"."""
        return ", ".join(f"{n} release(s) {label}" for label, n in self.not_dp.items())

    def as_dict(self) -> dict:
        return asdict(self) | {"guarantee": self.guarantee}


def compose_entries(entries: list[LedgerEntry], delta: float = 1e-5, fresh: bool = False,
                    filter_only: bool = False, max_distinct: int | None = None) -> LedgerTotal:
    """Compose what counts of one dataset; ``delta`` is what the DP-SGD part spends. Identical mechanisms compose as
    one k-fold composition (their steps add); ``fresh`` recomposes past every cache and store (``--verify``);
    ``filter_only`` computes the Renyi filter alone (what a budget binds on; PRV and PLD are then None and the
    claimed total is the filter's); ``max_distinct``: PRV and PLD only for at most that many distinct mechanisms, or
    where their composition is stored (:func:`~privehr.models.privacy.accounting.compose_history`)."""
    datasets = {e.dataset for e in entries}  # one source's, or (a patient's releases) several
    counted = effective_entries(entries)
    dp = [e for e in counted if e.guarantee == "dp"]
    steps: Counter = Counter()
    for e in dp:
        if e.mechanism in GAUSSIAN_MECHANISMS:  # T1 then T2 steps of one mechanism are T1 + T2 steps of it
            steps[(e.noise_multiplier, e.sample_rate)] += e.steps
    history = [(sigma, q, t) for (sigma, q), t in steps.items()]
    if filter_only:
        rdp = rdp_epsilon(history, delta, stored=not fresh) if history else 0.0
        c = Composition(None, rdp, None, None, 0.0)
    elif fresh:
        c = recompose_history(history, delta, eps_error=0.01)
    else:
        c = compose_history(history, delta, eps_error=0.01, max_distinct=max_distinct)
    other = [e for e in dp if e.mechanism not in GAUSSIAN_MECHANISMS]
    eps_other, delta_other = sum(e.epsilon for e in other), sum(e.delta for e in other)
    not_dp = dict(Counter(GUARANTEES[e.guarantee] for e in counted if e.guarantee != "dp"))
    counts = dict(Counter(e.mechanism for e in counted))
    epsilon_dp = c.claimed + eps_other
    return LedgerTotal(
        dataset=next(iter(datasets)) if len(datasets) == 1 else "", releases=sum(e.status == "released" for e in counted),
        pending=sum(e.status == "reserved" for e in counted),
        delta=(delta if history else 0.0) + delta_other, dp=not not_dp,
        epsilon=None if not_dp else epsilon_dp, epsilon_dp=epsilon_dp,
        epsilon_dp_prv=None if c.prv is None else c.prv + eps_other, epsilon_dp_rdp=c.rdp + eps_other,
        epsilon_dp_pld=None if c.pld is None else c.pld + eps_other,
        epsilon_other_basic=eps_other, delta_other=delta_other, counts=counts, not_dp=not_dp,
        unproven_epsilon_tilde=[e.epsilon for e in counted if e.mechanism == "expm_nf"],
        distinct_mechanisms=len(history))


# The ledger's hash chain (Crosby and Wallach 2009, "Efficient Data Structures for Tamper-Evident Logging"; the
# append-only logs of Certificate Transparency, RFC 6962): entry n carries t_n = HMAC_k("privehr-ledger-v1", t_{n-1},
# n, content_n), with t_0 the SHA-256 of the unchained lines an older ledger already held. Without the key k, an
# edited, deleted, reordered or inserted entry changes a tag no one can recompute; the head (the number of lines and
# the last tag, under the same key) finds lines cut from the end.
CHAIN_FIELDS = ("seq", "chain")  # a chained line's own fields: its line number and its tag


def chain_start(unchained: str) -> str:
    """t_0: SHA-256 of the lines written before the chain began (an empty string for a new ledger).

    >>> chain_start("")[:16]
    'e3b0c44298fc1c14'
    """
    return hashlib.sha256(unchained.encode()).hexdigest()


def _canonical_json(content: dict) -> bytes:
    return json.dumps({k: v for k, v in content.items() if k not in CHAIN_FIELDS}, sort_keys=True,
                      separators=(",", ":"), allow_nan=False).encode()


def chain_tag(key: bytes, previous: str, seq: int, content: dict) -> str:
    """t_n = HMAC-SHA256_k(domain, t_{n-1}, n, the entry's canonical JSON without its chain fields).

    >>> t1 = chain_tag(bytes(32), chain_start(""), 1, {"epsilon": 1.0})
    >>> t1 == chain_tag(bytes(32), chain_start(""), 1, {"epsilon": 1.0, "chain": t1}) != chain_tag(
    ...     bytes(32), chain_start(""), 1, {"epsilon": 0.1})
    True
    """
    message = b"privehr-ledger-v1\n" + previous.encode() + b"\n" + str(seq).encode() + b"\n" + _canonical_json(content)
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def head_tag(key: bytes, lines: int, last: str) -> str:
    """The head's MAC over (number of lines, last tag): a head rewritten to an earlier length does not verify."""
    return hmac.new(key, f"privehr-ledger-head-v1\n{lines}\n{last}".encode(), hashlib.sha256).hexdigest()


WEAK = "weak"


def guarantee_label(guarantee: str, epsilon: float | None, ceiling: float | None) -> str:
    """How a release is named: its guarantee's label, and "DP (weak: ...)" for a DP release whose epsilon is above the
    ceiling (``privacy.epsilon_ceiling``, admitted only under ``privacy.allow_above_ceiling``).

    >>> guarantee_label("dp", 1.0, 20), guarantee_label("dp", 1e9, 20)
    ('DP', 'DP (weak: epsilon above the ceiling 20)')
    """
    label = GUARANTEES[guarantee]
    if guarantee == "dp" and epsilon is not None and ceiling is not None and epsilon > ceiling:
        return f"{label} ({WEAK}: epsilon above the ceiling {ceiling:g})"
    return label
