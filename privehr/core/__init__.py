"""The bottom layer: typed configuration, errors and table specs. Imports nothing else of privehr."""
