"""Rebuild ``mimic_extract_variables.csv`` from MIMIC-Extract's published aggregate resources.

Run from the repository root with ``../shared/mimic_extract`` beside it::

    python privehr/resources/build_mimic_variables.py ../shared/mimic_extract

Sources (MLforHealth/MIMIC_Extract @ d8d2dea, MIT, "Copyright (c) 2019 MLforHealth"):
``level2_104.txt`` (names in file order), ``level2_stats_partial.csv`` (mean, sd, % missing over all
hours), ``variable_ranges.csv`` (outlier/valid bounds), ``item_id_stat.csv`` (per-itemid stats for
the variables the partial table lacks). Twelve variables appear in none of them; their values below
are typical adult ICU figures, marked ``source=clinical_default``. Only aggregates, no records.
"""

import sys
from pathlib import Path

import pandas as pd

CLINICAL_DEFAULTS = {  # name: (mean, sd, missing %, valid low, valid high)
    "basophils": (0.3, 0.3, 99.0, 0.0, 20.0),
    "creatinine urine": (80.0, 50.0, 99.8, 1.0, 1000.0),
    "lactate": (2.5, 2.3, 96.0, 0.4, 30.0),
    "lactate dehydrogenase": (400.0, 600.0, 99.3, 54.0, 33000.0),
    "lymphocytes": (12.0, 9.0, 98.5, 0.0, 100.0),
    "mean corpuscular hemoglobin": (30.0, 2.3, 92.5, 15.0, 50.0),
    "mean corpuscular hemoglobin concentration": (33.5, 1.4, 92.5, 20.0, 45.0),
    "mean corpuscular volume": (90.0, 6.0, 92.5, 50.0, 150.0),
    "monocytes": (5.0, 3.0, 98.5, 0.0, 100.0),
    "neutrophils": (78.0, 12.0, 98.5, 0.0, 100.0),
    "phosphate": (3.5, 1.3, 97.0, 0.5, 20.0),
    "ph urine": (6.0, 0.8, 99.7, 4.0, 9.0),
}


def build(src: Path) -> pd.DataFrame:
    names = [line.strip() for line in (src / "level2_104.txt").read_text().splitlines() if line.strip()]
    partial = pd.read_csv(src / "level2_stats_partial.csv").set_index("LEVEL2")
    ranges = pd.read_csv(src / "variable_ranges.csv")
    ranges = ranges[ranges["LEVEL1"].isna() | (ranges["LEVEL1"] == "Bilirubin (total)")]
    ranges.index = ranges["LEVEL2"].str.lower()
    items = pd.read_csv(src / "item_id_stat.csv").groupby("LEVEL2").agg(
        mean=("mean", "mean"), stdev=("stdev", "mean"), missing=("missing percent", "min"))
    rows = []
    for name in names:
        if name in partial.index:
            mean, sd, miss = partial.loc[name, ["mean", "stdev", "missing_percent"]]
            source = "summary_stats"
        elif name in items.index:
            mean, sd, miss = items.loc[name, ["mean", "stdev", "missing"]]
            source = "item_id_stat"
        else:
            mean, sd, miss = CLINICAL_DEFAULTS[name][:3]
            source = "clinical_default"
        if name in ranges.index and pd.notna(ranges.loc[name, "VALID LOW"]):
            r = ranges.loc[name]
            lo, hi = float(r["VALID LOW"]), float(r["VALID HIGH"])
            olo, ohi = float(r["OUTLIER LOW"]), float(r["OUTLIER HIGH"])
        elif name in CLINICAL_DEFAULTS:
            lo, hi = CLINICAL_DEFAULTS[name][3:]
            olo, ohi = lo, hi
        else:  # no published range: a wide, non-negative band around the observed distribution
            lo, hi = 0.0, float(mean + 8 * sd)
            olo, ohi = lo, hi
        rows.append(dict(level2=name, mean=float(mean), sd=float(sd), missing_percent=float(miss),
                         valid_low=lo, valid_high=hi, outlier_low=olo, outlier_high=ohi, source=source))
    return pd.DataFrame(rows)


if __name__ == "__main__":
    out = Path(__file__).with_name("mimic_extract_variables.csv")
    build(Path(sys.argv[1])).to_csv(out, index=False, float_format="%.6g")
    print(f"wrote {out}")
