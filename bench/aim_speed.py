"""AIM's fit time on the mixed-type bench tables, with the columns privehr's synthesis gives AIM (issue 42, item 5).

    python bench/aim_speed.py [--tables whas500 aids] [--layouts spec in_release] [--epsilons 4] [--runs 1]
                              [--size-filter ours mbi] [--data-dir bench/data] [--pgm-checkout PATH]
                              [--filter-round 24 48] [--no-fits] [--out bench/results/aim_speed.json]

AIM: McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism for Differentially Private
Synthetic Data", VLDB 2022 (privehr's implementation: :mod:`privehr.models.synthesis.marginal`).

Tables: those of ``bench/mixed_type_synthesis.py`` (scikit-survival's, read through that bench's hand-written specs;
``--data-dir`` for tables written by ``bench/export_sksurv_tables.py``), the training rows of its run r (75 % split
seeded by r). Layouts: ``spec``, the spec's columns as that bench gives them to every synthesizer; ``in_release``,
each attribute followed by its missingness indicator, as ``privehr synthesize`` does by default
(``synthesis.missing: in_release``, :mod:`privehr.models.synthesis.missingness`): twice the columns.

Each fit is ``synthesize_marginal("aim", ...)`` with privehr's settings (the mechanism's defaults and
``SynthesisConfig().marginal.max_model_size``, as the ``aim`` synthesizer passes it), one thread, and records its
seconds, its rounds, and the seconds of its two costly parts: the size filter (the junction-tree size of the model
with each candidate, every round) and the Private-PGM estimations (JAX compiles each new model structure).
``--size-filter mbi`` times the fit with ``mbi.junction_tree.hypothetical_model_size`` as the size filter (what AIM
used before issue 42), ``ours`` with privehr's O(d^2) computation of the same number. With both, each pair of fits
draws from equal seeded generators (a bench check, not a DP release: never seed a release) and the JSON says whether
they selected the same cliques and released the same codes.

Beside each table and epsilon: the reference AIM's seconds (private-pgm's ``mechanisms/aim.py`` through
``bench/reference_pgm.py``) as recorded in ``bench/results/mixed_type_synthesis.json`` (the ``spec`` layout, another
session and load: compare orders of magnitude only), and with ``--pgm-checkout`` a fresh fit of it on the same codes
(the ``spec`` layout only; the reference takes minutes a fit).

``--filter-round D ...`` times one round of the size filter alone (no data, no JAX) for an AIM model of D columns
(the first table's ``in_release`` domains, repeated; D one-way cliques and D / 4 pairs), with both functions, their
answers asserted equal: how that cost grows with the number of columns (``--no-fits``: only that).
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread, set before numpy and jax load
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_variable] = "1"
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: the tables' specs and loader

import numpy as np  # noqa: E402

from mixed_type_synthesis import ROOT, SPECS, _reference_module, _split, load_tables  # noqa: E402
from privehr.core.config import SynthesisConfig  # noqa: E402
from privehr.models.synthesis import marginal  # noqa: E402
from privehr.models.synthesis.codec import TableCodec  # noqa: E402
from privehr.models.synthesis.missingness import INDICATOR_SUFFIX, indicator_names, missingness_spec  # noqa: E402
from privehr.models.synthesis.missingness import with_indicators  # noqa: E402

LAYOUTS = ("spec", "in_release")
RECORDED = ROOT / "bench" / "results" / "mixed_type_synthesis.json"


def codes_of(table: dict, layout: str, run: int, bins: int) -> tuple[np.ndarray, list[int], list[str]]:
    """(codes, domain, columns) of run ``run``'s training rows in ``layout``."""
    spec, frame = table["spec"], table["frame"]
    train, _ = _split(frame, run)
    columns = list(frame.columns)
    if layout == "in_release":  # every attribute and its indicator (the bench's own indicators replaced)
        attributes = [c for c in columns if not c.endswith(INDICATOR_SUFFIX)]
        spec = spec.model_copy(update={"attributes": [a for a in spec.attributes if a.name in attributes]})
        train = with_indicators(train[attributes], spec, attributes)
        spec, columns = missingness_spec(spec, attributes), attributes + indicator_names(attributes)
    codec = TableCodec.from_spec(spec, columns)
    return codec.discretise(train[columns], bins), codec.domain(bins), columns


