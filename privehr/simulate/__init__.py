"""Demo-data simulators: MIMIC-Extract-shaped stays and Harrod-shaped EHR tables drawn from published marginals.

No patient is behind any value they produce; ``privehr.io.demo_data`` writes them in the real on-disk formats.
"""
