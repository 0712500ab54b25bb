"""What a cold noise calibration costs: Opacus's RDP bisection (``get_noise_multiplier``, its series summed a term at
a time in Python) against the same bisection on the vectorised series (models/privacy/sampled_gaussian_rdp.py), and
the whole calibration (RDP, then PRV and PLD at the chosen sigma) as a budget check makes it, in one run.

The configurations are the plans the test suite and the demo make most (q = 1/2 from 2-4 batches, q = 1/7, q = 1/17,
synthesis's q = 0.05 over 200 steps): each printed with both sigmas, which must be equal, and process CPU seconds.

    python bench/calibration_speed.py [--out bench/results/calibration_speed.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings

CONFIGS = [(1.0, 0.5, 2), (10.0, 0.5, 10), (4.0, 0.5, 1000), (1.0, 1 / 7, 14), (2.0, 0.125, 16), (1.0, 1 / 17, 85),
           (0.5, 0.05, 200), (10.0, 0.05, 200)]
DELTA = 1e-5


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from opacus.accountants.utils import get_noise_multiplier

    from privehr.models.privacy import accounting
    from privehr.models.privacy.accounting import DEFAULT_ALPHAS, RDP_ORDERS, _calibrate, _sigma_for, _tolerance

    accounting.use_store(None)  # cold: no stored calibration
    _calibrate(1.0, DELTA, 0.3, 3)  # imports (torch, Opacus, dp-accounting) outside the timings
    rows = []
    for epsilon, q, steps in CONFIGS:
        def opacus():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for alphas in (DEFAULT_ALPHAS, RDP_ORDERS):
                    try:
                        return get_noise_multiplier(target_epsilon=epsilon, target_delta=DELTA, sample_rate=q,
                                                    steps=steps, accountant="rdp",
                                                    epsilon_tolerance=_tolerance(epsilon), alphas=alphas)
                    except ValueError:
                        continue
        theirs, t_opacus = _cpu(opacus)
        ours, t_ours = _cpu(lambda: _sigma_for("rdp", epsilon, DELTA, q, steps))
        spend, t_whole = _cpu(lambda: _calibrate(epsilon, DELTA, q, steps))
        rows.append({"epsilon": epsilon, "sample_rate": q, "steps": steps, "sigma_opacus": theirs, "sigma": ours,
                     "same_sigma": theirs == ours, "rdp_bisection_opacus_s": round(t_opacus, 3),
                     "rdp_bisection_vectorised_s": round(t_ours, 3), "speed_up": round(t_opacus / t_ours, 1),
                     "whole_calibration_s": round(t_whole, 3), "epsilon_prv": spend.epsilon_prv,
                     "epsilon_rdp": spend.epsilon_rdp})
    out = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "delta": DELTA, "rows": rows,
           "rdp_bisection_opacus_s": round(sum(r["rdp_bisection_opacus_s"] for r in rows), 2),
           "rdp_bisection_vectorised_s": round(sum(r["rdp_bisection_vectorised_s"] for r in rows), 2),
           "whole_calibrations_s": round(sum(r["whole_calibration_s"] for r in rows), 2),
           "all_same_sigma": all(r["same_sigma"] for r in rows)}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
