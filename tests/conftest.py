"""Shared fixtures. Prefect gets a throw-away home and result storage before it is imported."""

import os
import tempfile
from pathlib import Path

_PREFECT_TMP = Path(tempfile.mkdtemp(prefix="privehr-prefect-"))
os.environ["PREFECT_HOME"] = str(_PREFECT_TMP / "home")
os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(_PREFECT_TMP / "storage")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)

import pytest  # noqa: E402

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


def _shared(path: Path, what: str) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found: {what} lives in ../shared (present in CI, absent from a plain clone)")
    return path


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
