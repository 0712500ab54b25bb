"""The ledger is tamper-evident: an edited epsilon, a deleted middle line, two lines swapped, a cut file and a
replaced key are each refused naming the line, by a run's read and by `privehr privacy ledger --verify` (exit status
1; 0 for an intact ledger, --json too). Once a ledger has a key, an unchained line, a missing head or an emptied file
is tampering; an old unchained ledger is chained once, by `privehr privacy ledger --migrate`."""

import json
import os
import stat
from pathlib import Path

import pytest

from privehr.cli import main
from privehr.core.errors import InputError
from privehr.io.ledger import Ledger, LedgerTampered, record_release, reserve, verify_ledger
from privehr.models.privacy.ledger import LedgerEntry


def _entry(epsilon: float, what: str) -> LedgerEntry:
    return LedgerEntry("", "", "dp", epsilon=epsilon, what=what)


def _ledger(path: Path) -> Ledger:
    """Five lines: four reservations and a release."""
    ledger = Ledger(path)
    ledger.check_writable()
    ids, _, _ = reserve(ledger, "d", "r1", {k: _entry(1.0, k) for k in "abcd"}, None, 1e-5, False, "releases")
    record_release(path, ids["a"], _entry(1.0, "a"))
    return ledger


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _edit_epsilon(path):
    lines = _lines(path)
    lines[2] = lines[2].replace('"epsilon": 1.0', '"epsilon": 0.1')
    path.write_text("".join(lines))
    return 3


def _delete_middle(path):
    lines = _lines(path)
    del lines[2]
    path.write_text("".join(lines))
    return 3


def _swap(path):
    lines = _lines(path)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines))
    return 2


def _truncate_lines(path):
    path.write_text("".join(_lines(path)[:3]))
    return 4


def _truncate_bytes(path):
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a cut inside the last line
    return 5


def _replace_key(path):
    Path(str(path) + ".key").write_bytes(os.urandom(32))
    return 1


def _delete_head(path):
    Path(str(path) + ".head").unlink()
    return None


TAMPERING = {"edit_epsilon": _edit_epsilon, "delete_middle_line": _delete_middle, "swap_two_lines": _swap,
             "truncate_lines": _truncate_lines, "truncate_bytes": _truncate_bytes, "replace_key": _replace_key,
             "delete_head": _delete_head}


