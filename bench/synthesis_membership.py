"""Bench: membership inference (DOMIAS) against every synthesizer's table, DP and non-private, on a real clinical table.

    python bench/synthesis_membership.py [--epsilons 1 4] [--synthesizers maf hflow aim mst]
                                         [--maf-steps 300] [--hflow-steps 200] [--out bench/results/synthesis_membership.json]

Table: FLCHAIN (Dispenzieri et al. 2012, serum free light chains and mortality, Olmsted County; 7,874 people) as
bundled in scikit-survival (``pip install scikit-survival``: a bench need, not a runtime one). ``chapter`` (the
cause of death, missing for the living) is dropped, and so are the 1,350 people without a creatinine value, which
leaves 6,524 people and 10 columns: age, creatinine, kappa, lambda (numeric / integer), flc.grp (decile 1-10,
integer), mgus, sex (binary), sample.yr (integer), futime (integer days) and death (binary). The spec is written by
hand below with bounds from public clinical ranges, and the table is read through privehr's reader (kinds,
categories, quarantine), as ``bench/mixed_type_synthesis.py`` does.

Split (seed 0, public): 50 % members (the synthesizers' training patients, 3,262), 25 % the attacker's reference
sample (1,631), 25 % non-member candidates (1,631): TPR at FPR 0.1 % is resolvable (1,631 >= 1,000 non-members).
Each synthesizer is fitted through privehr's own code (``create_synthesizer`` for the flows, ``synthesize_marginal``
for AIM and MST) at each epsilon (delta 1e-5), the MAF also without privacy (``non_private``: plain training with
early stopping), and samples as many rows as members; its decoded table (categories, integers, bounds) is attacked
with :func:`privehr.models.evaluation.membership_inference.domias_attack`. Two controls frame the numbers: the
members themselves as a "synthetic" table (a generator that copies its training rows) and the reference sample as
one (a generator that never saw a member: chance for the p_syn-only score; the ratio is then identically 1, so its
AUROC is 0.5 and its TPRs 0 by construction). Every table is attacked twice: with Scott's bandwidth (the
synthesis report's attack) and with a tenth of it (``--bandwidth-factors``), where the p_syn-only score becomes a
near-copy detector; the copy control shows how much each attacker can see at all.

Settings cut to run in about ten minutes on two busy cores (718 s measured, alongside a test run) (``SynthesisConfig`` defaults otherwise): the MAF at
``--maf-steps`` DP-SGD steps (default 300, privehr's default 1,000), DP-HFlow at ``--hflow-steps`` (default 200,
default 500), both at sample rate 0.1 (default 0.5) so a step sees ~330 patients; AIM with max_model_size 20 (default
80). Fewer steps and smaller batches cost utility, not privacy accounting: each release's epsilon is the one asked
for. One run (one split, one table per setting): with no leakage the AUROC of 3,262 members vs 1,631 non-members has an
SD of about 0.009, and a TPR at FPR 1 % is read off 16 non-members (at 0.1 %: one).
The non-private MAF stops early on held-out likelihood (privehr's default) after at most 300 steps: a flow trained
far longer without privacy may memorise more than this one did.
Prints one JSON document (also written to ``--out``).
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

from privehr.core.config import SynthesisConfig  # noqa: E402
from privehr.core.specs import load_ehr_spec  # noqa: E402
from privehr.io.ehr_table import read_ehr_table  # noqa: E402
from privehr.models.evaluation.membership_inference import FPRS, domias_attack  # noqa: E402
from privehr.models.synthesis.codec import TableCodec  # noqa: E402
from privehr.models.synthesis.marginal import marginal_available, synthesize_marginal  # noqa: E402

from mixed_type_synthesis import fit_flow  # noqa: E402  (bench/ is the script's directory)

B = "binary"
ATTRIBUTES = [  # bounds: public clinical ranges (not the table's extremes)
    {"name": "age", "kind": "integer", "valid_low": 18, "valid_high": 110},
    {"name": "sex", "kind": B, "categories": ["F", "M"]},
    {"name": "sample.yr", "kind": "integer", "valid_low": 1990, "valid_high": 2010},
    {"name": "kappa", "kind": "numeric", "valid_low": 0, "valid_high": 200},
    {"name": "lambda", "kind": "numeric", "valid_low": 0, "valid_high": 200},
    {"name": "flc.grp", "kind": "integer", "valid_low": 1, "valid_high": 10},
    {"name": "creatinine", "kind": "numeric", "valid_low": 0.1, "valid_high": 20},
    {"name": "mgus", "kind": B, "categories": ["no", "yes"]},
    {"name": "futime", "kind": "integer", "valid_low": 0, "valid_high": 10000},
    {"name": "death", "kind": B}]


def _table(folder: Path):
    """FLCHAIN without ``chapter`` and without people lacking creatinine, read back through its spec."""
    from sksurv.datasets import load_flchain

    x, y = load_flchain()
    frame = x.drop(columns="chapter").copy()
    frame["futime"], frame["death"] = y["futime"], y["death"].astype(int)
    frame = frame[frame["creatinine"].notna()]
    columns = [a["name"] for a in ATTRIBUTES]
    frame[columns].to_csv(folder / "flchain.csv", index=False)
    spec = {"name": "flchain", "public_patient_count": True, "attributes": ATTRIBUTES,
            "targets": {"classification": "death"}}
    (folder / "flchain.yaml").write_text(yaml.safe_dump(spec))
    spec = load_ehr_spec(folder / "flchain.yaml")
    table = read_ehr_table(folder / "flchain.csv", spec)
    if not table.quarantine.empty:
        raise SystemExit(f"flchain: {len(table.quarantine)} cells quarantined; check the bench spec's bounds")
    return spec, table.frame.reset_index(drop=True)


def _split(frame: pd.DataFrame, seed: int = 0):
    """(members 50 %, reference 25 %, non-members 25 %) by a seeded permutation (public)."""
    order = np.random.default_rng(seed).permutation(len(frame))
    a, b = len(frame) // 2, len(frame) // 2 + len(frame) // 4
    return frame.iloc[order[:a]], frame.iloc[order[a:b]], frame.iloc[order[b:]]


def _flow_table(kind, train, codec, spec, config, budget, delta, seed):
    """A flow's decoded table (:func:`mixed_type_synthesis.fit_flow`)."""
    return codec.decode(fit_flow(kind, train, codec, spec, config, budget, delta, seed))


