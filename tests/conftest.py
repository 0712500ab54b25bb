"""Shared fixtures. Prefect gets a throw-away home and result storage before it is imported."""

import os
import tempfile
from pathlib import Path

_PREFECT_TMP = Path(tempfile.mkdtemp(prefix="privehr-prefect-"))
os.environ["PREFECT_HOME"] = str(_PREFECT_TMP / "home")
os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(_PREFECT_TMP / "storage")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)
# One accounting cache (privehr/io/accounting_cache.py) for this test run: its workers (pytest-xdist gives them one
# TESTRUNUID) and every command they start share calibrations; a new test run starts from an empty one.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
_CACHE = Path(tempfile.gettempdir()) / f"privehr-accounting-{_RUN}" if _RUN else _PREFECT_TMP / "accounting"
os.environ["PRIVEHR_CACHE_DIR"] = str(_CACHE)
if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, for torch and BLAS alike
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402

# Prefect and torch configure their logging handlers with the sys.stderr of the moment they are first imported: here,
# the session's, never a test's capture stream that closes when the test ends (which later tests, in an order that
# pytest-xdist chooses, then wrote to)
import prefect  # noqa: E402,F401
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DEMO_EXTRACT = SHARED / "mimic_extract" / "demo" / "all_hourly_data.h5"
HARROD_TABLE = SHARED / "reference_data" / "harrod_ehr" / "EHR_dataset.csv"


@pytest.fixture(scope="session", autouse=True)
def _accountant_calls_once_per_session():
    """The suite runs the same configurations in many tests; each (sigma, q, T, delta) and each calibration is
    computed once per session here. The product builds every plan once per release and caches nothing (the
    pipeline test counts its calibrations through this memo); this only spares the tests the repeats across runs."""
    import functools

    import privehr.models.privacy.release_plan as release_plan

    saved = release_plan.calibrate_noise_multiplier, release_plan.epsilon_spent
    release_plan.calibrate_noise_multiplier = functools.cache(saved[0])
    release_plan.epsilon_spent = functools.cache(saved[1])
    yield
    release_plan.calibrate_noise_multiplier, release_plan.epsilon_spent = saved


@pytest.fixture(autouse=True)
def _no_handler_outlives_its_captured_stream():
    """torch, Prefect and DVC bind logging handlers to sys.stderr when they are first imported or set up; where that
    happens inside a test with captured output, the handler keeps the test's capture stream, closed when the test
    ends, and a later test's log record raises "I/O operation on closed file" (which test depends on the order, so
    on how pytest-xdist shares the files out). After each test such a handler writes to the session's stderr."""
    import logging
    import sys

    yield
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", []):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                handler.stream = sys.stderr  # not setStream, which flushes the closed stream first


def _shared(path: Path, what: str) -> Path:
    if not path.exists():
        message = f"{path} not found: {what} lives in ../shared (present in CI, absent from a plain clone)"
        if os.environ.get("CI"):  # CI has ../shared: a test that skipped there would pass without checking anything
            pytest.fail(message + "; under CI a real-data test fails rather than skip")
        pytest.skip(message)
    return path


# The files that take longest (minutes: their own Prefect servers, pipelines and CPU hogs) go to the workers first,
# so that the workers finish together instead of one waiting for the last slow file; measured in CI's log
# (--durations) and reordered by hand when that changes.
SLOW_FIRST = ["test_no_orphans.py", "test_bad_input_cli.py", "flows/test_privacy_attacks.py",
              "flows/test_prefect_ui_browser.py", "flows/test_synthesis_bundle.py", "flows/test_one_ledger.py",
              "flows/test_release_bundle.py", "flows/test_no_phi_in_prefect.py", "flows/test_own_table_synthesis.py",
              "flows/test_fuzz_inputs.py", "flows/test_dask_runner.py", "flows/test_pipeline_flow.py",
              "flows/test_synthesis_flow.py"]


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(SLOW_FIRST) if path.endswith("tests/" + name)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: the order within a file, and among the other files, is kept


@pytest.fixture(scope="session")
def real_demo_extract() -> Path:
    """The real MIMIC-Extract output built from the MIMIC-III demo (only beside a CI checkout)."""
    return _shared(DEMO_EXTRACT, "the real demo extract")


@pytest.fixture(scope="session")
def harrod() -> Path:
    """Harrod et al.'s hemodynamic EHR table of Su et al. 2023 (transposed CSV; only beside a CI checkout)."""
    return _shared(HARROD_TABLE, "the Harrod table")


@pytest.fixture(scope="session")
def small_extract(tmp_path_factory) -> Path:
    """A simulated all_hourly_data.h5 of 300 stays in the exact MIMIC-Extract layout. About 15 die in the ICU: the
    seed is one whose hash split (split.seed 1) leaves deaths in train, dev and test (8, 2 and 5), as a run needs."""
    from privehr.io.demo_data import write_demo_mimic

    path = tmp_path_factory.mktemp("extract") / "all_hourly_data.h5"
    write_demo_mimic(path, n_stays=300, seed=4)
    return path
