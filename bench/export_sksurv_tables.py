"""Write the clinical tables of bench/mixed_type_synthesis.py as CSV + spec YAML, for a machine without scikit-survival.

    python bench/export_sksurv_tables.py [--tables whas500 gbsg2 aids veterans_lung_cancer flchain breast_cancer]
                                         [--out-dir bench/data]
    python bench/mixed_type_synthesis.py --data-dir bench/data ...

Needs ``pip install scikit-survival`` here only. Each table becomes ``<name>.csv`` (the hand-written spec's columns in
its order: features, the follow-up time and the 0/1 event; rare categories merged and columns left out as that spec
says; missing values empty) and ``<name>.yaml`` (the spec itself, as privehr's ``load_ehr_spec`` reads it). Nothing
is read back or checked here: mixed_type_synthesis.py reads both through privehr's table reader, as it does for the
tables it exports itself. ``bench/data/`` is git-ignored (the tables are scikit-survival's, not this repository's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: the bench that owns the specs

from mixed_type_synthesis import ROOT, SPECS, export_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "data")
    args = parser.parse_args()
    written = [export_table(name, args.out_dir) for name in args.tables]
    print(json.dumps(written, indent=2))


if __name__ == "__main__":
    main()
