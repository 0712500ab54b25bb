"""Prefect flows: wiring of ``tasks`` into DAGs, nothing else."""
