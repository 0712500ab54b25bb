"""Clinical data as arrays: the MIMIC-Extract cohort and its labels, hourly features and profiles, MICE imputation,
patient-level splits, quarantine rules and the static table."""
