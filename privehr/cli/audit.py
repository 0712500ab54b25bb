"""``privehr audit``: LiRA and the one-run audit of a finished privehr-pipeline run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from privehr.cli.common import emit, no_prefect_analytics
from privehr.core.config import AuditConfig, Label
from privehr.core.config.base import BUILTIN_METHODS
from privehr.core.errors import settings_error

__all__ = ["add_audit_parser"]


def add_audit_parser(sub, common: argparse.ArgumentParser) -> None:
    audit = sub.add_parser("audit", parents=[common], help="LiRA and one-run audit of a finished run")
    audit.add_argument("run_dir", type=Path, help="artifacts/<run-id> of a privehr-pipeline run")
    audit.add_argument("--shadows", type=int, default=16)
    audit.add_argument("--epsilon", type=float, default=1.0, help="target epsilon of the DP-SGD and DP-trained ExpM "
                                                                  "shadows, and ExpM+NF's eps~")
    audit.add_argument("--mechanisms", nargs="+", metavar="METHOD",
                       default=AuditConfig.model_fields["mechanisms"].get_default(call_default_factory=True),
                       help="how the shadows are trained, by training method (ExpM ones by the audited run's "
                            f"settings): {', '.join(BUILTIN_METHODS)}, or any other registered")
    audit.add_argument("--label", choices=get_args(Label), default="mort_icu")
    audit.set_defaults(func=audit_command)


def audit_command(args) -> int:
    try:
        config = AuditConfig(run_dir=args.run_dir, shadows=args.shadows, epsilon=args.epsilon, label=args.label,
                             mechanisms=args.mechanisms)
    except ValueError as err:
        raise settings_error(err, "audit options") from None
    from privehr.models.methods import get_method  # deferred for start-up time (torch)

    for name in config.mechanisms:  # found by name: an unknown one is one line, before anything is reserved
        get_method(name)
    no_prefect_analytics()
    from privehr.flows.audit import audit  # deferred for start-up time (prefect, torch)

    report = audit(config)
    lines = [f"membership-inference audit of {args.run_dir} ({report['shadows']} shadows, "
             f"population {report['population']} training stays, label {report['label']})"]
    for mech, e in report["mechanisms"].items():
        lines.append(f"  {mech}: LiRA online AUC {e['online']['auc']['median']:.3f}, TPR at FPR 1e-3 "
                     f"{e['online']['tpr_at_fpr_0.001']['median']:.4f}, "
                     f"at 1e-2 {e['online']['tpr_at_fpr_0.01']['median']:.4f}; "
                     f"one-run epsilon >= {e['one_run']['epsilon_lower']:.3f} (ceiling {e['one_run']['ceiling']:.2f})")
    lines.append(f"  files: {args.run_dir}/audit/audit.json, lira_roc.png")
    emit(args, report, "\n".join(lines))
    return 0