class _Timed:
    """Wraps a module function of :mod:`marginal`, adding up its calls and seconds."""

    def __init__(self, name: str, replacement=None):
        self.name, self.original = name, getattr(marginal, name)
        self.inner = replacement or self.original
        self.calls, self.seconds = 0, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    def __enter__(self):
        setattr(marginal, self.name, self)
        return self

    def __exit__(self, *exc):
        setattr(marginal, self.name, self.original)


def _mbi_size(sizes, cliques) -> float:
    mbi = marginal._mbi()
    return mbi.junction_tree.hypothetical_model_size(mbi.Domain(tuple(range(len(sizes))), tuple(sizes)), cliques)


def fit_aim(codes, domain, epsilon: float, delta: float, size_filter: str, seed: int | None) -> dict:
    """One AIM fit at privehr's settings; its seconds and where they went."""
    import jax

    jax.clear_caches()  # every fit compiles its model structures afresh (a paired fit would reuse the first's)
    options = {"max_model_size": SynthesisConfig().marginal.max_model_size}
    rng = np.random.default_rng(seed)  # seed None: OS entropy
    with _Timed("_model_size_mb", _mbi_size if size_filter == "mbi" else None) as size, \
            _Timed("_estimate") as estimate:
        start = time.perf_counter()
        synthetic, info = marginal.synthesize_marginal("aim", codes, domain, epsilon, delta, len(codes), rng,
                                                       **options)
        seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), "size_filter_seconds": round(size.seconds, 2),
            "size_filter_calls": size.calls, "estimate_seconds": round(estimate.seconds, 2),
            "estimates": estimate.calls, "rounds": info["rounds"], "annealed": info["annealed"],
            "selected": info["selected"], "options": info["options"], "_codes": synthetic}


def filter_round(domain: list[int], pairs: int, seed: int = 0) -> dict:
    """Seconds of one round of AIM's size filter (every 1- and 2-way candidate not already in the model) for a model
    of the one-way cliques of ``domain`` plus ``pairs`` random pairs, with mbi's function and with ours (equal
    answers asserted). No data: a cost of the structure alone."""
    g = np.random.default_rng(seed)  # a fixed structure, not a release
    d = len(domain)
    current = [(j,) for j in range(d)] + [tuple(sorted(int(a) for a in g.choice(d, 2, replace=False)))
                                          for _ in range(pairs)]
    free = set(marginal._downward_closure(current))
    candidates = [c for c in marginal._downward_closure(list(itertools.combinations(range(d), 2)))
                  if c not in free]
    out = {"columns": d, "pairs_in_model": pairs, "candidates": len(candidates)}
    answers = {}
    for name, size in (("mbi", _mbi_size), ("ours", marginal._model_size_mb)):
        start = time.perf_counter()
        answers[name] = [size(domain, current + [c]) for c in candidates]
        out[f"{name}_seconds"] = round(time.perf_counter() - start, 3)
    assert answers["mbi"] == answers["ours"]
    return out


