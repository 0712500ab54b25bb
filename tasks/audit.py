"""Audit tasks: shadow models, LiRA, the one-run bound, and the audit report.

The audit population is the training split of a finished run. Shadow s is trained on the examples
with ``membership[s]``; its per-example confidences phi and losses before/after training go to
``intermediate/audit/`` (patient-level, never versioned); only aggregates reach ``audit/``. Those
aggregates are computed from private records without noise: ``plan-audit`` reserves them in the
privacy ledger as a release without a DP guarantee (refused under a budget), and ``evaluate-attacks``
records it before ``audit.json`` is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from prefect import task  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402

from privehr.models.classifiers import build_classifier, classifier_inputs  # noqa: E402
from privehr.models.classifiers.training import predict_logits  # noqa: E402
from privehr.models.privacy.randomness import NoiseSource  # noqa: E402
from privehr.models.audit.lira import leave_one_out, logit_confidence, shadow_membership  # noqa: E402
from privehr.models.privacy.ledger import LedgerEntry  # noqa: E402
from privehr.models.audit.one_run import audit_scores  # noqa: E402
from privehr.core.run_layout import RunLayout  # noqa: E402
from privehr.core.config import (AuditConfig, Cell, DPSGDConfig, NonPrivateConfig, PipelineConfig,  # noqa: E402
                                 PrivacyConfig, TrainingConfig)
from privehr.models.methods import (CellData, ClassifierMethod, FitSpec, create_method, epsilon_label,  # noqa: E402
                                    is_baseline, method_display_name)
from privehr.core.errors import InputError  # noqa: E402
from privehr.tasks.features import load_split  # noqa: E402
from privehr.io.ledger import Ledger, record_release, reserve  # noqa: E402
from privehr.tasks.progress import progress_artifact  # noqa: E402
from privehr.tasks.release_budget import pipeline_dataset_id  # noqa: E402
from privehr.tasks.run_directory import ledger_run  # noqa: E402
from privehr.tasks.run_logging import publishes_artifacts, run_logger  # noqa: E402

__all__ = ["plan_audit", "train_shadow", "evaluate_attacks"]


def _population(config: AuditConfig):
    features = RunLayout(config.run_dir).intermediate
    if not (features / "features_train.npz").exists():
        raise InputError(f"{config.run_dir} has no features (intermediate/features_train.npz); audit a run of "
                         "privehr-pipeline that finished its features stage.")
    d = load_split(str(features), "train")
    y = d["labels"][:, list(d["label_names"]).index(config.label)].astype(np.float32)
    return classifier_inputs(config.model, d["values"], d["mask"], d["delta"]), torch.as_tensor(y), d["values"].shape


def _noise(config: AuditConfig, *key) -> NoiseSource:
    return NoiseSource.for_release(config.privacy.reproducible_noise, "audit", config.seed, *key)


AUDIT = "membership-inference audit"


def audit_ledger(config: AuditConfig) -> Path:
    """The ledger the audit is recorded in: ``privacy.ledger_path`` when set, else the audited run's own ledger (the
    absolute path its config.json records), so an audit never starts a ledger of its own in the working directory."""
    if "ledger_path" in config.privacy.model_fields_set:
        return Path(config.privacy.ledger_path)
    saved = RunLayout(config.run_dir).config
    if saved.exists():
        return Path(PipelineConfig.model_validate_json(saved.read_text()).privacy.ledger_path)
    return Path(config.privacy.ledger_path)


def _audited(config: AuditConfig, ledger: Ledger) -> tuple[str, str | None]:
    """The audited run's source label and membership snapshot, as its releases in the ledger cite them: the audit's
    shadows train on that run's training stays, so it is charged to those patients (every patient of the ledger where
    the run's releases cite none)."""
    run_id = ledger_run(config.run_dir)
    mine = [e for e in ledger.read() if e.run_id == run_id]
    cited = next((e for e in mine if e.members), None)
    if cited is not None:
        return config.privacy.dataset_id or cited.dataset, cited.members
    if config.privacy.dataset_id:
        return config.privacy.dataset_id, None
    run = PipelineConfig.model_validate_json(RunLayout(config.run_dir).config.read_text())
    return (mine[0].dataset if mine else pipeline_dataset_id(run)), None


