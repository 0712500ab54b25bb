"""The noisy patient count: its noise has the two-sided geometric distribution, so neighbouring counts give
output probabilities within e^epsilon of each other."""

import math

import numpy as np
import pytest

from privehr.models.privacy.noisy_count import geometric_noise_sd, noisy_count


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_the_noise_is_two_sided_geometric(epsilon):
    rng = np.random.default_rng(0)
    draws = np.array([noisy_count(1000, epsilon, rng, minimum=0) - 1000 for _ in range(100_000)])
    a = math.exp(-epsilon)
    for k in range(-3, 4):
        exact = (1 - a) / (1 + a) * a ** abs(k)
        assert np.mean(draws == k) == pytest.approx(exact, abs=4 * math.sqrt(exact / 100_000) + 1e-4), k
        # P(c + Z = c + k) / P(c + 1 + Z = c + k) = a^(|k| - |k - 1|), within e^epsilon: the DP guarantee
        assert a ** (abs(k) - abs(k - 1)) <= math.exp(epsilon) + 1e-12
    assert np.std(draws) == pytest.approx(geometric_noise_sd(epsilon), rel=0.05)


def test_the_count_is_clamped_and_a_bad_epsilon_refused():
    assert noisy_count(0, 0.1, np.random.default_rng(1), minimum=1) >= 1
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            noisy_count(10, bad, np.random.default_rng(0))
