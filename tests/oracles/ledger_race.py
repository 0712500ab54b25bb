"""A process that reserves a release in a ledger at a barrier (tests/flows/test_privacy_attacks.py: two runs at
once). A module of its own, importing only the ledger: a spawned process imports the module its target lives in,
and the test module's imports (the pipeline, Prefect, torch, Great Expectations) cost each process about 15 CPU
seconds before it reached the barrier."""

import multiprocessing

from privehr.core.errors import InputError
from privehr.io.ledger import Ledger, reserve


def reserve_at_the_barrier(ledger: str, budget: float, plan, barrier, results) -> None:
    barrier.wait()  # both runs check at the same moment
    try:
        reserve(Ledger(ledger), "dataset-1", f"run-{multiprocessing.current_process().name}",
                {"fit": plan.ledger_entry("dp", "final fit")}, budget, 1e-5, False, "grid release(s)")
        results.put("reserved")
    except InputError as err:  # the message, and what the refused run saw before its own release (not in the message)
        verdict = getattr(err, "verdict", None)
        results.put(f"{err} [saw {verdict.before if verdict is not None else None}]")
