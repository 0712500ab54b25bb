"""What a person reads first and last: the report's heading and banner, the console's short table and next
commands, the fits' k of N with the time left, and AUROC panels on one y-range."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from privehr.core.config import DataConfig
from privehr.io.demo_data import write_demo_mimic
from privehr.io.figures import auroc_vs_epsilon_figure
from privehr.tasks.progress import fits_line
from privehr.tasks.report import _task_and_source, console_table

RUNS = [{"label": "mort_icu", "model": "logistic_regression", "method": "dp_sgd"},
        {"label": "los_3", "model": "grud", "method": "non_private"}]


def test_the_report_opens_on_the_task_and_says_the_data_is_simulated(tmp_path):
    write_demo_mimic(tmp_path / "sim.h5", n_stays=20, seed=1)
    text = _task_and_source(tmp_path / "run-1", RUNS, DataConfig(hdf5_path=tmp_path / "sim.h5", window_hours=12),
                            {"stays": 17})
    heading, banner, facts = text.strip().split("\n\n")
    assert heading == ("# Risk of death in the ICU (mort_icu) and ICU stay longer than 3 days (los_3) from the "
                       "first 12 hours of an ICU stay")
    assert banner.startswith("> **Simulated data.**") and "no patient" in banner
    assert "run-1" in facts and "17 stays" in facts and "DP-SGD, non-private" in facts and "2 fits" in facts


def test_a_file_the_simulator_did_not_write_is_called_patients_records(tmp_path):
    import h5py

    from privehr.io.mimic_extract import SIMULATED_ATTR

    write_demo_mimic(tmp_path / "real.h5", n_stays=20, seed=1)
    with h5py.File(tmp_path / "real.h5", "a") as h5:
        del h5.attrs[SIMULATED_ATTR]
    text = _task_and_source(tmp_path / "run-1", RUNS, DataConfig(hdf5_path=tmp_path / "real.h5"), {"stays": 17})
    assert "> **Patients' records.**" in text and "Simulated" not in text


@pytest.mark.parametrize("damage", ["gone", "not_hdf5", "truncated"])
def test_a_data_file_gone_or_unreadable_since_the_run_gets_the_cannot_say_banner(tmp_path, damage):
    path = tmp_path / "data.h5"
    if damage != "gone":
        write_demo_mimic(path, n_stays=20, seed=1)
        raw = path.read_bytes()
        path.write_bytes(b"not HDF5 at all\n" if damage == "not_hdf5" else raw[:len(raw) // 3])
    text = _task_and_source(tmp_path / "run-1", RUNS, DataConfig(hdf5_path=path), {"stays": 17})
    banner = text.strip().split("\n\n")[1]
    assert banner == f"> **Data:** `{path}` is no longer readable; the report cannot say where it came from."


def _summary(bundle: str | None) -> dict:
    rows = [{"label": "mort_icu", "model": "grud", "method": "dp_sgd", "loss": "bce", "target_epsilon": 1.0,
             "auroc_median": 0.7312, "epsilon_prv": 0.98, "guarantee": "DP"},
            {"label": "mort_icu", "model": "grud", "method": "non_private", "loss": "bce", "target_epsilon": None,
             "auroc_median": 0.8, "epsilon_prv": None, "guarantee": "not DP (non-private)"},
            {"label": "mort_icu", "model": "grud", "method": "expm_nf", "loss": "bce", "target_epsilon": 2.0,
             "auroc_median": None, "epsilon_prv": None,
             "guarantee": "not DP (ExpM+NF: eps~ is a training parameter, no guarantee is proven)"},
            {"label": "mort_icu", "model": "grud", "method": "expm_nf", "loss": "bce", "target_epsilon": 0.1,
             "auroc_median": 0.5, "epsilon_prv": None,  # the median over posterior draws: another statistic
             "guarantee": "not DP (ExpM+NF: eps~ is a training parameter, no guarantee is proven)"}]
    cells = [{"label": "mort_icu", "model": "grud", "method": "dp_sgd", "loss": "bce", "target_epsilon": 1.0,
              "auroc_median": 0.7312, "auroc_ci": [0.61, 0.79]},
             {"label": "mort_icu", "model": "grud", "method": "non_private", "loss": "bce", "target_epsilon": None,
              "auroc_median": 0.8, "auroc_ci": [0.7, 0.88]},
             {"label": "mort_icu", "model": "grud", "method": "expm_nf", "loss": "bce", "target_epsilon": 0.1,
              "auroc_median": 0.6012, "auroc_ci": [0.51, 0.68]}]
    return {"results": rows, "evaluation": {"cells": cells, "confidence": 0.95},
            "release": {"path": bundle} if bundle else None}


def test_the_console_ends_on_a_short_table_and_the_next_commands():
    lines = console_table(_summary("artifacts/run-1/release")).splitlines()
    head = lines[0].split()
    assert head[:4] == ["label", "model", "method", "epsilon"] and "guarantee" in head
    dp, exact, expm = lines[1:4]
    assert "DP-SGD (bce)" in dp and "0.98" in dp and "0.731 [0.610, 0.790]" in dp and dp.endswith("DP")
    assert "non-private (bce)" in exact and "0.800 [0.700, 0.880]" in exact and " - " in exact
    assert "eps~ 2" in expm and "n/a" in expm and expm.endswith("not DP (ExpM+NF)")  # no AUROC: said, not blank
    # the AUROC beside an interval is the one the interval is of (a 600-stay run printed 0.500 [0.511, 0.685]: the
    # row's median over ExpM+NF's posterior draws beside the interval of the one release its predictions hold)
    assert "0.601 [0.510, 0.680]" in lines[4]
    assert all(len(line) < 130 for line in lines[:4])  # the fifteen columns of results.csv stay in the file
    commands = [line.split()[:3] for line in lines[lines.index("next:") + 1:]]
    assert commands == [["privehr", "release", "show"], ["privehr", "predict", "artifacts/run-1/release"],
                        ["privehr", "release", "verify"]]
    assert "next:" not in console_table(_summary(None))  # no bundle, no command to read one


def test_fits_say_how_many_are_done_and_how_long_is_left():
    assert fits_line(3, 12, 90.0) == "fits: 3 of 12 done in 1 min 30 s; about 4 min 30 s left"
    assert fits_line(12, 12, 4000.0) == "fits: 12 of 12 done in 1 h 6 min"


def test_the_auroc_panels_share_one_y_range():
    summary = pd.DataFrame(
        [{"label": lb, "model": m, "method": "dp_sgd", "loss": "bce", "target_epsilon": e, "auroc_median": a}
         for lb, m, base in (("mort_icu", "grud", 0.55), ("los_3", "logistic_regression", 0.8))
         for e, a in ((1.0, base), (10.0, base + 0.1))]
        + [{"label": "los_3", "model": "logistic_regression", "method": "non_private", "loss": "bce",
            "target_epsilon": math.inf, "auroc_median": 0.95}])
    fig = auroc_vs_epsilon_figure(summary)
    limits = {ax.get_ylim() for ax in fig.axes}
    plt.close(fig)
    assert len(fig.axes) == 2 and len(limits) == 1
    low, high = limits.pop()
    assert low <= 0.55 and high >= 0.95
