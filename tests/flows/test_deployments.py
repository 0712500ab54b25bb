"""prefect.yaml's deployments take parameters the flows accept, and the demo deployment is the demo profile."""

from pathlib import Path

import pytest
import yaml

from privehr.core.config import PipelineConfig, load_config

DEPLOYMENTS = yaml.safe_load((Path(__file__).parents[2] / "prefect.yaml").read_text())["deployments"]


def _pipeline(name: str) -> dict:
    (deployment,) = [d for d in DEPLOYMENTS if d["entrypoint"] == "flows/pipeline.py:pipeline" and d["name"] == name]
    return deployment


def test_the_demo_deployment_runs_the_demo_profile():
    config = PipelineConfig.model_validate(_pipeline("demo")["parameters"]["config"])
    assert config == load_config(profile="demo")  # e.g. early stopping on dev loss, as `privehr run` does


def test_the_nightly_deployment_validates_and_has_its_schedule():
    nightly = _pipeline("nightly")
    config = PipelineConfig.model_validate(nightly["parameters"]["config"])
    assert config.privacy.dataset_id  # one budget across nights: a delivery with one patient more is no new dataset
    assert [s["cron"] for s in nightly["schedules"]] == ["0 3 * * *"]


def test_the_private_inference_deployment_runs_the_papers_settings():
    from privehr.core.inference_config import InferenceConfig

    (deployment,) = [d for d in DEPLOYMENTS if d["entrypoint"] == "flows/private_inference.py:private_inference"]
    config = InferenceConfig.model_validate(deployment["parameters"]["config"])
    assert config.mus == [6.68, 1.12, 0.50, 0.27] and config.vi.steps == 8000 and config.vi.draws == 1000
    assert config.runs == 5 and config.synthetic.density.sample_rate == pytest.approx(500 / 6000)


def test_the_scoring_deployment_validates_and_waits_for_its_bundle():
    from privehr.core.config import ScoringConfig

    (deployment,) = [d for d in DEPLOYMENTS if d["entrypoint"] == "flows/score.py:score"]
    config = ScoringConfig.model_validate(deployment["parameters"]["config"])
    assert config.bundle.name == "release" and [s["active"] for s in deployment["schedules"]] == [False]
