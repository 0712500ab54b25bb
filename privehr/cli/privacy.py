"""``privehr privacy ledger`` (the epsilon each dataset has spent, composed) and ``privehr privacy convert``
(sigma <-> mu-GDP <-> (epsilon, delta) for Poisson-subsampled Gaussian steps)."""

from __future__ import annotations

import argparse
from pathlib import Path

from privehr.cli.common import config_from, emit
from privehr.core.errors import InputError

__all__ = ["add_privacy_parser"]


def add_privacy_parser(sub, common: argparse.ArgumentParser) -> None:
    privacy = sub.add_parser("privacy", help="privacy accounting")
    privacy_sub = privacy.add_subparsers(dest="privacy_command", required=True)
    ledger = privacy_sub.add_parser("ledger", parents=[common], help="the epsilon each dataset has spent, composed")
    ledger.add_argument("--ledger", type=Path, help="ledger file (default: privacy.ledger_path of the config)")
    ledger.add_argument("--delta", type=float, help="delta at which DP-SGD releases are composed (default: "
                                                    "privacy.delta of the config)")
    ledger.add_argument("--config", type=Path)
    ledger.add_argument("--budget", type=float, help="count the patients who have reached this epsilon (default: "
                                                     "privacy.budget_epsilon of the config)")
    ledger.add_argument("--all-accountants", action="store_true", help="compose PRV and PLD however many distinct "
                        "mechanisms a source holds (by default beyond 64 not yet composed they are skipped: minutes on "
                        "a long nightly ledger; the Renyi filter, which budgets bind on, is always shown)")
    ledger.add_argument("--verify", action="store_true", help="check the ledger's hash chain and head alone: exit "
                                                              "status 0 if intact, 1 naming the first bad line")
    ledger.add_argument("--migrate", action="store_true", help="chain, once, a ledger no chain vouches for (an older "
                        "privehr's unchained lines, or an empty ledger whose key has no head); says what it chained. "
                        "Check the lines first: they are trusted as they stand")
    ledger.set_defaults(func=privacy_ledger)
    budget = privacy_sub.add_parser("budget", parents=[common], help="the project's per-patient budget, kept in the "
                                    "ledger (every release's check reads it); --set changes it (the steward's act)")
    budget.add_argument("--ledger", type=Path, help="ledger file (default: privacy.ledger_path of the config)")
    budget.add_argument("--config", type=Path)
    budget.add_argument("--set", type=float, metavar="EPSILON", help="set the per-patient budget: a first one, or a "
                        "lower one; a higher one needs --raise --reason")
    budget.add_argument("--delta", type=float, help="the ledger's delta, with its first budget (default: the delta its "
                                                    "releases were made at, else 1e-5)")
    budget.add_argument("--order", type=float, help="the Renyi filter's order, with the first budget (default: chosen "
                                                    "from epsilon and delta alone)")
    budget.add_argument("--raise", dest="raise_", action="store_true", help="allow a higher budget than the ledger's "
                        "(recorded with --reason; every patient left out is let back in)")
    budget.add_argument("--reason", default="", help="why, recorded in the ledger with the setting")
    budget.set_defaults(func=privacy_budget)
    convert = privacy_sub.add_parser("convert", parents=[common], help="sigma <-> mu-GDP <-> (epsilon, delta) for "
                                     "T Poisson-subsampled Gaussian steps")
    given = convert.add_mutually_exclusive_group(required=True)
    given.add_argument("--sigma", type=float, help="noise multiplier")
    given.add_argument("--mu", type=float, help="mu-GDP (the budgets of Su et al. 2023)")
    given.add_argument("--epsilon", type=float, help="target epsilon (sigma calibrated by PRV and RDP)")
    convert.add_argument("--sample-rate", type=float, required=True,
                         help="Poisson sampling rate q as trained (synthesize records its effective q = "
                              "1 / ceil(n / ceil(q n)) in each release)")
    convert.add_argument("--steps", type=int, required=True, help="steps T")
    convert.add_argument("--delta", type=float, default=1e-5)
    convert.set_defaults(func=privacy_convert)


