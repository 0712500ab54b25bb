"""``privehr``: the command line in front of every user-facing action.

Every command takes ``--json`` for machine-readable output. Errors in the input print one message
naming the problem and the fix (exit status 2), not a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

from privehr.core.errors import InputError
from privehr.core.strict_json import strict_dumps

__all__ = ["main"]


def _emit(args, payload: dict, text: str) -> None:
    print(strict_dumps(payload, indent=2, default=str) if args.json else text)  # strict JSON: never Infinity


def _cmd_demo_data(args) -> int:
    from privehr.io.demo_data import write_demo_mimic

    if args.out.exists() and not args.force:
        raise InputError(f"{args.out} exists; pass --force to overwrite it (raw inputs are never replaced silently).")
    summary = write_demo_mimic(args.out, args.stays, args.seed, n_variables=args.variables,
                               patients_columns=args.patients_columns, label_dtype=args.label_dtype,
                               datetime_unit=args.datetime_unit, with_codes=args.codes)
    _emit(args, summary, f"wrote {summary['path']}: {summary['stays']} stays, {summary['rows']} hourly rows, "
                         f"{summary['variables']} variables ({summary['bytes'] / 1e6:.1f} MB)")
    return 0


def _cmd_demo_ehr(args) -> int:
    from privehr.io.demo_data import write_demo_ehr

    if args.out.exists() and not args.force:
        raise InputError(f"{args.out} exists; pass --force to overwrite it (raw inputs are never replaced silently).")
    summary = write_demo_ehr(args.out, args.seed)
    _emit(args, summary, f"wrote {summary['path']}: {summary['patients']} patients x {summary['attributes']} "
                         f"attributes, {summary['missing_values']} missing values (transposed, like Harrod's file)")
    return 0


def _cmd_expectations_build(args) -> int:
    from privehr.core.specs import SPEC_DIR, load_ehr_spec, load_mimic_spec
    from privehr.io.expectation_suites import EXPECTATIONS_DIR, ehr_suite, mimic_suites, write_suites

    if args.spec:  # a user's table spec: its suite goes beside it (or to --out), where validation looks for it
        specs = [load_ehr_spec(p) for p in args.spec]
        suites = [ehr_suite(spec) for spec in specs]
        out = args.out
        if out is None and len({spec.source.resolve().parent for spec in specs}) > 1:
            raise InputError("the specs are in different directories; pass --out DIR for their suites")
        out = out or specs[0].source.parent
        source = ", ".join(str(spec.source) for spec in specs)
    else:
        suites = mimic_suites(load_mimic_spec())
        suites += [ehr_suite(load_ehr_spec(p)) for p in sorted(SPEC_DIR.glob("*.yaml")) if p.stem != "mimic_extract"]
        out, source = args.out or EXPECTATIONS_DIR, str(SPEC_DIR)
    paths = write_suites(suites, Path(out))
    counts = {s.name: len(s.expectations) for s in suites}
    _emit(args, {"suites": counts, "paths": paths},
          "\n".join([f"wrote {len(paths)} suites from {source}:"] + [f"  {p} ({counts[Path(p).stem]} expectations)"
                                                                     for p in paths]))
    return 0


def _cmd_spec_draft(args) -> int:
    from privehr.io.spec_draft import DRAFT_WARNING, draft_spec, spec_yaml

    spec, notes = draft_spec(args.table, args.name, args.max_categories)
    if args.target:
        kinds = {a["name"]: a["kind"] for a in spec["attributes"]}
        if kinds.get(args.target) != "binary":
            raise InputError(f"--target {args.target}: not a binary column of the draft (binary: "
                             f"{', '.join(n for n, k in kinds.items() if k == 'binary') or 'none'})")
        spec["targets"]["classification"] = args.target
    text = spec_yaml(spec, notes)
    if args.out:
        if args.out.exists() and not args.force:
            raise InputError(f"{args.out} exists; pass --force to overwrite it")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(f"privehr: warning: {DRAFT_WARNING}", file=sys.stderr)
    if args.json:
        print(json.dumps({"spec": spec, "notes": notes, "warning": DRAFT_WARNING,
                          "path": str(args.out) if args.out else None}, indent=2))
    elif args.out:
        print("\n".join([f"wrote {args.out}: {len(spec['attributes'])} attributes"] + [f"  - {n}" for n in notes]))
    else:
        print(text, end="")
    return 0


def _cmd_validate(args) -> int:
    from privehr.core.config import StewardConfig

    try:
        config = StewardConfig.model_validate({
            "paths": args.paths, "ehr_spec": args.ehr_spec, "artifacts_dir": args.artifacts_dir, "run_id": args.run_id,
            "validation": {"spec": args.mimic_spec, "stop_on_critical": False}})
    except ValueError as err:
        raise InputError(f"invalid validate settings: {err}") from None
    from privehr.tasks.versioning import pull_inputs

    pull_inputs.fn([str(p) for p in config.paths])  # a fresh clone: fetch versioned deliveries first
    missing = [str(p) for p in config.paths if not Path(p).exists()]
    if missing:  # before any run directory or server: nothing to validate
        raise InputError(f"delivery not found: {', '.join(missing)}; pass the path of each file to validate")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.steward import validate
    from privehr.tasks.validate import summary_markdown

    result = validate(config)
    reports = {p: json.loads(Path(r).read_text()) for p, r in result["deliveries"].items()}
    texts = [summary_markdown(r) for r in reports.values()]
    texts += [f"# {p}: not readable\n\n{e}" for p, e in result["errors"].items()]
    _emit(args, {"run_dir": result["run_dir"], "passed": not result["failed"], "deliveries": reports,
                 "errors": result["errors"]}, "\n\n".join(texts) + f"\n\nrun directory: {result['run_dir']}")
    return 1 if result["failed"] else 0


def _cmd_ehr_prepare(args) -> int:
    from privehr.core.config import EHRPrepareConfig

    try:
        mice = {k: v for k, v in {"m": args.m, "max_iter": args.iterations}.items() if v is not None}
        config = EHRPrepareConfig.model_validate({k: v for k, v in {
            "path": args.data, "spec": args.spec, "run_id": args.run_id, "artifacts_dir": args.artifacts_dir,
            "mice": mice or None}.items() if v is not None})
    except ValueError as err:
        raise InputError(f"invalid ehr-prepare settings: {err}") from None
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.ehr_prepare import ehr_prepare

    result = ehr_prepare(config)
    s = json.loads(Path(result["imputation"]).read_text())
    text = "\n".join([
        f"{s['input']} through spec {s['spec']}: {s['patients']['train']} train + {s['patients']['test']} test "
        f"patients x {len(s['attributes'])} attributes (+ derived {s['derived']})",
        f"  dropped: {', '.join(s['decisions']['dropped_attributes']) or 'none'}; quarantined: "
        f"{s['decisions']['quarantined'] or 'none'}",
        f"  MICE: {s['m']} datasets, {s['iterations']} rounds, missing after: {s['missing_after']}, within bounds: "
        f"{s['within_bounds']}, max R-hat {s['convergence']['max_rhat']}",
        f"run directory: {result['run_dir']}"])
    _emit(args, {**result, "imputation_summary": s}, text)
    return 0


def _cmd_inspect(args) -> int:
    from privehr.io.mimic_extract import inspect_extract

    s = inspect_extract(args.path, args.window_hours, args.gap_hours)
    c = s["cohort"]
    text = "\n".join([
        f"{s['path']} ({s['bytes'] / 1e6:.1f} MB)",
        f"  keys: {', '.join(s['keys'])}",
        f"  stays: {s['stays']} ({s['subjects']} subjects), hourly rows: {s['hourly_rows']}",
        f"  variables (LEVEL2): {s['variables']}, patients columns: {s['patients_columns']}",
        f"  cohort ({c['rule']}): {c['stays']} stays; label rates "
        + ", ".join(f"{k} {v:.3f}" for k, v in c["label_rates"].items()),
        f"  excluded: {c['exclusions']}",
        f"  missing fraction of first-{c['window_hours']} h means: {c['missing_fraction_first_hours_means']:.4f}"
        if c.get("missing_fraction_first_hours_means") is not None else "  (empty cohort)",
    ])
    _emit(args, s, text)
    return 0


def _config_from(args):
    from privehr.core.config import load_config

    return load_config(args.config, getattr(args, "profile", "demo"), **{
        "data.hdf5_path": getattr(args, "data", None), "run_id": getattr(args, "run_id", None),
        "artifacts_dir": getattr(args, "artifacts_dir", None), "device": getattr(args, "device", None),
        "versioning.dvc": False if getattr(args, "no_dvc", False) else None,
        "resume": True if getattr(args, "resume", False) else None})


def _cmd_config(args) -> int:
    from privehr.core.config import PipelineConfig

    if args.schema:
        print(json.dumps(PipelineConfig.model_json_schema(), indent=2))
        return 0
    config = _config_from(args)
    print(config.model_dump_json(indent=2) if args.json else _yaml(config))
    return 0


def _yaml(config) -> str:
    import yaml

    return yaml.safe_dump(json.loads(config.model_dump_json()), sort_keys=False).rstrip()


def _cmd_run(args) -> int:
    from privehr.io.mimic_extract import check_extract

    config = _config_from(args)
    if args.no_synthesis:
        config = config.model_copy(update={"synthesis": None})
    if config.versioning.dvc:  # a fresh clone: fetch the versioned inputs before checking them
        from privehr.tasks.versioning import pull_inputs

        pull_inputs.fn([str(config.data.hdf5_path)] + ([str(config.synthesis.path)] if config.synthesis else []))
    check_extract(config.data.hdf5_path)  # fail fast, before Prefect starts
    if config.synthesis is not None and not Path(config.synthesis.path).exists():
        raise InputError(f"the profile also synthesises the EHR table {config.synthesis.path}, which does not exist; "
                         "write the demo table with `privehr demo-data ehr --out data/ehr/EHR_dataset.csv`, point "
                         "synthesis.path at yours in --config, or pass --no-synthesis")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.pipeline import on_dask, pipeline
    from privehr.io.pages import page_url
    from privehr.tasks.report import curve_check_lines, results_table
    from privehr.tasks.stage_timing import timing_table

    flow = on_dask(args.dask_address, args.dask_workers) if (args.dask or args.dask_address) else pipeline
    summary = flow(config)
    versioning = summary.get("versioning", {})
    text = "\n".join([
        "", results_table(summary["results"]), "", summary["privacy_note"], "",
        *filter(None, [curve_check_lines(summary.get("dp_sgd_checks", [])).rstrip()]), f"figure: {summary['figure']}",
        f"report (calibration, intervals, subgroups): {summary['report_html']}"
        + (f" - `privehr serve`, then {page_url(summary['report_html'], config.artifacts_dir, config.pages.base_url)}"
           if config.pages.base_url else ""),
        "", "time per stage:", timing_table(summary["stage_seconds"]), "",
        f"run {summary['run_id']}: artifacts in {summary['run_dir']}/",
        f"  versioned with DVC: {versioning['dvc_file']}" if versioning.get("versioned")
        else f"  not versioned with DVC ({versioning.get('reason', 'disabled')})",
    ])
    _emit(args, summary, text)
    return 0


def _cmd_privacy_ledger(args) -> int:
    from privehr.io.privacy_ledger import ledger_totals, short_dataset

    config = _config_from(args)
    path = args.ledger or config.privacy.ledger_path
    delta = args.delta if args.delta is not None else config.privacy.delta
    totals = ledger_totals(path, delta)
    payload = {"ledger": str(path), "delta": delta, "datasets": [t.as_dict() for t in totals]}
    fmt = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
    lines = [f"privacy ledger {path}: {len(totals)} dataset(s)"]
    for t in totals:
        guarantee = (f"DP, epsilon {t.epsilon_dp:.4g} at delta {t.delta:.2g}" if t.dp else
                     f"NOT DP: {t.why_not_dp}")
        lines += [f"  dataset {short_dataset(t.dataset)}: {t.releases} release(s) {t.counts}"
                  + (f", {t.pending} reserved and not yet trained (counted)" if t.pending else ""),
                  f"    total guarantee: {guarantee}",
                  f"    DP releases alone (DP-only total): epsilon {t.epsilon_dp:.4g} at delta {t.delta:.2g}; "
                  f"by accountant PRV {fmt(t.epsilon_dp_prv)}, RDP {fmt(t.epsilon_dp_rdp)}, PLD {fmt(t.epsilon_dp_pld)}"
                  f" (other DP by basic composition: {t.epsilon_other_basic:.4g})"]
        if t.unproven_epsilon_tilde:
            lines.append(f"    ExpM+NF releases (no proven guarantee; epsilon~ {t.unproven_epsilon_tilde})")
    _emit(args, payload, "\n".join(lines))
    return 0


def _cmd_serve(args) -> int:
    import urllib.parse

    from privehr.core.config import DEFAULT_PAGES_PORT
    from privehr.io.pages import PRIVATE_PARTS, serve_artifacts

    config = _config_from(args)
    root = config.artifacts_dir
    if not Path(root).is_dir():
        raise InputError(f"{root} is not a directory; pass the artifacts directory (runs are artifacts/<run-id>/)")
    default_port = urllib.parse.urlsplit(config.pages.base_url).port if config.pages.base_url else None
    port = args.port if args.port is not None else (default_port or DEFAULT_PAGES_PORT)
    try:
        server = serve_artifacts(root, args.host, port)
    except OSError as err:
        raise InputError(f"cannot listen on {args.host}:{port} ({err.strerror}); pass another --port and set "
                         "pages.base_url to match") from None
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    _emit(args, {"serving": str(Path(root).resolve()), "url": url,
                 "not_served": sorted(PRIVATE_PARTS)},
          f"serving {Path(root).resolve()} at {url} (reports, Data Docs; never intermediate/ or quarantine/); "
          "Ctrl-C stops")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _cmd_privacy_convert(args) -> int:
    from privehr.models.budget_conversion import convert_budget

    try:
        out = convert_budget(sample_rate=args.sample_rate, steps=args.steps, delta=args.delta, sigma=args.sigma,
                             mu=args.mu, epsilon=args.epsilon)
    except (ValueError, RuntimeError) as err:
        raise InputError(f"cannot convert: {err}") from None
    fmt = lambda v: "n/a (accountant failed)" if v is None else f"{v:.4g}"  # noqa: E731
    _emit(args, out, "\n".join([
        f"Poisson rate q = {out['sample_rate']:g}, T = {out['steps']} steps, delta = {out['delta']:g} "
        f"(given: {out['given']})",
        f"  noise multiplier sigma: {fmt(out['noise_multiplier'])}",
        f"  mu-GDP (CLT):           {fmt(out['mu'])}",
        f"  epsilon PRV (claimed):  {fmt(out['epsilon_prv'])}",
        f"  epsilon RDP (bound):    {fmt(out['epsilon_rdp'])}",
        f"  epsilon GDP (CLT; can underestimate): {fmt(out['epsilon_gdp'])}"]))
    return 0


def _release_run_settings(args, flat: dict, nested: tuple = ()) -> dict:
    """The raw settings of a releasing run: ``--config`` YAML, then the options given (``flat`` top-level keys,
    ``nested`` (section, key, value) triples), the privacy options, ``--no-non-private`` and ``--resume``."""
    raw = {}
    if args.config is not None:
        import yaml

        if not args.config.exists():
            raise InputError(f"config file not found: {args.config}")
        try:
            raw = yaml.safe_load(args.config.read_text()) or {}
        except yaml.YAMLError as err:
            raise InputError(f"config file {args.config} is not valid YAML: {err}; fix the line it names") from None
        if not isinstance(raw, dict):
            raise InputError(f"config file {args.config} must hold a mapping of settings")
    raw |= {k: v for k, v in {**flat, "run_id": args.run_id, "artifacts_dir": args.artifacts_dir}.items()
            if v is not None}
    for section, key, value in (("privacy", "delta", args.delta), ("privacy", "budget_epsilon", args.budget_epsilon),
                                *nested):
        if value is not None:
            node = raw
            for part in section.split("."):
                node = node.setdefault(part, {})
            node[key] = value
    if args.no_non_private:
        raw["non_private"] = False
    if args.resume:
        raw["resume"] = True
    return raw


def _cmd_synthesize(args) -> int:
    from privehr.core.config import SynthesisConfig

    raw = _release_run_settings(args, {"path": args.data, "spec": args.spec, "runs": args.runs,
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
        raise InputError(f"invalid synthesize settings: {err}") from None
    from privehr.tasks.versioning import pull_inputs

    from privehr.tasks.synthesis import check_synthesis_inputs

    check_synthesis_inputs(config)  # targets, bounds, baselines: one line now, not after a budget is spent
    pull_inputs.fn([str(config.path)])  # a fresh clone: fetch the versioned table first
    if not Path(config.path).exists():
        raise InputError(f"EHR table not found: {config.path}; pass --data, or write the demo table with "
                         "`privehr demo-data ehr --out data/ehr/EHR_dataset.csv`")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.synthesis import synthesize_ehr

    summary = synthesize_ehr(config, args.device)
    means = lambda key: ", ".join(f"{b} {v:.2f}" for b, v in summary[key].items())  # noqa: E731
    target = summary["targets"]["classification"]
    _emit(args, summary, "\n".join([
        f"{summary['flows']} releases ({', '.join(summary['synthesizers'])}), {summary['tables']} synthetic tables",
        *([f"  mean TSTR AUROC for {target} (nine classifiers; train on synthetic, test on real) by budget: "
           f"{means('mean_tstr_auroc_by_budget')}",
           f"  mean SVM accuracy for {target} by budget: {means('mean_svm_accuracy_by_budget')}"] if target else
          ["  no classification target: fidelity only (name one under the spec's targets)"]),
        f"  report: {summary['report']}", f"run directory: {summary['run_dir']}"]))
    return 0


def _cmd_infer(args) -> int:
    from privehr.core.inference_config import InferenceConfig

    raw = _release_run_settings(
        args, {"data_path": args.data, "model": args.model, "subjects": args.subjects, "mus": args.mu,
               "runs": args.runs, "routes": args.routes, "losses": args.losses, "temperature": args.temperature},
        (("vi", "steps", args.steps), ("vi", "draws", args.draws), ("synthetic", "datasets", args.datasets),
         ("synthetic.density", "steps", args.density_steps)))
    try:
        config = InferenceConfig.model_validate(raw)
    except ValueError as err:
        raise InputError(f"invalid infer settings: {err}") from None
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.private_inference import private_inference

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
    _emit(args, summary, "\n".join(lines))
    return 0


def _cmd_audit(args) -> int:
    from privehr.core.config import AuditConfig

    try:
        config = AuditConfig.model_validate({"run_dir": args.run_dir, "shadows": args.shadows, "epsilon": args.epsilon,
                                             "label": args.label})
    except ValueError as err:
        raise InputError(f"invalid audit settings: {err}") from None
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from privehr.flows.audit import audit

    report = audit(config)
    lines = [f"membership-inference audit of {args.run_dir} ({report['shadows']} shadows, "
             f"population {report['population']} training stays, label {report['label']})"]
    for mech, e in report["mechanisms"].items():
        lines.append(f"  {mech}: LiRA online AUC {e['online']['auc']['median']:.3f}, TPR at FPR 1e-3 "
                     f"{e['online']['tpr_at_fpr_0.001']['median']:.4f}, at 1e-2 {e['online']['tpr_at_fpr_0.01']['median']:.4f}; "
                     f"one-run epsilon >= {e['one_run']['epsilon_lower']:.3f} (ceiling {e['one_run']['ceiling']:.2f})")
    lines.append(f"  files: {args.run_dir}/audit/audit.json, lira_roc.png")
    _emit(args, report, "\n".join(lines))
    return 0


def _add_release_run_options(parser: argparse.ArgumentParser, resumed: str) -> None:
    """Options of every command whose run makes DP releases: delta, budget, resume, device and where it goes."""
    parser.add_argument("--delta", type=float, help="delta of every (epsilon, delta) statement (default 1e-5)")
    parser.add_argument("--budget-epsilon", type=float, help="refuse the run if the dataset's composed epsilon "
                                                             "would exceed this (nothing is trained)")
    parser.add_argument("--resume", action="store_true", help=f"continue --run-id: {resumed}")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--run-id")
    parser.add_argument("--artifacts-dir", type=Path)


def _parser() -> argparse.ArgumentParser:
    from typing import get_args

    from privehr.core.config import DEFAULT_PAGES_PORT, Label

    parser = argparse.ArgumentParser(prog="privehr", description="privehr: learning from clinical data under "
                                     "differential privacy, orchestrated by Prefect and versioned with DVC.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument("--debug", action="store_true", help="show the Python and Prefect tracebacks of input "
                                                             "errors (by default: one message, exit status 2)")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo-data", help="generate demo inputs in the real on-disk formats")
    demo_sub = demo.add_subparsers(dest="kind", required=True)
    mimic = demo_sub.add_parser("mimic", parents=[common], help="a simulated MIMIC-Extract all_hourly_data.h5")
    mimic.add_argument("--out", type=Path, required=True, help="output .h5 path")
    mimic.add_argument("--stays", type=int, default=4000, help="ICU stays (full size: 34472; default 4000)")
    mimic.add_argument("--seed", type=int, default=0)
    mimic.add_argument("--variables", type=int, default=None, help="keep the first N of the 104 LEVEL2 variables")
    mimic.add_argument("--patients-columns", type=int, choices=(28, 29), default=28)
    mimic.add_argument("--label-dtype", choices=("int64", "int32"), default="int64")
    mimic.add_argument("--datetime-unit", choices=("ns", "us"), default="ns")
    mimic.add_argument("--codes", action="store_true", help="also write the optional 'codes' key")
    mimic.add_argument("--force", action="store_true", help="overwrite an existing file")
    mimic.set_defaults(func=_cmd_demo_data)

    ehr = demo_sub.add_parser("ehr", parents=[common], help="a simulated EHR table shaped like Harrod's (seed 002)")
    ehr.add_argument("--out", type=Path, required=True, help="output .csv path")
    ehr.add_argument("--seed", type=int, default=0)
    ehr.add_argument("--force", action="store_true", help="overwrite an existing file")
    ehr.set_defaults(func=_cmd_demo_ehr)

    expectations = sub.add_parser("expectations", help="Great Expectations suites in expectations/")
    expectations_sub = expectations.add_subparsers(dest="expectations_command", required=True)
    build = expectations_sub.add_parser("build", parents=[common],
                                        help="regenerate the suites from expectations/specs (review the diff), or "
                                             "build the suite of your own spec files (--spec)")
    build.add_argument("--spec", nargs="+", type=Path, help="spec YAML file(s) of your own tables: their suites are "
                       "written beside them (validation finds them there)")
    build.add_argument("--out", type=Path, help="directory for the suites (default: expectations/, or beside --spec)")
    build.set_defaults(func=_cmd_expectations_build)

    spec = sub.add_parser("spec", help="table specs: the one file a user writes to bring a table")
    spec_sub = spec.add_subparsers(dest="spec_command", required=True)
    draft = spec_sub.add_parser("draft", parents=[common], help="draft a spec from a CSV (kinds, bounds and "
                                "categories guessed from its values: confirm them, replace private bounds)")
    draft.add_argument("table", type=Path, help="CSV with a header row, one record per row (read only)")
    draft.add_argument("--out", type=Path, help="write the YAML here (default: print it)")
    draft.add_argument("--name", help="the spec's name (default: from the file name)")
    draft.add_argument("--target", help="a binary column the utility classifiers predict (targets.classification)")
    draft.add_argument("--max-categories", type=int, default=20, help="text columns with at most this many "
                       "distinct values are categorical (default 20)")
    draft.add_argument("--force", action="store_true", help="overwrite --out")
    draft.set_defaults(func=_cmd_spec_draft)

    validate = sub.add_parser("validate", parents=[common], help="validate deliveries (no training); exit 1 "
                              "when a critical expectation fails")
    validate.add_argument("paths", nargs="+", type=Path, help="all_hourly_data.h5 files and/or EHR tables (CSV)")
    validate.add_argument("--ehr-spec", default="harrod_ehr", help="spec of the CSV tables (name or YAML path)")
    validate.add_argument("--mimic-spec", type=Path, help="MIMIC-Extract spec YAML (default: the bundled one)")
    validate.add_argument("--run-id")
    validate.add_argument("--artifacts-dir", type=Path, default=Path("artifacts"))
    validate.set_defaults(func=_cmd_validate)

    prepare = sub.add_parser("ehr-prepare", parents=[common], help="validate, split and MICE-impute an EHR table")
    prepare.add_argument("--data", type=Path, help="the table (default data/ehr/EHR_dataset.csv)")
    prepare.add_argument("--spec", help="spec name or YAML path (default harrod_ehr)")
    prepare.add_argument("--m", type=int, help="imputed datasets (default 5)")
    prepare.add_argument("--iterations", type=int, help="MICE rounds (default 10)")
    prepare.add_argument("--run-id")
    prepare.add_argument("--artifacts-dir", type=Path)
    prepare.set_defaults(func=_cmd_ehr_prepare)

    inspect = sub.add_parser("inspect", parents=[common], help="summarise an all_hourly_data.h5")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--window-hours", type=int, default=24)
    inspect.add_argument("--gap-hours", type=int, default=6)
    inspect.set_defaults(func=_cmd_inspect)

    def add_config_options(p):
        p.add_argument("--profile", choices=("demo", "full"), default="demo",
                       help="preset grid: demo (3 seeds, 4 epsilons) or full (seed 000: 10 seeds, 11 epsilons)")
        p.add_argument("--config", type=Path, help="YAML or JSON file of PipelineConfig settings (over the profile)")
        p.add_argument("--data", type=Path, help="MIMIC-Extract file (overrides data.hdf5_path)")
        p.add_argument("--run-id", help="name of the run directory (default: timestamp + suffix)")
        p.add_argument("--artifacts-dir", type=Path, help="where run directories go (default artifacts/)")
        p.add_argument("--device", choices=("auto", "cpu", "cuda"))
        p.add_argument("--no-dvc", action="store_true", help="do not version the run with DVC")

    run = sub.add_parser("run", parents=[common], help="run privehr-pipeline locally (no server needed)")
    add_config_options(run)
    run.add_argument("--dask", action="store_true", help="run the task fan-out on a local Dask cluster")
    run.add_argument("--dask-address", help="scheduler of a Dask cluster (tcp://host:8786) for the fan-out")
    run.add_argument("--dask-workers", type=int, default=2, help="workers of the local Dask cluster")
    run.add_argument("--no-synthesis", action="store_true", help="skip the DP-NF synthesis of the EHR table")
    run.add_argument("--resume", action="store_true",
                     help="continue --run-id after a crash or kill: finished grid cells are not retrained")
    run.set_defaults(func=_cmd_run)

    privacy = sub.add_parser("privacy", help="privacy accounting")
    privacy_sub = privacy.add_subparsers(dest="privacy_command", required=True)
    ledger = privacy_sub.add_parser("ledger", parents=[common], help="the epsilon each dataset has spent, composed")
    ledger.add_argument("--ledger", type=Path, help="ledger file (default: privacy.ledger_path of the config)")
    ledger.add_argument("--delta", type=float, help="delta at which DP-SGD releases are composed (default: "
                                                    "privacy.delta of the config)")
    ledger.add_argument("--config", type=Path)
    ledger.set_defaults(func=_cmd_privacy_ledger)
    convert = privacy_sub.add_parser("convert", parents=[common], help="sigma <-> mu-GDP <-> (epsilon, delta) for "
                                     "T Poisson-subsampled Gaussian steps")
    given = convert.add_mutually_exclusive_group(required=True)
    given.add_argument("--sigma", type=float, help="noise multiplier")
    given.add_argument("--mu", type=float, help="mu-GDP (seed 002's budgets)")
    given.add_argument("--epsilon", type=float, help="target epsilon (sigma calibrated by PRV and RDP)")
    convert.add_argument("--sample-rate", type=float, required=True,
                         help="Poisson sampling rate q as trained (synthesize records its effective q = "
                              "1 / ceil(n / ceil(q n)) in each release)")
    convert.add_argument("--steps", type=int, required=True, help="steps T")
    convert.add_argument("--delta", type=float, default=1e-5)
    convert.set_defaults(func=_cmd_privacy_convert)

    synth = sub.add_parser("synthesize", parents=[common], help="DP-NF synthetic data from an EHR table: validate, "
                           "MICE, DP-NF per budget, utility and fidelity report")
    synth.add_argument("--data", type=Path, help="the table (default data/ehr/EHR_dataset.csv)")
    synth.add_argument("--spec", help="spec name or YAML path (default harrod_ehr)")
    synth.add_argument("--config", type=Path, help="YAML of SynthesisConfig settings")
    synth.add_argument("--mu", type=float, nargs="+", help="mu-GDP budgets (default 6.10 3.92 2.45 1.49; with "
                                                          "only --epsilon given, none)")
    synth.add_argument("--epsilon", type=float, nargs="+", help="(epsilon, delta) budgets (default 1 4; with only "
                                                               "--mu given, none)")
    synth.add_argument("--m", type=int, help="MICE imputations")
    synth.add_argument("--runs", type=int, help="flows per imputation and budget")
    synth.add_argument("--releases", type=int, help="synthetic tables per flow")
    synth.add_argument("--iterations", type=int, help="MICE rounds")
    synth.add_argument("--steps", type=int, help="DP-SGD steps T (of every flow synthesizer)")
    synth.add_argument("--synthesizers", nargs="+", choices=("maf", "hflow", "aim", "mst"),
                       help="maf: DP-NF (default); hflow: DP-HFlow (mixed types); aim, mst: marginal baselines "
                            "(epsilon budgets; pip install 'privehr[baselines]')")
    synth.add_argument("--classification-target", help="binary column of the utility classifiers (default: the "
                                                       "spec's targets.classification)")
    synth.add_argument("--regression-target", help="numeric column of the random forest (default: the spec's)")
    synth.add_argument("--exclude", nargs="+", help="columns left out of the utility models' inputs (default: the "
                                                    "spec's targets.excluded_features)")
    synth.add_argument("--no-non-private", action="store_true", help="no non-private comparison flow (mu = inf)")
    _add_release_run_options(synth, "trained flows are not retrained")
    synth.set_defaults(func=_cmd_synthesize)

    infer = sub.add_parser("infer", parents=[common], help="private posterior inference (seed 002 Section 4): "
                           "DP-NF-VI and VI on DP synthetic data beside the exact posterior (Tables 6-7)")
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
    _add_release_run_options(infer, "finished fits are not redone")
    infer.set_defaults(func=_cmd_infer)

    audit = sub.add_parser("audit", parents=[common], help="LiRA and one-run audit of a finished run")
    audit.add_argument("run_dir", type=Path, help="artifacts/<run-id> of a privehr-pipeline run")
    audit.add_argument("--shadows", type=int, default=16)
    audit.add_argument("--epsilon", type=float, default=1.0, help="target epsilon of the DP-SGD shadows")
    audit.add_argument("--label", choices=get_args(Label), default="mort_icu")
    audit.set_defaults(func=_cmd_audit)

    serve = sub.add_parser("serve", parents=[common], help="serve the artifacts directory's pages (report.html, Data "
                           "Docs) over http, where the Prefect artifacts link them (pages.base_url)")
    add_config_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: this machine only)")
    serve.add_argument("--port", type=int, default=None,
                       help=f"default: the port of pages.base_url ({DEFAULT_PAGES_PORT})")
    serve.set_defaults(func=_cmd_serve)

    config = sub.add_parser("config", parents=[common], help="print the resolved configuration")
    add_config_options(config)
    config.add_argument("--schema", action="store_true", help="print the JSON schema instead")
    config.set_defaults(func=_cmd_config)
    return parser


@contextmanager
def _input_errors_without_tracebacks(debug: bool):
    """Log records of an input error (a task or flow of this command failing on bad input) keep their message but
    lose the traceback, which Prefect's handlers would print before privehr's one-line message."""
    if debug:
        yield
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        if record.exc_info and isinstance(record.exc_info[1], InputError):
            record.exc_info, record.exc_text = None, None
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)


EPHEMERAL_STARTUP_SECONDS = "180"  # Prefect's 20 s default fails on a loaded 2-core machine
ORCHESTRATED = {"run", "validate", "ehr-prepare", "synthesize", "infer", "audit"}  # start a Prefect server


def _with_one_retry_of_the_server(args) -> int:
    """Run the command; if Prefect's temporary server did not come up (a loaded machine), stop its half-started
    process and try once more. The server starts before a flow's first task: no run directory exists yet."""
    try:
        return args.func(args)
    except RuntimeError as err:
        if "ephemeral Prefect API server" not in str(err):
            raise
        _stop_temporary_server()
        print("privehr: Prefect's temporary server did not start in time; trying once more", file=sys.stderr)
        try:
            return args.func(args)
        finally:
            _stop_temporary_server()


def _stop_temporary_server() -> None:
    """Terminate the temporary server Prefect started for this process, if any (a failed start leaves it)."""
    if "prefect.server.api.server" in sys.modules:
        sys.modules["prefect.server.api.server"].SubprocessASGIServer().stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_SECONDS)
    if args.command in ORCHESTRATED and argv is None:  # a console command (not a call from Python): no orphans
        from privehr.cli.watchdog import watch

        watch()
    try:
        with _input_errors_without_tracebacks(debug):
            return _with_one_retry_of_the_server(args)
    except RuntimeError as err:
        if "ephemeral Prefect API server" not in str(err) or debug:
            raise
        timeout = os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]
        message = (f"Prefect's temporary server did not start within {timeout} s (a loaded machine?). Run "
                   "`prefect server start` once and set PREFECT_API_URL to it (e.g. http://127.0.0.1:4200/api), or "
                   "raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; nothing was trained.")
        if getattr(args, "json", False):
            print(json.dumps({"error": message}, indent=2))
        print(f"privehr: error: {message}", file=sys.stderr)
        return 2
    except InputError as err:
        if debug:
            traceback.print_exc()
        if getattr(args, "json", False):
            print(json.dumps({"error": str(err)}, indent=2))
        print(f"privehr: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
