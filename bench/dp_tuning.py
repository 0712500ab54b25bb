"""What DP hyperparameter tuning costs and buys: fixed settings, a search chosen by DP dev scores, and one chosen by
the exact dev AUROC (not DP), on the data of ``bench/end_to_end_dp.py``.

Runs privehr-pipeline three times on one simulated MIMIC-Extract file (``--stays`` 2000, seed ``--seed`` 11, as
``end_to_end_dp.py``; the settings are the config's defaults, fixed before any run), everything else equal (both
labels, LR and GRU-D by DP-SGD at epsilon 1, ``--seeds`` fits per cell, public featurizer, DP record counts):

* ``fixed``: ``training.search_budget: 1`` (the defaults, no search);
* ``dp``: ``search_budget: --budget`` (4), ``training.tuning: dp`` (each trial scored by noisy dev score histograms
  at ``search_score_epsilon`` 0.5; trials, scores and the final fit composed in the ledger);
* ``exact``: the same search, chosen by the exact dev AUROC (``tuning: exact``: the tuned model is not DP).

Reports per variant the median exact test AUROC of each cell (the internal evaluation) and the release bundle's
total epsilon by PRV (all four seed-0 models, their DP evaluations and the record counts), and, per DP-tuned cell,
the tuning procedure's epsilon (its K trials, K scores and final fit) by our composition (PRV and RDP, the
ledger's) beside what Papernot and Steinke (2022, "Hyperparameter Tuning with Renyi Differential Privacy", ICLR)
would charge for the same trial run a Poisson number of times with mean K and the best kept (RDP only:
dp_accounting's ``RepeatAndSelectDpEvent``, shape inf), then the final fit composed. That bound is for a procedure
privehr does not run (a random number of trials); it is printed for comparison only. Liu and Talwar (2019,
"Private Selection from Private Candidates", STOC) give the (epsilon, delta) analogue.

Writes ``bench/results/dp_tuning.json`` (a suffix names non-default variants) and prints it.

    python bench/dp_tuning.py [--stays 2000] [--seed 11] [--seeds 3] [--budget 4] [--variants fixed dp exact]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = {"fixed": {"search_budget": 1}, "dp": {"tuning": "dp"}, "exact": {"tuning": "exact"}}


def papernot_steinke_rdp(trial: list, score, fit, mean: float, delta: float) -> float:
    """Epsilon (RDP accountant) of: RepeatAndSelect(trial then its score; Poisson, mean ``mean``), then the final fit.
    ``trial``/``fit``: ledger entries of DP-SGD releases (sigma, q, T); ``score``: the Gaussian score's entry."""
    import dp_accounting
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    def sgd(e):
        return dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(e.sample_rate, dp_event.GaussianDpEvent(e.noise_multiplier)), e.steps)

    assert len({(e.noise_multiplier, e.sample_rate, e.steps) for e in trial}) == 1  # every trial has one plan
    one = dp_event.ComposedDpEvent([sgd(trial[0]), dp_event.GaussianDpEvent(score.noise_multiplier)])
    accountant = RdpAccountant()
    accountant.compose(dp_event.RepeatAndSelectDpEvent(one, mean, math.inf))
    accountant.compose(sgd(fit))
    assert isinstance(accountant, dp_accounting.PrivacyAccountant)
    return float(accountant.get_epsilon(delta))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stays", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=tuple(VARIANTS))
    args = parser.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    from privehr.core.config import PipelineConfig
    from privehr.core.run_layout import RunLayout
    from privehr.flows.pipeline import pipeline
    from privehr.io.demo_data import write_demo_mimic
    from privehr.io.ledger import read_ledger
    from privehr.models.privacy.ledger import compose_entries

    tmp = Path(tempfile.mkdtemp(prefix="privehr-tuning-"))
    data = tmp / "all_hourly_data.h5"
    write_demo_mimic(data, n_stays=args.stays, seed=args.seed)
    out = {"stays": args.stays, "data_seed": args.seed, "fits_per_cell": args.seeds, "search_budget": args.budget,
           "epsilon": 1.0, "labels": ["mort_icu", "los_3"], "variants": {}}
    with prefect_test_harness(server_startup_timeout=180):
        for variant in args.variants:
            training = {"methods": ["dp_sgd"], "seeds": args.seeds, "dp_sgd": {"epsilons": [1.0]},
                        "search_budget": args.budget, **VARIANTS[variant]}
            ledger = tmp / f"ledger-{variant}.jsonl"
            config = PipelineConfig.model_validate({
                "data": {"hdf5_path": str(data)}, "labels": out["labels"], "device": "cpu", "training": training,
                "versioning": {"dvc": False}, "artifacts_dir": str(tmp / "runs"), "run_id": variant,
                "privacy": {"ledger_path": str(ledger)}})
            start = time.perf_counter()
            summary = pipeline(config)
            run = Path(summary["run_dir"])
            metrics = json.loads((run / "metrics.json").read_text())
            card = json.loads((run / "release" / "card.json").read_text())
            entries = {e.release: e for e in read_ledger(ledger) if e.status == "released"}
            result = {
                "seconds": round(time.perf_counter() - start, 1),
                "median_test_auroc": {f"{r['label']}-{r['model']}": r["auroc_median"] for r in metrics["results"]},
                "bundle_epsilon_prv": card["privacy"]["epsilon_prv"],
                "bundle_epsilon_rdp": card["privacy"]["epsilon_rdp"], "bundle_releases": card["privacy"]["releases"],
                "guarantee": card["privacy"]["guarantee"]}
            if variant == "dp":
                delta = config.privacy.delta
                tuning = {}
                for model in card["models"]:
                    search = json.loads(RunLayout(run).search(model["cell_id"]).read_text())
                    trials = [entries[t["release"]] for t in search["trials"]]
                    scores = [entries[t["score_release"]] for t in search["trials"]]
                    fit = entries[model["release"]]
                    ours = compose_entries([*trials, *scores, fit], delta)
                    tuning[model["cell_id"]] = {
                        "trials": len(trials), "trial_epsilon": trials[0].epsilon, "score_epsilon": scores[0].epsilon,
                        "ours_epsilon_prv": ours.epsilon_dp_prv, "ours_epsilon_rdp": ours.epsilon_dp_rdp,
                        "fit_alone_epsilon_prv": fit.epsilon_prv,
                        "papernot_steinke_poisson_rdp": papernot_steinke_rdp(trials, scores[0], fit, len(trials),
                                                                             delta),
                        "noisy_dev_auroc": [t["noisy_dev_auroc"] for t in search["trials"]],
                        "exact_dev_auroc_unused": [t["exact_dev_auroc_unused"] for t in search["trials"]],
                        "chosen_trial": [t["hyperparameters"] for t in search["trials"]].index(search["chosen"])}
                result["tuning_per_bundled_cell"] = tuning
            out["variants"][variant] = result
            print(json.dumps({variant: result}), file=sys.stderr)
    RESULTS.mkdir(exist_ok=True)
    default = args.variants == list(VARIANTS) and args.budget == 4
    (RESULTS / f"dp_tuning{'' if default else '_' + '_'.join(args.variants) + f'_k{args.budget}'}.json").write_text(
        json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
