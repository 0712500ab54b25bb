"""Neighbouring relations: what an add/remove-one guarantee is worth when the number of records is public.

Every accountant here (:mod:`privehr.models.privacy.accounting`) bounds epsilon under add/remove-one neighbours
(unbounded DP): two datasets are neighbours when one holds one more record. A release that also carries the exact
number of records is not DP under that relation at all (the count tells the two apart), but it is under
replace-one neighbours (bounded DP: same size, one record replaced), since a replacement is a removal followed by an
addition. Group privacy of size two turns the add/remove total into the replace-one one (Dwork and Roth, "The
Algorithmic Foundations of Differential Privacy", 2014, Theorem 2.2, with the delta of the chained inequality):

    (epsilon, delta) under add/remove-one  =>  (2 epsilon, (1 + e^epsilon) delta) under replace-one.

It is an upper bound: a replace-one accountant of each mechanism (DP-SGD's sum moves by 2C, not C) can be tighter,
never looser. Not covered: a patient with several records (ICU stays) is protected per record; that is group
privacy again, of the size of their records.

>>> eps, delta = group_privacy(1.0, 1e-5, 2)
>>> eps, round(delta / 1e-5, 6)  # 1 + e
(2.0, 3.718282)
>>> neighbouring_relation(1.0, 1e-5, "patient", count_public=False)["relation"]
'add/remove one patient'
>>> replaced = neighbouring_relation(1.0, 1e-5, "patient", count_public=True)
>>> replaced["relation"], replaced["epsilon"], round(replaced["delta"], 9)
('replace one patient', 2.0, 3.7183e-05)
"""

from __future__ import annotations

import math

__all__ = ["group_privacy", "neighbouring_relation"]


def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    """The (epsilon, delta) of datasets k add/remove steps apart: (k epsilon, delta * sum_{i<k} e^(i epsilon))."""
    if k < 1:
        raise ValueError("a group holds at least one record")
    if not (epsilon >= 0 and delta >= 0):
        raise ValueError("epsilon and delta are non-negative")
    return k * epsilon, delta * sum(math.exp(i * epsilon) for i in range(k))


def neighbouring_relation(epsilon: float | None, delta: float, unit: str, count_public: bool,
                          within: str | None = None, records: int | None = None) -> dict:
    """The relation a bundle's guarantee holds under, for its claimed add/remove-one total (``epsilon``, ``delta``;
    epsilon None where the total is not DP): add/remove one ``unit``, or, where the bundle carries the exact count of
    ``unit`` records, replace one ``unit`` with the total group privacy gives it (``within``: the replacement stays in
    that part, where the counts of several parts are shipped). Where that delta is 1/``records`` or more (a delta
    that allows publishing a record outright), the relation holds no meaningful guarantee: ``meaningful`` False and
    no epsilon, never a "DP" with it.

    >>> none = neighbouring_relation(16.8, 1e-5, "patient", count_public=True, records=84)
    >>> none["meaningful"], none["epsilon"], none["delta"]
    (False, None, None)
    """
    if not count_public:
        return {"relation": f"add/remove one {unit}", "why": f"the {unit} count is not released exactly"}
    out = {"relation": f"replace one {unit}" + (f" within {within}" if within else ""),
           "why": f"the exact {unit} count is public and shipped, so datasets of other sizes are told apart by it; "
                  "the add/remove-one total holds for a replacement as group privacy of two (2 epsilon, "
                  "(1 + e^epsilon) delta)"}
    if epsilon is None or not math.isfinite(epsilon):
        return out | {"epsilon": None, "delta": None}
    eps, dlt = group_privacy(epsilon, delta, 2)
    if records is not None and dlt * records >= 1:
        return out | {"epsilon": None, "delta": None, "meaningful": False,
                      "why": out["why"] + f"; at epsilon {epsilon:.3g} that delta is {dlt:.2g}, not below one over the "
                             f"{records} {unit}s: no meaningful guarantee at this epsilon"}
    return out | {"epsilon": eps, "delta": dlt}
