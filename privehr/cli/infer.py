"""``privehr infer``: private posterior inference (Su et al. 2023, Section 4), DP-NF-VI and VI on DP synthetic
data beside the exact posterior."""

from __future__ import annotations

import argparse
from pathlib import Path

from privehr.cli.common import add_release_run_options, emit, no_prefect_analytics, release_run_settings
from privehr.core.errors import settings_error
from privehr.core.inference_config import InferenceConfig

__all__ = ["add_infer_parser"]


def add_infer_parser(sub, common: argparse.ArgumentParser) -> None:
    infer = sub.add_parser("infer", parents=[common], help="private posterior inference (Su et al. 2023, Section "
                           "4): DP-NF-VI and VI on DP synthetic data beside the exact posterior (Tables 6-7)")
    infer.add_argument("--config", type=Path, help="YAML of InferenceConfig settings")
    infer.add_argument("--data", type=Path, help="CSV of records, one row per subject (default: simulate the "
                                                 "paper's design)")
    infer.add_argument("--model", help="registered likelihood (default nonlinear_repeated_measures)")
    infer.add_argument("--subjects", type=int, help="simulated subjects (default 6000)")
    infer.add_argument("--mu", type=float, nargs="+", help="mu-GDP budgets (default 6.68 1.12 0.50 0.27)")
    infer.add_argument("--runs", type=int, help="releases per column (default 5)")
    infer.add_argument("--routes", nargs="+", choices=("dp_nf_vi", "synthetic_vi"))
    infer.add_argument("--losses", nargs="+", choices=("free_energy", "tempered"), help="DP-NF-VI losses")
    infer.add_argument("--temperature", type=float, help="tau of the tempered loss (default 0.1)")
    infer.add_argument("--steps", type=int, help="VI steps T (default 8000)")
    infer.add_argument("--draws", type=int, help="Monte Carlo draws per step (default 1000)")
    infer.add_argument("--density-steps", type=int, help="DP-NF steps of route (b) (default 8000)")
    infer.add_argument("--datasets", type=int, help="synthetic tables per DP-NF (default 5)")
    infer.add_argument("--no-non-private", action="store_true", help="no exact posterior and no non-private NF-VI")
    add_release_run_options(infer, "finished fits are not redone")
    infer.set_defaults(func=infer_command)


def infer_command(args) -> int:
    raw = release_run_settings(
        args, {"data_path": args.data, "model": args.model, "subjects": args.subjects, "mus": args.mu,
               "runs": args.runs, "routes": args.routes, "losses": args.losses, "temperature": args.temperature},
        (("vi", "steps", args.steps), ("vi", "draws", args.draws), ("synthetic", "datasets", args.datasets),
         ("synthetic.density", "steps", args.density_steps)))
    try:
        config = InferenceConfig.model_validate(raw)
    except ValueError as err:
        raise settings_error(err, "infer settings (--config and options)", raw) from None
    no_prefect_analytics()
    from privehr.flows.private_inference import private_inference  # deferred for start-up time (prefect, torch)

    summary = private_inference(config, args.device)
    lines = [f"{summary['releases']} posterior(s) of {', '.join(summary['parameters'])}"]
    for key, column in summary["columns"].items():
        not_dp = [g for g in column["guarantee"] if g != "DP"] if "privacy" in column else []
        eps = (f", epsilon {column['privacy']['epsilon_prv']:.2f}" + (f" ({', '.join(not_dp)})" if not_dp else "")
               if "privacy" in column else "")
        means = " ".join(f"{v:.3f}" for v in column["runs"]["mean"]["mean"])
        versus = (f"; correlation RMSE vs exact {column['vs_exact']['correlation_rmse']:.3f}"
                  if "vs_exact" in column and key != "exact" else "")
        lines.append(f"  {key}{eps}: posterior mean {means}{versus}")
    lines += [f"  report: {summary['report']}", f"run directory: {summary['run_dir']}"]
    emit(args, summary, "\n".join(lines))
    return 0