def privacy_ledger(args) -> int:
    # deferred for start-up time (torch, opacus)
    from privehr.io.ledger import VIEW_MAX_DISTINCT, Ledger, ledger_delta, ledger_totals, short_dataset, source_patients

    config = config_from(args)
    path = args.ledger or config.privacy.ledger_path
    if args.verify:
        return verify_command(args, path)
    if args.migrate:
        return migrate_command(args, path)
    ledger = Ledger(path)
    state = ledger.state()
    delta = args.delta if args.delta is not None else ledger_delta(state.entries, state.budget) or config.privacy.delta
    setting = state.budget
    budget = args.budget if args.budget is not None else setting and setting.epsilon
    limit = None if args.all_accountants else VIEW_MAX_DISTINCT
    everyone = source_patients(ledger, state.entries, None, delta, setting, budget, max_distinct=limit)
    totals = ledger_totals(path, delta, budget_epsilon=budget, max_distinct=limit)
    payload = {"ledger": str(path), "delta": delta, "budget": setting and setting.as_dict(), "budget_epsilon": budget,
               "patients": everyone, "datasets": [t.as_dict() for t in totals]}
    fmt = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
    lines = [f"privacy ledger {path}: {len(totals)} source(s); "
             + (f"per-patient budget epsilon {setting.epsilon:g} at delta {setting.delta:g}, bound by the Renyi filter "
                f"at order {setting.order:g}" if setting else "no per-patient budget set")]
    if everyone:
        lines += ["  every patient, over every release that used them whatever its source: "
                  + _patients_line(everyone, budget, fmt, args.all_accountants)]
    for t in totals:
        weak = (f" (weak: above privacy.epsilon_ceiling {config.privacy.epsilon_ceiling:g})"
                if t.epsilon_dp > config.privacy.epsilon_ceiling else "")
        guarantee = (f"DP, epsilon {t.epsilon_dp:.4g} at delta {t.delta:.2g}{weak}" if t.dp else
                     f"NOT DP: {t.why_not_dp}")
        lines += [f"  source {short_dataset(t.dataset)}: {t.releases} release(s) {t.counts}"
                  + (f", {t.pending} reserved and not yet trained (counted)" if t.pending else ""),
                  f"    as if every release of this source had used every patient: {guarantee}",
                  f"    DP releases alone (DP-only total): epsilon {t.epsilon_dp:.4g} at delta {t.delta:.2g}; "
                  f"by accountant PRV {fmt(t.epsilon_dp_prv)}, RDP {fmt(t.epsilon_dp_rdp)}, PLD {fmt(t.epsilon_dp_pld)}"
                  f" (other DP by basic composition: {t.epsilon_other_basic:.4g})"
                  + (f"; PRV and PLD not composed: {t.distinct_mechanisms} distinct mechanisms, more than "
                     f"{VIEW_MAX_DISTINCT} (--all-accountants composes them, in minutes)"
                     if t.epsilon_dp_pld is None and t.distinct_mechanisms > VIEW_MAX_DISTINCT else "")]
        if t.patients:
            lines.append("    its patients, over every source's releases: "
                         + _patients_line(t.patients, budget, fmt, args.all_accountants))
        if t.unproven_epsilon_tilde:
            lines.append(f"    ExpM+NF releases (no proven guarantee; epsilon~ {t.unproven_epsilon_tilde})")
    emit(args, payload, "\n".join(lines))
    return 0


def _patients_line(p: dict, budget: float | None, fmt, all_accountants: bool) -> str:
    how = (f"the Renyi filter at order {p['accountant'].rsplit('_', 1)[-1]} (what the budget binds on)"
           if p["accountant"].startswith("renyi") else "RDP at the best order (no budget: no filter)")
    reached = "" if budget is None else (f"; {p['reached_budget']} reached the budget {budget:g}, "
                                         f"{p['within_1pc_of_budget']} are within 1 % of it")
    worst = p.get("most_spent", {})
    return (f"{p['patients']} patient(s) in {p['snapshots']} membership snapshot(s), by {how}: median "
            f"{fmt(p['median'])}, 99th percentile {fmt(p['p99'])}, maximum {fmt(p['max'])}{reached}"
            + (f"; {p['not_dp']} not DP" if p["not_dp"] else "")
            + f"; the most spent patient by PRV {fmt(worst.get('epsilon_prv'))}, PLD {fmt(worst.get('epsilon_pld'))}"
            + (" (not composed beyond the view's limit; --all-accountants)" if worst.get("epsilon_pld") is None
               and not all_accountants else ""))


