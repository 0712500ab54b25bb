"""Evaluation: binary metrics, bootstrap intervals, calibration, subgroups, the grid's summaries and DP-SGD curve
checks; for synthetic tables, fidelity, train-on-synthetic utility, the TSTR panel and anomaly detection."""
