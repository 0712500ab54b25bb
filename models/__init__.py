"""Pure math: torch modules, trainers, splits and featurisers. No Prefect, no file IO."""
