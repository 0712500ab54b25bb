"""File formats: MIMIC-Extract HDF5, EHR tables, GX suites and validation, the ledger file, figures and pages.

No Prefect here; tasks call these readers and writers. They may use the pure math of ``privehr.models``.
"""
