"""The audit's shadows ask the method classes: how a shadow is configured, and how its panel is titled."""

import json

import pytest

from privehr.core.config import AuditConfig, TrainingConfig
from privehr.core.errors import InputError
from privehr.core.run_layout import RunLayout
from privehr.tasks.audit import _shadow_method, _title


def test_a_shadow_panel_is_titled_by_its_method_class():
    assert _title("non_private", 1.0) == "non-private"  # the baseline: no epsilon
    assert _title("dp_sgd", 2.0) == "DP-SGD (epsilon 2)"
    assert _title("expm_nf", 2.0) == "ExpM+NF (eps~ 2)"  # a training parameter, no guarantee
    assert _title("dp_expm_nf", 0.5) == "ExpM flow by DP-SGD (epsilon 0.5)"


def test_a_shadow_trains_by_the_runs_architecture_and_the_audits_schedule(tmp_path):
    """The audited run's saved training settings (GRU-D's size, ExpM's) with the audit's own non-private and DP-SGD
    schedules over them, DP-SGD at the audit's epsilon; a run without its config.json is refused, not audited with
    defaults that are not the run's."""
    config = AuditConfig(run_dir=tmp_path, epsilon=3.0, dp_sgd={"epochs": 2}, non_private={"max_epochs": 7},
                         privacy={"ledger_path": str(tmp_path / "ledger.jsonl")})
    with pytest.raises(InputError, match="no config.json"):
        _shadow_method(config, "dp_sgd", 0)
    run = TrainingConfig(grud={"hidden_size": 8}, dp_sgd={"epochs": 9, "epsilons": [1.0]},
                         non_private={"patience": 3}, expm_nf={"steps": 11})
    RunLayout(tmp_path).config.write_text(json.dumps({"training": run.model_dump(mode="json")}))
    method = _shadow_method(config, "dp_sgd", 0)
    training = method.training
    assert training.dp_sgd.epochs == 2 and training.dp_sgd.epsilons == [3.0]  # the audit's schedule and epsilon
    assert training.non_private.max_epochs == 7 and training.non_private.patience == 3
    assert training.grud.hidden_size == 8 and training.expm_nf.steps == 11  # the run's
    assert _shadow_method(config, "expm_nf", 1).training.expm_nf.steps == 11
