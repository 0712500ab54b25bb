import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    """One temporary Prefect server and database for every flow test."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