@task(name="plan-audit")
def plan_audit(config: AuditConfig) -> tuple[str, str]:
    """Reserve the audit in the ledger and draw the shadows' membership matrix; return the audit's private
    working directory and the reservation."""
    privacy, ledger = config.privacy, Ledger(audit_ledger(config))
    dataset, members = _audited(config, ledger)  # held to the ledger's budget, whatever the audit's settings say
    reservations, _, _ = reserve(ledger, dataset, ledger_run(config.run_dir) + "/audit",
                                 {AUDIT: LedgerEntry("", "", "non_private", what=AUDIT)}, privacy.budget_epsilon,
                                 privacy.delta, False, AUDIT, members=members)
    _, y, _ = _population(config)
    work = RunLayout(config.run_dir).audit_work
    work.mkdir(parents=True, exist_ok=True)
    # the canaries' inclusion (shadow 0's row is the one-run audit's draw) must be independent of anything an
    # attacker could know: OS entropy, unless the audit asked for reproducible randomness
    np.save(work / "membership.npy", shadow_membership(config.shadows, len(y), _noise(config, "membership")
                                                       .numpy_generator("membership")))
    run_logger().info("audit: %d shadows over the training stays", config.shadows)
    return str(work), reservations[AUDIT]


def _shadow_method(config: AuditConfig, mechanism: str, shadow: int):
    """Method ``mechanism`` configured as the audited run trained it (its saved ``training``: the GRU-D's size and
    batch norm, ExpM's settings), with the audit's own ``non_private`` and ``dp_sgd`` schedules (an overfit
    non-private model, the DP-SGD shadows' epochs, batch size, C and learning rate)."""
    saved = RunLayout(config.run_dir).config
    if not saved.exists():
        raise InputError(f"{config.run_dir} has no config.json, so its shadows cannot train as its models did; audit "
                         "a run directory that privehr-pipeline created")
    run = TrainingConfig.model_validate(json.loads(saved.read_text())["training"])
    training = run.model_copy(update={
        "non_private": NonPrivateConfig(**run.non_private.model_dump() | config.non_private.model_dump()),
        "dp_sgd": DPSGDConfig(**run.dp_sgd.model_dump() | config.dp_sgd.model_dump() | {"epsilons": [config.epsilon]})})
    privacy = PrivacyConfig(delta=config.privacy.delta, reproducible_noise=config.privacy.reproducible_noise)
    return create_method(mechanism, training, privacy,
                         progress=lambda what: progress_artifact(f"audit shadow {shadow} ({mechanism}): {what}"))


@task(name="train-shadow")
def train_shadow(config: AuditConfig, work: str, mechanism: str, shadow: int) -> str:
    """Train shadow ``shadow`` on its half as method ``mechanism`` trains a release (its own plan at the audit's
    ``epsilon``, where it has one, and its own noise); save phi and losses for every example."""
    torch.set_num_threads(1)
    inputs, y, shape = _population(config)
    keep = torch.as_tensor(np.load(Path(work) / "membership.npy")[shadow])
    method = _shadow_method(config, mechanism, shadow)
    private = None not in method.epsilons()  # its cells carry a target epsilon (eps~ for ExpM+NF)
    losses = method.losses()  # bce where the method trains by it, as the attack scores: never the list's order
    cell = Cell(label=config.label, model=config.model, method=mechanism, loss="bce" if "bce" in losses else losses[0],
                target_epsilon=config.epsilon if private else None)
    spec = FitSpec(cell, method.default_hyperparameters(cell), seed=config.seed * 1000 + shadow,
                   what=f"audit shadow {shadow}")
    data = CellData(tuple(t[keep] for t in inputs), y[keep], shape[2], shape[1])
    # the one-run audit scores each example by how much training moved its loss: from the public initialisation
    initial = method.build(spec, data) if isinstance(method, ClassifierMethod) else build_classifier(
        config.model, shape[2], shape[1], seed=spec.seed, hidden_size=spec.hyperparameters.get("hidden_size", 32))
    before = predict_logits(initial, inputs).cpu().numpy()
    release = method.fit(spec, data, method.plan(spec, len(data)), _noise(config, "shadow", shadow))
    after = method.logits(release, inputs)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    loss = lambda z: bce(torch.as_tensor(z), y, reduction="none").numpy()  # noqa: E731
    out = Path(work) / f"{mechanism}_shadow{shadow:03d}.npz"
    np.savez(out, phi=logit_confidence(after, y.numpy()), loss_before=loss(before), loss_after=loss(after))
    return str(out)


def _band(values):
    return {"median": float(np.median(values)), "p05": float(np.percentile(values, 5)),
            "p95": float(np.percentile(values, 95))}


