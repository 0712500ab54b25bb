"""Private files are owner-only however they are written: a fresh file, one written over an existing 0644 file, a
tree a third-party tool wrote with its own modes."""

import os
import stat

import pytest

from privehr.cli import main
from privehr.io.permissions import make_private, private_file


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask():
    before = os.umask(0o022)  # a shell's usual umask: new files 0644
    yield
    os.umask(before)


def test_a_private_file_replaces_an_existing_world_readable_file_owner_only(tmp_path, open_umask):
    path = tmp_path / "out.csv"
    path.write_text("old")
    os.chmod(path, 0o644)
    with private_file(path) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new" and _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_private_file_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, open_umask):
    path = tmp_path / "new" / "out.csv"
    with pytest.raises(ValueError), private_file(path) as tmp:
        tmp.write_text("half")
        raise ValueError
    assert not path.exists() and list(path.parent.iterdir()) == []
    assert _mode(path.parent) == 0o700


def test_make_private_takes_group_and_other_bits_off_a_tree_without_following_links(tmp_path, open_umask):
    tree, outside = tmp_path / "tree", tmp_path / "outside.txt"
    (tree / "ab").mkdir(parents=True)
    (tree / "ab" / "cdef").write_text("x")
    os.chmod(tree / "ab" / "cdef", 0o444)
    outside.write_text("y")
    (tree / "link").symlink_to(outside)
    assert make_private(tree) == 3
    assert {_mode(p) for p in [tree, tree / "ab"]} == {0o700} and _mode(tree / "ab" / "cdef") == 0o400
    assert _mode(outside) == 0o644


def test_spec_draft_out_is_owner_only_also_over_an_existing_file(tmp_path, open_umask, capsys):
    """The draft holds the table's observed extremes and every category present."""
    table, spec = tmp_path / "t.csv", tmp_path / "specs" / "t.yaml"
    table.write_text("age,sex,died\n61,F,0\n74,M,1\n58,F,0\n")
    assert main(["spec", "draft", str(table), "--out", str(spec)]) == 0
    assert _mode(spec) == 0o600
    os.chmod(spec, 0o644)
    assert main(["spec", "draft", str(table), "--out", str(spec), "--force"]) == 0
    assert _mode(spec) == 0o600 and "valid_high" in spec.read_text()
