"""``privehr synthesize``: DP-NF synthetic data from an EHR table (validate, MICE, DP-NF per budget, utility and
fidelity report)."""

from __future__ import annotations

import argparse
from pathlib import Path

from privehr.cli.common import add_release_run_options, emit, no_prefect_analytics, release_run_settings
from privehr.core.config import SynthesisConfig
from privehr.core.errors import InputError, settings_error

__all__ = ["add_synthesize_parser"]


def add_synthesize_parser(sub, common: argparse.ArgumentParser) -> None:
    synth = sub.add_parser("synthesize", parents=[common], help="DP-NF synthetic data from an EHR table: validate, "
                           "MICE, DP-NF per budget, utility and fidelity report")
    synth.add_argument("--data", type=Path, help="the table (default data/ehr/EHR_dataset.csv)")
    synth.add_argument("--spec", help="spec name or YAML path (default harrod_ehr)")
    synth.add_argument("--config", type=Path, help="YAML of SynthesisConfig settings")
    defaults = SynthesisConfig.model_fields
    mus, epsilons = (" ".join(f"{v:g}" for v in defaults[k].get_default(call_default_factory=True))
                     for k in ("mus", "epsilons"))
    synth.add_argument("--mu", type=float, nargs="+", help=f"mu-GDP budgets (default {mus}; with only --epsilon "
                                                          "given, none)")
    synth.add_argument("--epsilon", type=float, nargs="+", help=f"(epsilon, delta) budgets (default {epsilons}; "
                                                               "with only --mu given, none)")
    synth.add_argument("--m", type=int, help="MICE imputations")
    synth.add_argument("--runs", type=int, help="flows per imputation and budget")
    synth.add_argument("--releases", type=int, help="synthetic tables per flow")
    synth.add_argument("--iterations", type=int, help="MICE rounds")
    synth.add_argument("--steps", type=int, help="DP-SGD steps T (of every flow synthesizer)")
    synth.add_argument("--synthesizers", nargs="+", metavar="NAME",
                       help="maf: DP-NF; hflow: DP-HFlow (mixed types); aim, mst: marginal-based; aim_dyadic: AIM "
                            "plus DP values within its bins (the marginal ones: epsilon budgets); or any other "
                            "registered. Default: aim_dyadic for a table with a discrete attribute, maf for an "
                            "all-numeric one")
    synth.add_argument("--classification-target", help="binary column of the utility classifiers (default: the "
                                                       "spec's targets.classification)")
    synth.add_argument("--regression-target", help="numeric column of the random forest (default: the spec's)")
    synth.add_argument("--exclude", nargs="+", help="columns left out of the utility models' inputs (default: the "
                                                    "spec's targets.excluded_features)")
    synth.add_argument("--no-non-private", action="store_true", help="no non-private comparison flow (mu = inf)")
    add_release_run_options(synth, "trained flows are not retrained")
    synth.set_defaults(func=synthesize_command)


def synthesize_command(args) -> int:
    raw = release_run_settings(args, {"path": args.data, "spec": args.spec, "runs": args.runs,
                                      "releases": args.releases, "mus": args.mu, "epsilons": args.epsilon,
                                      "synthesizers": args.synthesizers,
                                      "classification_target": args.classification_target,
                                      "regression_target": args.regression_target,
                                      "excluded_features": args.exclude},
                               (("mice", "m", args.m), ("mice", "max_iter", args.iterations),
                                ("dpnf", "steps", args.steps), ("hflow", "steps", args.steps)))
    if (args.mu is None) != (args.epsilon is None):  # budgets given on the command line are the whole grid
        raw.setdefault("mus" if args.mu is None else "epsilons", [])
    try:
        config = SynthesisConfig.model_validate(raw)
    except ValueError as err:
        raise settings_error(err, "synthesize settings (--config and options)", raw) from None
    # deferred for start-up time (prefect, torch, pandas)
    from privehr.tasks.synthesis import check_synthesis_inputs, check_synthesis_table
    from privehr.tasks.versioning import pull_inputs

    check_synthesis_inputs(config)  # targets, bounds, baselines: one line now, not after a budget is spent
    pull_inputs.fn([str(config.path)])  # a fresh clone: fetch the versioned table first
    if not Path(config.path).exists():
        raise InputError(f"EHR table not found: {config.path}; pass --data, or write the demo table with "
                         "`privehr demo-data ehr --out data/ehr/EHR_dataset.csv`")
    check_synthesis_table(config)  # the ledger's chain, the table's layout and quarantine: before Prefect starts
    no_prefect_analytics()
    from privehr.flows.synthesis import synthesize_ehr  # deferred for start-up time (prefect, torch)

    summary = synthesize_ehr(config, args.device)
    means = lambda key: ", ".join(f"{b} {v:.2f}" for b, v in summary[key].items())  # noqa: E731
    target = summary["targets"]["classification"]
    emit(args, summary, "\n".join([
        f"{summary['flows']} releases ({', '.join(summary['synthesizers'])}), {summary['tables']} synthetic tables",
        *(f"  warning: {note}" for note in summary.get("empty_releases", [])),  # spent, not scored, not bundled
        *([f"  mean TSTR AUROC for {target} (nine classifiers; train on synthetic, test on real) by budget: "
           f"{means('mean_tstr_auroc_by_budget')}",
           f"  mean SVM accuracy for {target} by budget: {means('mean_svm_accuracy_by_budget')}"] if target else
          ["  no classification target: fidelity only (name one under the spec's targets)"]),
        f"  report: {summary['report']}", f"run directory: {summary['run_dir']}"]))
    return 0
