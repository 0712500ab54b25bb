"""The README stays a ten-minute read (at most 250 lines; results and findings live in docs/ and bench/README.md),
and every relative link in it points at a file of the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250, "move results and research findings to docs/ or bench/README.md"


def test_every_relative_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"^[a-z]+://|^mailto:", link)]
    assert local, "the README links its docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