def recorded_reference() -> dict:
    """{(table, epsilon): mean seconds and n} of aim_ref in the mixed-type bench's recorded results."""
    if not RECORDED.exists():
        return {}
    summary = json.loads(RECORDED.read_text()).get("summary", [])
    return {(s["table"], s["epsilon"]): {"seconds_mean": s.get("seconds_mean"), "n": s["n"]}
            for s in summary if s["synthesizer"] == "aim_ref"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="+", default=["whas500", "aids"], choices=list(SPECS))
    parser.add_argument("--no-fits", action="store_true", help="only --filter-round")
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--size-filter", nargs="+", default=["ours"], choices=["ours", "mbi"])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--pgm-checkout", type=Path, default=None)
    parser.add_argument("--filter-round", type=int, nargs="*", default=[],
                        help="also time one round of the size filter alone at these column counts (the first "
                             "table's in_release domain, repeated), with mbi's function and ours")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "aim_speed.json")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="mbi")
    bins = SynthesisConfig().marginal.bins
    tables = load_tables(args.tables, args.data_dir)
    reference = recorded_reference()
    paired = len(args.size_filter) > 1
    rows = []
    for name, table in ({} if args.no_fits else tables).items():
        for layout in args.layouts:
            for run in range(args.runs):
                codes, domain, columns = codes_of(table, layout, run, bins)
                for epsilon in args.epsilons:
                    seed = int(np.random.SeedSequence().generate_state(1)[0]) if paired else None
                    fits = {}
                    for size_filter in args.size_filter:
                        fit = fit_aim(codes, domain, epsilon, args.delta, size_filter, seed)
                        fits[size_filter] = fit
                        row = {"table": name, "tuned_on": table["tuned_on"], "layout": layout, "run": run,
                               "epsilon": epsilon, "rows": len(codes), "columns": len(domain), "domain": domain,
                               "size_filter": size_filter, "seeded_pair": paired,
                               **{k: v for k, v in fit.items() if not k.startswith("_")}}
                        if paired and size_filter != args.size_filter[0]:
                            first = fits[args.size_filter[0]]
                            row["same_as_" + args.size_filter[0]] = bool(
                                first["selected"] == fit["selected"] and np.array_equal(first["_codes"], fit["_codes"]))
                        rows.append(row)
                        print(json.dumps({k: v for k, v in row.items() if k not in ("domain", "selected")}),
                              file=sys.stderr, flush=True)
                    if args.pgm_checkout is not None and layout == "spec":
                        start = time.perf_counter()
                        _reference_module().run_reference("aim", codes, tuple(domain), epsilon, args.delta, len(codes),
                                                          args.pgm_checkout)
                        rows.append({"table": name, "layout": layout, "run": run, "epsilon": epsilon,
                                     "rows": len(codes), "columns": len(domain), "size_filter": "reference AIM",
                                     "seconds": round(time.perf_counter() - start, 2)})
    summary = []
    keys = sorted({(r["table"], r["layout"], r["epsilon"], r["size_filter"]) for r in rows},
                  key=lambda k: (args.tables.index(k[0]), LAYOUTS.index(k[1]), k[2], k[3]))
    for table, layout, epsilon, size_filter in keys:
        group = [r for r in rows if (r["table"], r["layout"], r["epsilon"], r["size_filter"]) ==
                 (table, layout, epsilon, size_filter)]
        entry = {"table": table, "tuned_on": table in ("whas500", "gbsg2"), "layout": layout, "epsilon": epsilon,
                 "columns": group[0]["columns"], "size_filter": size_filter, "n": len(group)}
        for metric in ("seconds", "size_filter_seconds", "estimate_seconds", "rounds"):
            values = [r[metric] for r in group if metric in r]
            if values:
                entry[f"{metric}_mean"] = round(float(np.mean(values)), 2)
        if layout == "spec" and (table, epsilon) in reference:
            entry["reference_aim_recorded"] = reference[(table, epsilon)]
        summary.append(entry)
    rounds_alone = []
    if args.filter_round:
        _, base, _ = codes_of(tables[args.tables[0]], "in_release", 0, bins)
        for d in args.filter_round:
            rounds_alone.append({"table": args.tables[0], **filter_round([base[j % len(base)] for j in range(d)],
                                                                         d // 4)})
            print(json.dumps(rounds_alone[-1]), file=sys.stderr, flush=True)
    document = {"what": "AIM fit seconds (privehr's settings) on the mixed-type bench tables, by column layout and "
                        "size filter; reference AIM's recorded seconds beside the spec layout",
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "threads": 1},
                "recorded_reference_from": str(RECORDED.relative_to(ROOT)), "bins": bins, "delta": args.delta,
                "mbi_version": marginal.mbi_version(), "summary": summary, "filter_round": rounds_alone,
                "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2, default=float) + "\n")
    for s in summary:
        print(f"{s['table']:22s} {s['layout']:10s} eps {s['epsilon']:g} d={s['columns']:3d} {s['size_filter']:13s} "
              f"{s.get('seconds_mean')} s (size filter {s.get('size_filter_seconds_mean')} s, estimation "
              f"{s.get('estimate_seconds_mean')} s, {s.get('rounds_mean')} rounds)"
              + (f"; reference AIM recorded {s['reference_aim_recorded']}" if "reference_aim_recorded" in s else ""),
              file=sys.stderr)


if __name__ == "__main__":
    main()
