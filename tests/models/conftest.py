"""Fixtures of the models' tests."""

import pytest
import torch


@pytest.fixture()
def one_thread():
    """Small models gain nothing from intra-op threads, and on a shared 2-core machine the threads contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
