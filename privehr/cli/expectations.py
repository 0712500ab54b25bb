"""``privehr expectations build`` (the Great Expectations suites, from the specs), ``privehr spec draft`` (a
table spec drafted from a CSV) and ``privehr spec validate`` (a spec checked, nothing read or written)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from privehr.cli.common import emit
from privehr.core.errors import InputError

__all__ = ["add_expectations_parser", "add_spec_parser"]


def add_expectations_parser(sub, common: argparse.ArgumentParser) -> None:
    expectations = sub.add_parser("expectations", help="Great Expectations suites in expectations/")
    expectations_sub = expectations.add_subparsers(dest="expectations_command", required=True)
    build = expectations_sub.add_parser("build", parents=[common],
                                        help="regenerate the suites from expectations/specs (review the diff), or "
                                             "build the suite of your own spec files (--spec)")
    build.add_argument("--spec", nargs="+", type=Path, help="spec YAML file(s) of your own tables: their suites are "
                       "written beside them (validation finds them there)")
    build.add_argument("--out", type=Path, help="directory for the suites (default: expectations/, or beside --spec)")
    build.set_defaults(func=expectations_build)


def add_spec_parser(sub, common: argparse.ArgumentParser) -> None:
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
    draft.set_defaults(func=spec_draft)
    check = spec_sub.add_parser("validate", parents=[common], help="check a spec before using it (a spec received "
                                "from someone else): bounds, categories, derived expressions; reads no table")
    check.add_argument("spec", help="spec name or YAML path")
    check.set_defaults(func=spec_validate)


def expectations_build(args) -> int:
    # deferred for start-up time (pandas, great_expectations)
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
    emit(args, {"suites": counts, "paths": paths},
         "\n".join([f"wrote {len(paths)} suites from {source}:"] + [f"  {p} ({counts[Path(p).stem]} expectations)"
                                                                    for p in paths]))
    return 0


def spec_draft(args) -> int:
    from privehr.io.permissions import private_file
    from privehr.io.spec_draft import DRAFT_WARNING, draft_spec, spec_yaml  # deferred for start-up time (pandas)

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
        with private_file(args.out) as tmp:  # 0600, also over an existing file: it holds patients' values
            tmp.write_text(text)
    print(f"privehr: warning: {DRAFT_WARNING}", file=sys.stderr)
    if args.json:
        print(json.dumps({"spec": spec, "notes": notes, "warning": DRAFT_WARNING,
                          "path": str(args.out) if args.out else None}, indent=2))
    elif args.out:
        print("\n".join([f"wrote {args.out}: {len(spec['attributes'])} attributes"] + [f"  - {n}" for n in notes]))
    else:
        print(text, end="")
    return 0


def spec_validate(args) -> int:
    from privehr.core.specs import load_ehr_spec  # deferred for start-up time (pandas)

    spec = load_ehr_spec(args.spec)
    payload = {"spec": spec.name, "path": str(spec.source), "attributes": len(spec.attributes),
               "derived": [d.name for d in spec.derived], "drafted_from_data": spec.drafted_from_data}
    emit(args, payload, f"{spec.source}: a valid table spec ({spec.name}: {len(spec.attributes)} attributes, "
                        f"{len(spec.derived)} derived columns)")
    return 0
