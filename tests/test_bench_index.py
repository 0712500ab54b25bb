"""bench/ keeps the benchmarks the docs quote, each listed in bench/README.md's table with its claim: a script not in
the table, or a row without its script, fails here (issue 58)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_bench_script_is_listed_with_its_claim_and_every_listed_one_exists():
    readme = (ROOT / "bench" / "README.md").read_text()
    table = readme[readme.index("| script | the claim it measures |"):]
    table = table[:table.index("\n\n")]
    listed = set(re.findall(r"`([a-z_]+\.py)`", table))
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert listed == scripts, (sorted(scripts - listed), sorted(listed - scripts))
    for script in scripts:  # and each compiles (a removed helper would leave a broken import behind)
        compile((ROOT / "bench" / script).read_text(), script, "exec")