def test_an_intact_ledger_verifies_and_its_files_are_owner_only(tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    assert verify_ledger(path)["ok"] and len(Ledger(path).read()) == 5
    for f in (path, Path(f"{path}.key"), Path(f"{path}.head")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert main(["privacy", "ledger", "--ledger", str(path), "--verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_a_tampered_ledger_is_refused_naming_the_line(how, tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    line = TAMPERING[how](path)
    report = verify_ledger(path)
    assert not report["ok"] and report["line"] == line, report
    with pytest.raises(InputError) as refused:  # what every run's budget check reads
        reserve(Ledger(path), "d", "r2", {"e": _entry(1.0, "e")}, None, 1e-5, False, "releases")
    message = str(refused.value)
    assert (f"line {line}" if line else "its head") in message and "\n" not in message
    assert main(["privacy", "ledger", "--ledger", str(path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and (f"line {line}" if line else "head") in out
    assert main(["privacy", "ledger", "--ledger", str(path), "--verify", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["line"] == line
    assert main(["privacy", "ledger", "--ledger", str(path)]) == 2  # the totals are not shown from it either


def test_deleting_the_last_releases_does_not_refund_their_epsilon(tmp_path):
    """The issue's case: the last two lines deleted by hand (and the head rewritten without the key) are found."""
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    path.write_text("".join(_lines(path)[:-2]))
    with pytest.raises(LedgerTampered, match="line 4"):
        Ledger(path).read()
    head = Path(f"{path}.head")
    forged = json.loads(head.read_text()) | {"lines": 3}
    head.write_text(json.dumps(forged))
    with pytest.raises(LedgerTampered, match="head"):
        Ledger(path).read()


def _mixed_ledger(path: Path) -> None:
    """What an older privehr left: two unchained lines, then lines chained from them (t_0 covers their bytes)."""
    from privehr.models.privacy.ledger import chain_start, chain_tag, head_tag

    old = [json.dumps(LedgerEntry("d", f"old#{i}", "dp", epsilon=0.5).as_dict()) for i in range(2)]
    key, previous, lines = os.urandom(32), chain_start("\n".join(old)), list(old)
    for seq in (3, 4, 5):
        content = LedgerEntry("d", f"new#{seq}", "dp", epsilon=1.0).as_dict()
        previous = chain_tag(key, previous, seq, content)
        lines.append(json.dumps({**content, "seq": seq, "chain": previous}))
    for f, data in ((path, ("\n".join(lines) + "\n").encode()), (Path(f"{path}.key"), key),
                    (Path(f"{path}.head"), json.dumps({"lines": 5, "tag": previous,
                                                       "mac": head_tag(key, 5, previous)}).encode())):
        f.write_bytes(data)
        f.chmod(0o600)


def test_an_older_ledger_whose_chain_covers_its_unchained_lines_is_read(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _mixed_ledger(path)
    assert verify_ledger(path) | {"head_lag": 0} == {"ledger": str(path), "ok": True, "lines": 5, "unchained": 2,
                                                     "line": None, "problem": None, "head_lag": 0}
    reserve(Ledger(path), "d", "r2", {"e": _entry(1.0, "e")}, None, 1e-5, False, "releases")
    assert verify_ledger(path)["ok"] and len(Ledger(path).read()) == 6
    text = path.read_text()
    path.write_text(text.replace('"epsilon": 0.5', '"epsilon": 0.05', 1))  # an old line edited: the chain covers it
    assert not verify_ledger(path)["ok"]
    path.write_text(text + json.dumps(LedgerEntry("d", "late#1", "dp", epsilon=0.1).as_dict()) + "\n")
    assert verify_ledger(path)["line"] == 7  # an unchained line after the chain began: inserted by hand


def _strip_chain(path: Path) -> None:
    """The downgrade: every line's chain fields removed and the head deleted, which made any ledger an 'old' one."""
    lines = [{k: v for k, v in json.loads(line).items() if k not in ("seq", "chain")} for line in _lines(path)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    Path(f"{path}.head").unlink()


def _spend(path: Path) -> float:
    from privehr.io.ledger import ledger_totals

    return sum(t.epsilon_dp for t in ledger_totals(path))


@pytest.mark.parametrize("how", ["strip_chain", "strip_then_edit_and_delete", "strip_and_delete_key", "empty_file",
                                 "empty_file_keep_head", "delete_ledger_and_head"])
def test_a_downgraded_or_emptied_ledger_is_refused_in_one_line_and_spends_nothing(how, tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    before = _spend(path)
    if how.startswith("strip"):
        _strip_chain(path)
        if how == "strip_then_edit_and_delete":
            lines = _lines(path)
            path.write_text(lines[0].replace('"epsilon": 1.0', '"epsilon": 0.01') + "".join(lines[2:]))
        if how == "strip_and_delete_key":
            Path(f"{path}.key").unlink()
    elif how == "empty_file":
        path.write_text("")
        Path(f"{path}.head").unlink()
    elif how == "empty_file_keep_head":
        path.write_text("")
    else:
        path.unlink()
        Path(f"{path}.head").unlink()
    assert not verify_ledger(path)["ok"]
    with pytest.raises(InputError) as refused:  # what every run's budget check reads: refused, nothing appended
        reserve(Ledger(path), "d", "r2", {"e": _entry(0.1, "e")}, 1.5, 1e-5, False, "releases")
    assert "\n" not in str(refused.value) and ("chain" in str(refused.value) or "head" in str(refused.value))
    assert main(["privacy", "ledger", "--ledger", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") <= 1 and "Traceback" not in error
    if how != "delete_ledger_and_head":
        assert main(["privacy", "ledger", "--ledger", str(path), "--verify"]) == 1
    assert before > 0


def test_an_unchained_ledger_is_migrated_once_by_an_explicit_command_that_says_what_it_chains(tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    old = [LedgerEntry("d", f"old#{i}", "dp", epsilon=0.5, created_utc=f"2026-01-0{i + 1}T00:00:00+00:00")
           for i in range(3)]
    path.write_text("".join(json.dumps(e.as_dict()) + "\n" for e in old))
    path.chmod(0o600)
    with pytest.raises(LedgerTampered, match="--migrate"):
        Ledger(path).read()
    assert main(["privacy", "ledger", "--ledger", str(path), "--migrate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chained"] == 3 and report["datasets"] == 1 and report["first_utc"].startswith("2026-01-01")
    assert Ledger(path).read() == old and verify_ledger(path)["ok"]
    assert {stat.S_IMODE(f.stat().st_mode) for f in (path, Path(f"{path}.key"), Path(f"{path}.head"))} == {0o600}
    assert main(["privacy", "ledger", "--ledger", str(path), "--migrate"]) == 0
    assert "nothing was written" in capsys.readouterr().out
    _strip_chain(path)  # a migrated ledger stripped again: refused, and a migration of it says so
    with pytest.raises(LedgerTampered):
        Ledger(path).read()


def test_a_new_ledger_has_a_head_from_its_first_moment(tmp_path):
    path = tmp_path / "ledger.jsonl"
    Ledger(path).check_writable()
    assert Path(f"{path}.head").exists() and verify_ledger(path)["ok"] and Ledger(path).read() == []


@pytest.mark.parametrize("which, mode", [("", 0o666), (".key", 0o644), (".head", 0o660)])
def test_a_ledger_file_others_can_read_or_write_is_refused_naming_it(which, mode, tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    Path(f"{path}{which}").chmod(mode)
    with pytest.raises(InputError, match=f"chmod 600 {path}{which}"):
        Ledger(path).read()
    assert main(["privacy", "ledger", "--ledger", str(path)]) == 2
    assert "not owner-only" in capsys.readouterr().err


def test_a_crash_between_a_line_and_its_head_is_not_tampering(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = _ledger(path)
    head = Path(f"{path}.head").read_text()
    reserve(ledger, "d", "r2", {"e": _entry(1.0, "e")}, None, 1e-5, False, "releases")
    Path(f"{path}.head").write_text(head)  # the head as it was before the last append
    report = verify_ledger(path)
    assert report["ok"] and report["head_lag"] == 1


def test_a_run_writes_owner_only_files_and_gives_the_umask_back():
    import tempfile

    from privehr.io.permissions import private_run

    @private_run
    def run(folder: str) -> int:
        Path(folder, "patients.csv").write_text("x")
        Path(folder, "intermediate").mkdir()
        return os.umask(0o077)

    before = os.umask(0o022)
    try:
        with tempfile.TemporaryDirectory() as folder:
            assert run(folder) == 0o077
            assert stat.S_IMODE(Path(folder, "patients.csv").stat().st_mode) == 0o600
            assert stat.S_IMODE(Path(folder, "intermediate").stat().st_mode) == 0o700
        assert os.umask(0o022) == 0o022  # restored after the in-process run
    finally:
        os.umask(before)


def test_a_ledger_with_bytes_that_are_not_utf8_or_a_key_that_is_a_directory_is_one_line(tmp_path, capsys):
    ledger = _ledger(tmp_path / "ledger.jsonl")
    raw = ledger.path.read_bytes()
    ledger.path.write_bytes(raw.replace(b'"what": "b"', b'"what": "\xff\xfe"', 1))
    assert main(["privacy", "ledger", "--ledger", str(ledger.path)]) == 2
    err = capsys.readouterr().err
    assert "unreadable line 2 (NotUTF8Text)" in err and len(err.strip().splitlines()) == 1
    assert main(["privacy", "ledger", "--ledger", str(ledger.path), "--migrate"]) == 2
    assert "NotUTF8Text" in capsys.readouterr().err
    ledger.path.write_bytes(raw)
    ledger.key_path.unlink()
    ledger.key_path.mkdir(mode=0o700)
    assert main(["privacy", "ledger", "--ledger", str(ledger.path)]) == 2
    err = capsys.readouterr().err
    assert "key" in err and "cannot be read" in err and len(err.strip().splitlines()) == 1