def _title(mechanism: str, epsilon: float) -> str:
    """A panel's title: the method's name and what its epsilon is (none for the baseline, eps~ for ExpM+NF)."""
    label = epsilon_label(mechanism, epsilon, epsilon)
    if is_baseline(mechanism):
        return method_display_name(mechanism)
    return f"{method_display_name(mechanism)} ({label if isinstance(label, str) else f'epsilon {label:g}'})"


@task(name="evaluate-attacks")
def evaluate_attacks(config: AuditConfig, work: str, results: dict[str, list[str]], reservation: str) -> dict:
    """LiRA (online/offline x per-example/fixed variance) and the one-run bound per mechanism; recorded in the
    ledger (under ``reservation``) before anything is written."""
    membership = np.load(Path(work) / "membership.npy")
    out_dir = RunLayout(config.run_dir).audit
    out_dir.mkdir(exist_ok=True)
    report = {"population": int(membership.shape[1]), "shadows": config.shadows, "label": config.label,
              "model": config.model, "dp_epsilon": config.epsilon, "delta": config.privacy.delta, "mechanisms": {}}
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False)
    grid = np.logspace(-4, 0, 200)
    for ax, (mechanism, paths) in zip(axes[0], results.items()):
        runs = [np.load(p) for p in sorted(paths)]
        phi = np.stack([r["phi"] for r in runs])
        entry = {}
        for online in (True, False):
            for fixed in (False, True):
                rocs = leave_one_out(phi, membership, online, fixed)
                name = f"{'online' if online else 'offline'}{'_fixed_variance' if fixed else ''}"
                entry[name] = {"auc": _band([r.auc for r in rocs]),
                               **{f"tpr_at_fpr_{f:g}": _band([r.tpr_at[f] for r in rocs]) for f in (1e-3, 1e-2)}}
                if online and not fixed:
                    curves = np.stack([np.interp(grid, r.fpr, r.tpr) for r in rocs])
                    ax.fill_between(grid, np.percentile(curves, 5, 0), np.percentile(curves, 95, 0), alpha=0.3)
                    ax.plot(grid, np.median(curves, 0), label="LiRA online (median, 5-95 %)")
        # one-run audit of shadow 0: canaries = the population, included independently with prob. 1/2
        scores = runs[0]["loss_before"] - runs[0]["loss_after"]
        m = scores.size
        k_grid = [(k, k) for k in (max(1, m // 20), max(1, m // 10), max(1, m // 5))]
        one_run = audit_scores(scores, membership[0], config.privacy.delta, config.significance, k_grid)
        entry["one_run"] = {"epsilon_lower": one_run.epsilon_lower, "ceiling": one_run.epsilon_ceiling,
                            "m": one_run.m, "k_plus": one_run.k_plus, "k_minus": one_run.k_minus,
                            "correct": one_run.correct, "thresholds_tried": one_run.thresholds_tried,
                            "significance": one_run.significance}
        report["mechanisms"][mechanism] = entry
        ax.plot(grid, grid, "k:", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1e-4, 1)
        ax.set_ylim(1e-4, 1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(_title(mechanism, config.epsilon))
        ax.legend(fontsize=7)
    fig.tight_layout()
    record_release(audit_ledger(config), reservation, LedgerEntry("", "", "non_private", what=AUDIT))
    fig.savefig(out_dir / "lira_roc.png", dpi=120)
    plt.close(fig)
    (out_dir / "audit.json").write_text(json.dumps(report, indent=2))
    if publishes_artifacts():
        create_table_artifact([{"mechanism": mech, "lira_auc": round(e["online"]["auc"]["median"], 4),
                                "tpr_at_fpr_1e-3": round(e["online"]["tpr_at_fpr_0.001"]["median"], 4),
                                "tpr_at_fpr_1e-2": round(e["online"]["tpr_at_fpr_0.01"]["median"], 4),
                                "one_run_epsilon_lower": round(e["one_run"]["epsilon_lower"], 4),
                                "one_run_ceiling": round(e["one_run"]["ceiling"], 4)}
                               for mech, e in report["mechanisms"].items()], key="privehr-audit",
                              description=f"Membership-inference audit of {Path(config.run_dir).name} "
                                          f"({config.shadows} shadows; DP-SGD at epsilon {config.epsilon:g})")
    log = run_logger()
    for mech, e in report["mechanisms"].items():
        log.info("audit %s: LiRA AUC %.3f, TPR@1e-3 %.4f; one-run epsilon >= %.3f (ceiling %.2f)", mech,
                 e["online"]["auc"]["median"], e["online"]["tpr_at_fpr_0.001"]["median"],
                 e["one_run"]["epsilon_lower"], e["one_run"]["ceiling"])
    return report
