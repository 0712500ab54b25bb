"""Private posterior inference (Su et al. 2023, Section 4): DP-NF-VI, likelihoods, the exact posterior for
comparison, the two routes compared, the repeated-measures model, Rubin's rules and summaries over runs."""
