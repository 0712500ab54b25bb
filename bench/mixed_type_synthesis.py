"""Report: DP-HFlow vs the MAF (DP-NF) vs AIM vs MST on real mixed-type clinical tables, side by side.

    python bench/mixed_type_synthesis.py [--tables whas500 gbsg2] [--epsilons 1 4] [--runs 3]
                                         [--synthesizers hflow maf aim mst] [--out bench/results/mixed_type_synthesis.json]

Tables: WHAS500 (Worcester Heart Attack Study, 500 patients, 16 columns: 9 binary, 2 integer, 5 numeric;
target fstat, death during follow-up) and GBSG2 (German Breast Cancer Study Group 2, 686 patients, 10 columns:
3 binary, 1 ordinal, 6 integer; target cens, recurrence or death), as bundled in scikit-survival
(``pip install scikit-survival``; a bench need, not a runtime one). Each is brought as a user would: a spec
written by hand below, with bounds from public clinical ranges (not from the data), read through privehr's
table reader (kinds, categories, quarantine).

Each run: a 75/25 split by patient (seeded by the run: no privacy claim depends on it), then on the 75 % of
training patients at each (epsilon, delta = 1e-5), each synthesizer with privehr's defaults (the
``SynthesisConfig`` defaults: DP-HFlow with per-layer clipping, the MAF with bounds scaling, AIM and MST
through private-pgm on 16-bin numeric columns) samples as many rows as training patients. Every table
is decoded to the spec (categories, integers, bounds) and evaluated against the real patients the way
Lee et al. 2022 report it: TSTR with the nine-classifier panel (mean AUROC, macro-F1, average precision; tested
on the 25 %), Kendall-tau matrix RMSE and MAE, mean TV of discrete columns, mean KS of numeric ones, and
the share of invalid values (before decoding, for the MAF's raw output). Train-on-real is the same panel
fitted on the training patients. Wall time per fit. Prints one JSON document (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from privehr.models.synthesis.codec import TableCodec  # noqa: E402
from privehr.models.synthesis.marginal import marginal_available, synthesize_marginal  # noqa: E402
from privehr.models.evaluation.mixed_fidelity import mixed_fidelity_summary  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.evaluation.tstr_panel import tstr, tstr_summary  # noqa: E402
from privehr.core.config import SynthesisConfig  # noqa: E402
from privehr.core.specs import load_ehr_spec  # noqa: E402
from privehr.io.ehr_table import read_ehr_table  # noqa: E402
from privehr.models.synthesis import SynthesisData, create_synthesizer  # noqa: E402

B = "binary"
SPECS = {  # bounds: public clinical ranges, wide enough for any adult patient (not the tables' extremes)
    "whas500": {"target": "fstat", "attributes": [
        {"name": "afb", "kind": B}, {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110},
        {"name": "av3", "kind": B}, {"name": "bmi", "kind": "numeric", "valid_low": 10, "valid_high": 60},
        {"name": "chf", "kind": B}, {"name": "cvd", "kind": B},
        {"name": "diasbp", "kind": "numeric", "valid_low": 0, "valid_high": 200}, {"name": "gender", "kind": B},
        {"name": "hr", "kind": "numeric", "valid_low": 20, "valid_high": 250},
        {"name": "los", "kind": "integer", "valid_low": 0, "valid_high": 60}, {"name": "miord", "kind": B},
        {"name": "mitype", "kind": B}, {"name": "sho", "kind": B},
        {"name": "sysbp", "kind": "numeric", "valid_low": 40, "valid_high": 300},
        {"name": "lenfol", "kind": "integer", "valid_low": 0, "valid_high": 2500}, {"name": "fstat", "kind": B}]},
    "gbsg2": {"target": "cens", "attributes": [
        {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 100},
        {"name": "estrec", "kind": "integer", "valid_low": 0, "valid_high": 1500},
        {"name": "horTh", "kind": B, "categories": ["no", "yes"]},
        {"name": "menostat", "kind": B, "categories": ["Pre", "Post"]},
        {"name": "pnodes", "kind": "integer", "valid_low": 0, "valid_high": 60},
        {"name": "progrec", "kind": "integer", "valid_low": 0, "valid_high": 2500},
        {"name": "tgrade", "kind": "ordinal", "categories": ["I", "II", "III"]},
        {"name": "tsize", "kind": "integer", "valid_low": 0, "valid_high": 150},
        {"name": "time", "kind": "integer", "valid_low": 0, "valid_high": 3000}, {"name": "cens", "kind": B}]},
}


def _table(name: str, folder: Path):
    """The bundled table written as a CSV and read back through its spec (kinds, categories, codes)."""
    from sksurv.datasets import load_gbsg2, load_whas500

    x, y = (load_whas500 if name == "whas500" else load_gbsg2)()
    frame = x.copy()
    if name == "whas500":
        frame["lenfol"], frame["fstat"] = y["lenfol"], y["fstat"].astype(int)
    else:
        frame["time"], frame["cens"] = y["time"], y["cens"].astype(int)
    columns = [a["name"] for a in SPECS[name]["attributes"]]
    frame[columns].to_csv(folder / f"{name}.csv", index=False)
    spec = {"name": name, "public_patient_count": True, "attributes": SPECS[name]["attributes"],
            "targets": {"classification": SPECS[name]["target"]}}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    spec = load_ehr_spec(folder / f"{name}.yaml")
    table = read_ehr_table(folder / f"{name}.csv", spec)
    if not table.quarantine.empty:
        raise SystemExit(f"{name}: {len(table.quarantine)} cells quarantined; check the bench spec's bounds")
    return spec, table.frame


def _split(frame: pd.DataFrame, run: int):
    order = np.random.default_rng(run).permutation(len(frame))
    cut = int(round(0.75 * len(frame)))
    return frame.iloc[order[:cut]], frame.iloc[order[cut:]]


def fit_flow(kind, train, codec, spec, config, budget: dict, delta: float, seed: int) -> pd.DataFrame:
    """One flow (``budget``: an epsilon, mu or non_private budget) on the training rows, fitted by the synthesis
    task's own synthesizer (``create_synthesizer``); as many rows as training patients, its finite raw rows in frame
    units (also used by bench/synthesis_membership.py)."""
    job = {"job_id": f"{kind}-{budget['kind']}-seed{seed}", "synthesizer": kind, "budget": budget}
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"delta": delta}), "releases": 1})
    synthesizer = create_synthesizer(kind, config, "cpu")
    plan = synthesizer.plan(job, len(train))
    done = synthesizer.fit(job, SynthesisData(train, train, codec.names, spec, len(train), seed), plan,
                           NoiseSource.secret())
    raw = done.tables[0]
    return raw[np.isfinite(raw.to_numpy(float)).all(axis=1)].reset_index(drop=True)


def _flow_table(kind, train, codec, spec, config, epsilon, delta, run):
    """One DP flow at ``epsilon`` (:func:`fit_flow`): (raw, decoded) in frame units."""
    raw = fit_flow(kind, train, codec, spec, config, {"kind": "epsilon", "value": epsilon}, delta, 1000 * run + 17)
    return raw, codec.decode(raw)


def _marginal_table(kind, train, codec, spec, config, epsilon, delta, run):
    bins = config.marginal.bins
    options = {"max_model_size": config.marginal.max_model_size} if kind == "aim" else {}
    codes, _ = synthesize_marginal(kind, codec.discretise(train, bins), codec.domain(bins), epsilon, delta,
                                   len(train), np.random.default_rng(), **options)  # OS entropy
    table = codec.undiscretise(codes, bins, np.random.default_rng(run))
    return table, table


def _evaluate(real_train, real_test, raw, decoded, spec, target):
    kinds = spec.kinds()
    codes = spec.codes()
    columns = list(real_train.columns)
    mixed = mixed_fidelity_summary(real_train[columns], decoded[columns], {c: kinds[c] for c in columns}, codes)
    invalid = mixed_fidelity_summary(real_train[columns], raw[columns], {c: kinds[c] for c in columns},
                                     codes)["invalid_share"]
    panel = tstr_summary(tstr(decoded[columns], real_test[columns], target, kinds, categories=codes))
    return {"tstr_auroc": panel["auroc"], "tstr_macro_f1": panel["macro_f1"],
            "tstr_average_precision": panel["average_precision"], "tau_rmse": mixed["tau_rmse"],
            "tau_mae": mixed["tau_mae"], "tv_mean": mixed["tv_mean"], "ks_mean": mixed["ks_mean"],
            "invalid_share_raw": invalid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="+", default=["whas500", "gbsg2"], choices=sorted(SPECS))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synthesizers", nargs="+", default=["hflow", "maf", "aim", "mst"],
                        choices=("hflow", "maf", "aim", "mst"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mixed_type_synthesis.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = SynthesisConfig()
    synthesizers = [s for s in args.synthesizers if s in ("hflow", "maf") or marginal_available()]
    skipped = sorted(set(args.synthesizers) - set(synthesizers))
    if skipped:
        print(f"skipping {skipped}: private-pgm (mbi >= 2) is not installed (pip install 'privehr[baselines]')",
              file=sys.stderr)
    rows, started = [], time.time()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.tables:
            spec, frame = _table(name, Path(folder))
            target = spec.targets.classification
            codec = TableCodec.from_spec(spec, list(frame.columns))
            for run in range(args.runs):
                train, test = _split(frame, run)
                real = tstr_summary(tstr(train, test, target, spec.kinds(),
                                         categories=spec.codes()))
                rows.append({"table": name, "synthesizer": "train on real", "epsilon": None, "run": run,
                             "tstr_auroc": real["auroc"], "tstr_macro_f1": real["macro_f1"],
                             "tstr_average_precision": real["average_precision"], "seconds": 0.0})
                for epsilon in args.epsilons:
                    for kind in synthesizers:
                        t0 = time.perf_counter()
                        make = _flow_table if kind in ("hflow", "maf") else _marginal_table
                        raw, decoded = make(kind, train, codec, spec, config, epsilon, args.delta, run)
                        seconds = time.perf_counter() - t0
                        row = {"table": name, "synthesizer": kind, "epsilon": epsilon, "run": run,
                               **_evaluate(train, test, raw, decoded, spec, target), "seconds": seconds}
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
    results = pd.DataFrame(rows)
    metrics = ["tstr_auroc", "tstr_macro_f1", "tstr_average_precision", "tau_rmse", "tau_mae", "tv_mean", "ks_mean",
               "invalid_share_raw", "seconds"]
    grouped = results.groupby(["table", "synthesizer", "epsilon"], dropna=False)[
        [m for m in metrics if m in results]].agg(["mean", "std"])
    summary = [{"table": t, "synthesizer": s, "epsilon": None if pd.isna(e) else e,
                **{f"{m}_{stat}": (None if pd.isna(v) else round(float(v), 4)) for (m, stat), v in row.items()}}
               for (t, s, e), row in grouped.iterrows()]
    document = {"tables": args.tables, "epsilons": args.epsilons, "delta": args.delta, "runs": args.runs,
                "synthesizers": synthesizers, "skipped": skipped, "torch_threads": 1,
                "defaults": {"hflow": config.hflow.model_dump(), "dpnf": config.dpnf.model_dump(),
                             "marginal": config.marginal.model_dump()},
                "wall_seconds": round(time.time() - started, 1), "summary": summary, "rows": rows}
    text = json.dumps(document, indent=2, default=float)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