def _marginal_table(kind, train, codec, config, epsilon, delta, seed):
    bins = config.marginal.bins
    options = {"max_model_size": config.marginal.max_model_size} if kind == "aim" else {}
    codes, _ = synthesize_marginal(kind, codec.discretise(train, bins), codec.domain(bins), epsilon, delta,
                                   len(train), np.random.default_rng(), **options)  # OS entropy
    return codec.undiscretise(codes, bins, np.random.default_rng(seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--synthesizers", nargs="+", default=["maf", "hflow", "aim", "mst"],
                        choices=("maf", "hflow", "aim", "mst"))
    parser.add_argument("--maf-steps", type=int, default=300)
    parser.add_argument("--hflow-steps", type=int, default=200)
    parser.add_argument("--sample-rate", type=float, default=0.1)
    parser.add_argument("--aim-max-model-size", type=float, default=20.0)
    parser.add_argument("--bandwidth-factors", type=float, nargs="+", default=[1.0, 0.1],
                        help="each table attacked at these multiples of Scott's bandwidth (1: the report's attack)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "synthesis_membership.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = SynthesisConfig(dpnf={"steps": args.maf_steps, "sample_rate": args.sample_rate},
                             hflow={"steps": args.hflow_steps, "sample_rate": args.sample_rate},
                             marginal={"max_model_size": args.aim_max_model_size})
    synthesizers = [s for s in args.synthesizers if s in ("hflow", "maf") or marginal_available()]
    skipped = sorted(set(args.synthesizers) - set(synthesizers))
    if skipped:
        print(f"skipping {skipped}: private-pgm (mbi >= 2) is not installed", file=sys.stderr)
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        spec, frame = _table(Path(folder))
    members, reference, nonmembers = _split(frame)
    columns = list(frame.columns)
    codec = TableCodec.from_spec(spec, columns)
    settings = [("copy of the members (control)", None, lambda: members),
                ("reference sample (control)", None, lambda: reference)]
    for kind in synthesizers:
        if kind == "maf":
            settings.append((kind, "inf", lambda k=kind: _flow_table(k, members, codec, spec, config,
                                                                    {"kind": "non_private", "value": None},
                                                                    args.delta, 17)))
        for epsilon in args.epsilons:
            if kind in ("maf", "hflow"):
                make = (lambda k=kind, e=epsilon: _flow_table(k, members, codec, spec, config,
                                                              {"kind": "epsilon", "value": e}, args.delta, 17))
            else:
                make = (lambda k=kind, e=epsilon: _marginal_table(k, members, codec, config, e, args.delta,
                                                                  17))
            settings.append((kind, epsilon, make))
    rows = []
    for kind, epsilon, make in settings:
        t0 = time.perf_counter()
        table = make()
        fit_seconds = time.perf_counter() - t0
        for factor in args.bandwidth_factors:
            t0 = time.perf_counter()
            attack = domias_attack(table[columns], members[columns], nonmembers[columns], reference[columns],
                                   bandwidth_factor=factor)
            row = {"synthesizer": kind, "epsilon": epsilon, "rows": int(len(table)), **attack,
                   "fit_seconds": round(fit_seconds, 1), "attack_seconds": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    document = {"table": "flchain (scikit-survival), complete creatinine, without chapter", "patients": len(frame),
                "columns": columns, "split": {"members": len(members), "reference": len(reference),
                                              "nonmembers": len(nonmembers), "seed": 0},
                "attack": "DOMIAS (van Breugel et al. 2023): Gaussian KDE, Scott's bandwidth, reference-standardised "
                          "columns, category codes as numbers", "fprs": list(FPRS),
                "bandwidth_factors": args.bandwidth_factors, "epsilons": args.epsilons, "delta": args.delta,
                "synthesizers": synthesizers, "skipped": skipped,
                "settings": {"maf_steps": args.maf_steps, "hflow_steps": args.hflow_steps,
                             "sample_rate": args.sample_rate, "aim_max_model_size": args.aim_max_model_size,
                             "marginal_bins": config.marginal.bins, "torch_threads": 1},
                "wall_seconds": round(time.time() - started, 1), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2, default=float) + "\n")
    print(args.out.read_text(), end="")


if __name__ == "__main__":
    main()
