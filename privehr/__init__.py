"""privehr: workflow-orchestrated learning from clinical data under differential privacy."""

__version__ = "0.1.0"