def privacy_budget(args) -> int:
    """``privehr privacy budget [--set EPS]``: the project's budget as the ledger holds it, or a new setting."""
    from privehr.io.ledger import Ledger, set_budget
    from privehr.models.privacy.rdp_filter import rdp_budget

    path = args.ledger or config_from(args).privacy.ledger_path
    if args.set is None:
        if args.raise_ or args.reason or args.delta is not None or args.order is not None:
            raise InputError("--delta, --order, --raise and --reason go with --set EPSILON")
        setting, written = (Ledger(path).budget() if Path(path).exists() else None), False
    else:
        if not (0 < args.set < float("inf")):
            raise InputError(f"--set {args.set:g}: a budget is a positive, finite epsilon")
        if args.order is not None and not (1 < args.order < float("inf")):
            raise InputError(f"--order {args.order:g}: a Renyi order is a finite number above 1")
        if args.delta is not None and not (0 < args.delta < 1):
            raise InputError(f"--delta {args.delta:g}: delta is between 0 and 1")
        setting, written = set_budget(path, args.set, args.delta, args.order, args.raise_, args.reason)
    if setting is None:
        emit(args, {"ledger": str(path), "budget": None}, f"privacy ledger {path}: no per-patient budget set (runs "
             "are not held to one); set it with `privehr privacy budget --set EPSILON`")
        return 0
    said = ("recorded" if written else "unchanged") if args.set is not None else "holds"
    emit(args, {"ledger": str(path), "budget": setting.as_dict(), "written": written,
                "rdp_budget": rdp_budget(setting.epsilon, setting.delta, setting.order)},
         f"privacy ledger {path}: per-patient budget epsilon {setting.epsilon:g} at delta {setting.delta:g}, bound by "
         f"the Renyi filter at order {setting.order:g} ({said}; set by {setting.set_by} {setting.created_utc})"
         + (f"; raised from {setting.previous:g}: {setting.reason}" if setting.raised else ""))
    return 0


def verify_command(args, path: Path) -> int:
    """``privehr privacy ledger --verify``: 0 for an intact ledger, 1 naming the first line found wrong."""
    from privehr.io.ledger import verify_ledger  # deferred for start-up time (torch, opacus)

    if not Path(path).exists():
        raise InputError(f"no privacy ledger at {path}; pass --ledger PATH (or set PRIVEHR_LEDGER)")
    report = verify_ledger(path)
    if report["ok"]:
        text = (f"privacy ledger {path}: intact ({report['lines']} line(s)"
                + (f", the first {report['unchained']} written before the chain began" if report["unchained"] else "")
                + ")")
    else:
        where = f"line {report['line']}" if report["line"] is not None else "its head"
        text = f"privacy ledger {path}: TAMPERED at {where}: {report['problem']}"
    emit(args, report, text)
    return 0 if report["ok"] else 1


def migrate_command(args, path: Path) -> int:
    """``privehr privacy ledger --migrate``: chain an unchained ledger once, saying what it chained."""
    from privehr.io.ledger import migrate_ledger  # deferred for start-up time (torch, opacus)

    if not Path(path).exists():
        raise InputError(f"no privacy ledger at {path}; pass --ledger PATH (or set PRIVEHR_LEDGER)")
    report = migrate_ledger(path)
    if report["already"]:
        text = f"privacy ledger {path}: already chained and intact; nothing was written"
    else:
        span = f", written {report['first_utc']} to {report['last_utc']}" if report["first_utc"] else ""
        text = (f"privacy ledger {path}: chained {report['chained']} line(s) as they stood ({report['releases']} "
                f"release(s) of {report['datasets']} dataset(s){span}); from now on an unchained line, a missing head "
                "or an emptied file is refused as tampering")
    emit(args, report, text)
    return 0


def privacy_convert(args) -> int:
    from privehr.models.privacy.conversion import convert_budget  # deferred for start-up time (torch, opacus)

    try:
        out = convert_budget(sample_rate=args.sample_rate, steps=args.steps, delta=args.delta, sigma=args.sigma,
                             mu=args.mu, epsilon=args.epsilon)
    except (ValueError, RuntimeError) as err:
        raise InputError(f"cannot convert: {err}") from None
    fmt = lambda v: "n/a (accountant failed)" if v is None else f"{v:.4g}"  # noqa: E731
    emit(args, out, "\n".join([
        f"Poisson rate q = {out['sample_rate']:g}, T = {out['steps']} steps, delta = {out['delta']:g} "
        f"(given: {out['given']})",
        f"  noise multiplier sigma: {fmt(out['noise_multiplier'])}",
        f"  mu-GDP (CLT):           {fmt(out['mu'])}",
        f"  epsilon PRV (claimed):  {fmt(out['epsilon_prv'])}",
        f"  epsilon RDP (bound):    {fmt(out['epsilon_rdp'])}",
        f"  epsilon GDP (CLT; can underestimate): {fmt(out['epsilon_gdp'])}"]))
    return 0
