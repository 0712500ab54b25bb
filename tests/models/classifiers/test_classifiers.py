from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from privehr.models.classifiers import build_classifier


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("name", ["logistic_regression", "grud"])
def test_weights_depend_on_the_seed_alone_even_when_threads_build_at_once(name):
    serial = {seed: _weights(build_classifier(name, 5, 4, seed=seed, hidden_size=8)) for seed in range(4)}
    assert not torch.equal(serial[0], serial[1])
    with ThreadPoolExecutor(max_workers=4) as pool:
        seeds = [s for _ in range(8) for s in range(4)]
        built = list(pool.map(lambda s: (s, _weights(build_classifier(name, 5, 4, seed=s, hidden_size=8))), seeds))
    for seed, weights in built:
        assert torch.equal(weights, serial[seed])


def test_registry_matches_the_config_and_every_method_has_a_search_space():
    from typing import get_args

    from privehr.core.config import Model
    from privehr.models.classifiers import CLASSIFIERS, classifier_inputs
    from privehr.models.methods import TRAINING_METHODS

    assert set(CLASSIFIERS) == set(get_args(Model))
    values = np.zeros((4, 3, 2), dtype=np.float32)
    for name in CLASSIFIERS:
        assert all(name in method.search_spaces for method in TRAINING_METHODS.values())
        model = build_classifier(name, 2, 3, seed=0, hidden_size=4)
        assert model(*classifier_inputs(name, values, values, values)).shape == (4,)
