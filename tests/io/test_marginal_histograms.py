"""The per-column marginal figure of a mixed-type table: written, one panel per column, no figure left open."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.image import imread

from privehr.io.figures import marginal_histograms


def test_marginal_histograms_of_two_synthesizers(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n = 200
    real = pd.DataFrame({"x": rng.normal(size=n), "age": rng.integers(20, 90, n), "sex": rng.integers(0, 2, n),
                         "eth": rng.choice(["a", "b", "c"], n), "sev": rng.integers(0, 4, n)})
    kinds = {"x": "numeric", "age": "integer", "sex": "binary", "eth": "categorical", "sev": "ordinal"}
    maf = real.assign(x=real["x"] + 0.5, sex=rng.uniform(0, 1, n))  # a MAF emitting 0.37-like values
    copy = real.sample(frac=1, random_state=1)

    panels = []
    original = plt.subplots

    def spy(*args, **kwargs):
        fig, axes = original(*args, **kwargs)
        panels.append(axes)
        return fig, axes

    monkeypatch.setattr(plt, "subplots", spy)
    out = marginal_histograms(real, {"maf": maf, "copy": copy}, kinds, tmp_path / "fig" / "marginals.png",
                              categories={"eth": ["a", "b", "c", "d"]})
    assert out == tmp_path / "fig" / "marginals.png" and out.stat().st_size > 10_000
    assert imread(out).ndim == 3
    axes = panels[0].ravel()
    assert [ax.get_title() for ax in axes[:5]] == ["x", "age", "sex", "eth", "sev"]
    sex_ticks = [t.get_text() for t in axes[2].get_xticklabels()]
    assert sex_ticks == ["0", "1", "other"]  # the continuous "binary" shows up as its own bar
    assert [t.get_text() for t in axes[3].get_xticklabels()] == ["a", "b", "c", "d"]
    assert not plt.get_fignums()
