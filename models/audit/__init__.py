"""Privacy audits of trained models: LiRA (Carlini et al. 2022) and the one-run audit (Steinke, Nasr, Jagielski 2023)."""
