"""Units of work: all file IO, Prefect tasks, and calls into ``models``."""
