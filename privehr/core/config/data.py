"""Inputs, their validation and the pages that show reports; ``StewardConfig`` is ``privehr-validate``'s schema."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from privehr.core.config.base import RunId, _Strict

__all__ = ["DataConfig", "DEFAULT_PAGES_PORT", "PagesConfig", "StewardConfig", "ValidationConfig"]


class DataConfig(_Strict):
    """Where the MIMIC-Extract file is and which window of each stay the models see."""

    hdf5_path: Path = Field(Path("data/mimic/all_hourly_data.h5"),
                            description="MIMIC-Extract all_hourly_data.h5 (read only, never written)")
    window_hours: int = Field(24, ge=1, le=240, description="hours of input per stay")
    gap_hours: int = Field(6, ge=0, le=240, description="cohort: max_hours > window + gap")
    chunk_rows: int = Field(32768, ge=256, description="hourly rows read at a time (bounds memory)")


class ValidationConfig(_Strict):
    """Great Expectations gate before training (suites in ``expectations/``, from the specs)."""

    enabled: bool = True
    spec: Path | None = Field(None, description="MIMIC-Extract spec YAML "
                                                "(default expectations/specs/mimic_extract.yaml)")
    stop_on_critical: bool = Field(True, description="a failed critical expectation stops the run before training")
    chunk_rows: int = Field(65536, ge=256, description="hourly rows streamed at a time")


DEFAULT_PAGES_PORT = 8765


class PagesConfig(_Strict):
    """Where the artifacts directory's pages (Data Docs, report.html) are served over http.

    A browser showing the Prefect UI over http does not follow ``file://`` links, and a path means
    nothing on another machine. ``privehr serve`` serves the artifacts directory at the default URL; a
    static site or shared web server that publishes the artifacts directory works as well.
    """

    base_url: str | None = Field(f"http://127.0.0.1:{DEFAULT_PAGES_PORT}", pattern=r"^https?://\S+$",
                                 description="URL at which the artifacts directory is served (privehr serve, or a "
                                             "static site); the Prefect artifacts link pages there. None links "
                                             "file:// paths instead")


class StewardConfig(_Strict):
    """``privehr-validate``: validate deliveries and report, train nothing."""

    paths: list[Path] = Field(default_factory=lambda: [Path("data/mimic/all_hourly_data.h5")], min_length=1,
                              description="all_hourly_data.h5 files and/or EHR tables (CSV)")
    ehr_spec: str = Field("harrod_ehr", description="spec (name in expectations/specs or path) of the CSV tables")
    validation: ValidationConfig = ValidationConfig()
    pages: PagesConfig = PagesConfig()
    artifacts_dir: Path = Path("artifacts")
    run_id: RunId | None = None
