"""Benchmark: what one DP-HFlow fit costs on real clinical tables, and where the time goes (issue 28, item 5).

DP-HFlow (Lee et al. 2022, "Differentially Private Normalizing Flows for Synthetic Tabular Data Generation", AAAI)
shares one conditional MADE among its 3 spline blocks, so each of the MADE's two masked layers is used 3 times per
record. Ghost clipping needs each record's gradient norm for those layers. Before this bench it materialised the
masked (out x in) per-record gradient for every record of the batch; it now takes K x K Grams per group of identical
mask rows (``models/dpsgd/rules/masked_linear.py``: ``_masked_gram_norms``, chosen by ``masked_grams_pay``). The noise
calibration (Opacus's RDP at fractional orders is slow at q = 0.5) is cached per (epsilon, delta, q, T) in a
process, so it is paid once per distinct release plan, not once per fit.

Per table, in one process and one thread, all with privehr's defaults (``SynthesisConfig()``) at epsilon 4:

* ``calibration_s``: the noise calibration from cold (the cache cleared);
* ``dp_sgd_s``: the fit after its plan (DP-SGD training and sampling the table) for DP-HFlow with the grouped Grams
  (``hflow``) and with the materialised masked gradients (``hflow_materialised``: ``masked_grams_pay`` forced
  false), and for the MAF (``maf``), the same plan, the same training rows; the variants alternate over
  ``--repeats``; medians;
* ``fit_s``: what a cell of ``bench/mixed_type_synthesis.py`` pays once the calibration is cached (plan and fit);
  ``first_fit_s``: a cell's first fit in a process (calibration from cold included).

Tables (``bench/mixed_type_synthesis.py``'s specs, 75 % of the patients as training rows): AIDS (858 training
rows) and FLCHAIN's first 2,000 rows of a seeded permutation (1,500 training rows), the size the issue names.

    python bench/hflow_cost.py [--data-dir bench/data] [--repeats 2] [--out bench/results/hflow_cost.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from privehr.core.config import SynthesisConfig  # noqa: E402
from privehr.models.dpsgd.rules import masked_linear  # noqa: E402
from privehr.models.privacy import accounting  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.synthesis import SynthesisData, create_synthesizer  # noqa: E402
from privehr.models.synthesis.codec import TableCodec  # noqa: E402


def _mixed_type_bench():
    spec = importlib.util.spec_from_file_location("mixed_type_synthesis", ROOT / "bench" / "mixed_type_synthesis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fit(kind, train, codec, spec, epsilon, seed):
    """(seconds of DP-SGD, seconds of the whole fit) of one synthesizer, as the synthesis task runs it."""
    config = SynthesisConfig()
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"delta": 1e-5}), "releases": 1})
    job = {"job_id": f"{kind}-epsilon-seed{seed}", "synthesizer": kind, "budget": {"kind": "epsilon", "value": epsilon}}
    synthesizer = create_synthesizer(kind, config, "cpu")
    start = time.perf_counter()
    plan = synthesizer.plan(job, len(train))
    trained = time.perf_counter()
    synthesizer.fit(job, SynthesisData(train, train, codec.names, spec, len(train), seed), plan, NoiseSource.secret())
    end = time.perf_counter()
    return end - trained, end - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hflow_cost.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    bench = _mixed_type_bench()
    bench.registered_synthesizers(quiet=True)
    pays = masked_linear.masked_grams_pay
    rows = {}
    for name, limit in (("aids", None), ("flchain", 2000)):
        table = bench.load_table(name, args.data_dir)
        frame = table["frame"]
        if limit is not None:
            frame = frame.iloc[np.random.default_rng(0).permutation(len(frame))[:limit]].reset_index(drop=True)
        train, _ = bench._split(frame, 0)
        codec = TableCodec.from_spec(table["spec"], list(frame.columns))
        nf = SynthesisConfig().hflow
        q = min(1.0, nf.sample_rate)
        accounting.calibrate_noise_multiplier.cache_clear()
        start = time.perf_counter()
        _fit("hflow", train, codec, table["spec"], args.epsilon, 0)  # warms the cache; its time is not used below
        first_fit = time.perf_counter() - start
        accounting.calibrate_noise_multiplier.cache_clear()
        start = time.perf_counter()
        synthesizer = create_synthesizer("hflow", SynthesisConfig(), "cpu")
        synthesizer.plan({"job_id": "x", "synthesizer": "hflow", "budget": {"kind": "epsilon", "value": args.epsilon}},
                         len(train))
        calibration = time.perf_counter() - start
        timings = {"hflow": [], "hflow_materialised": [], "maf": []}
        fits = {"hflow": [], "hflow_materialised": [], "maf": []}
        for repeat in range(args.repeats):
            for variant in timings:
                masked_linear.masked_grams_pay = (lambda *a: False) if variant == "hflow_materialised" else pays
                try:
                    dp_sgd, fit = _fit(variant.removesuffix("_materialised"), train, codec, table["spec"],
                                       args.epsilon, repeat + 1)
                finally:
                    masked_linear.masked_grams_pay = pays
                timings[variant].append(dp_sgd)
                fits[variant].append(fit)
        rows[name] = {
            "training_rows": len(train), "columns": len(codec.names), "sample_rate": q, "steps": nf.steps,
            "calibration_s": round(calibration, 2), "first_fit_s": round(first_fit, 2),
            **{f"{k}_dp_sgd_s": round(statistics.median(v), 2) for k, v in timings.items()},
            **{f"{k}_fit_s": round(statistics.median(v), 2) for k, v in fits.items()},
            "speedup_grouped_grams": round(statistics.median(timings["hflow_materialised"])
                                           / statistics.median(timings["hflow"]), 2),
            "hflow_over_maf_dp_sgd": round(statistics.median(timings["hflow"]) / statistics.median(timings["maf"]), 2)}
        print(json.dumps({name: rows[name]}), flush=True)
    document = {"epsilon": args.epsilon, "delta": 1e-5, "repeats": args.repeats, "threads": 1,
                "machine": platform.processor() or platform.machine(), "torch": torch.__version__, "tables": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
