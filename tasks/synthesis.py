"""DP-NF synthesis: one flow per (imputation, budget, run), trained on that imputation's training
patients, and its synthetic tables in original units, raw and truncated to the spec's bounds.

Layout in the run directory (``job`` = ``imp<i>-<budget>-run<r>``):

* ``releases/<job>.json``: the release record: mechanism, sigma, q, T, delta, epsilon (PRV, RDP,
  PLD, GDP), mu, where the noise came from (never the seed), the guarantee ("DP", or "not DP" for
  reproducible noise), the scaling and whether the guarantee covers it, the files; no count of
  private patients unless the spec declares it public. The flow enters the privacy ledger as soon as
  it is trained, under the reservation of the budget check, before it is saved anywhere;
* ``synthetic/<job>-r<k>[-truncated].csv``: synthetic tables of DP flows whose scaling is
  data-independent (post-processing of a DP release: releasable);
* ``intermediate/flows/<job>.pt`` (and the loss curve), and ``intermediate/synthetic/`` for the
  tables of non-private flows (they can memorise patients) or of flows scaled by training statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from privehr.models.budget_kinds import budget_kind
from privehr.models.classifiers import seeded_build
from privehr.models.derived_columns import add_derived
from privehr.models.device import resolve_device
from privehr.models.dp_nf import DensityHyperparameters, mean_log_likelihood, train_density
from privehr.models.column_codec import TableCodec
from privehr.models.hflow import HFlow
from privehr.models.maf import MAF
from privehr.models.marginal_synthesis import marginal_available, synthesize_marginal
from privehr.models.noisy_count import noisy_count
from privehr.models.privacy_ledger import GUARANTEES, LedgerEntry
from privehr.models.randomness import NoiseSource, public_seed
from privehr.models.release_plan import ReleasePlan, rate_batch
from privehr.models.table_scaling import AffineScaling
from privehr.core.run_layout import RunLayout
from privehr.core.config import MARGINAL_SYNTHESIZERS, Budget, DPNFConfig, HFlowConfig, SynthesisConfig
from privehr.core.errors import InputError
from privehr.core.specs import check_targets, load_ehr_spec
from privehr.tasks.compute import share_cores
from privehr.core.strict_json import strict_dumps
from privehr.io.privacy_ledger import record_release
from privehr.tasks.progress import progress_artifact
from privehr.tasks.run_logging import run_logger

__all__ = ["synthesize", "imputed_tables", "release_patient_count", "density_hyperparameters",
           "synthetic_rows", "COUNT_KEY", "needs_noisy_count", "check_synthesis_inputs", "job_plan", "planned_entry",
           "FLOW_SYNTHESIZERS", "WHAT"]

COUNT_KEY = "patient-count"  # the reservation of the noisy patient count


def imputed_tables(run_dir: str | Path, imputation: int) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(train, test, imputation summary) of one MICE dataset of an ``impute`` task's run directory."""
    run = RunLayout(run_dir)
    summary = json.loads(run.imputation.read_text())
    folder = run.imputed
    read = lambda part: pd.read_csv(folder / f"{part}_{imputation}.csv", index_col=0)  # noqa: E731
    return read("train"), read("test"), summary


def _seed(job: dict) -> int:
    """The job's seed for initialisation and for sampling tables from the released flow (public: neither is
    DP randomness); distinct for every (imputation, budget, run)."""
    return public_seed(job["job_id"])


def density_hyperparameters(nf: DPNFConfig | HFlowConfig, n: int, seed: int) -> DensityHyperparameters:
    """A flow's optimiser settings; the non-private flow's minibatch is the plans' expected batch b, and it stops
    early on held-out training patients."""
    return DensityHyperparameters(learning_rate=nf.learning_rate, batch_size=rate_batch(n, nf.sample_rate),
                                  steps=nf.steps, seed=seed, validation_fraction=nf.validation_fraction,
                                  patience=nf.patience)


def needs_noisy_count(config: SynthesisConfig, spec) -> bool:
    """Tables are sized by a noisy count unless rows is set or the spec declares the count public."""
    return config.rows is None and not spec.public_patient_count


def synthetic_rows(run_dir: str | Path, config: SynthesisConfig, spec, summary: dict) -> int:
    """Rows per synthetic table: ``rows``, else the delivery's patient count if the spec declares it public (the
    records delivered: the count after quarantine depends on private values), else the released noisy count."""
    if config.rows is not None:
        return config.rows
    if spec.public_patient_count:
        return summary["decisions"]["records_read"]
    return json.loads(RunLayout(run_dir).released_count.read_text())["count"]


@task(name="release-patient-count")
def release_patient_count(run_dir: str, config: SynthesisConfig, reservation: str | None) -> int | None:
    """Release the table's patient count with epsilon-DP noise (two-sided geometric) when the tables need it."""
    spec = load_ehr_spec(config.spec)
    out = RunLayout(run_dir).released_count
    if not needs_noisy_count(config, spec) or out.exists():
        return None
    summary = json.loads(RunLayout(run_dir).imputation.read_text())
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, COUNT_KEY)
    count = noisy_count(summary["patients"]["train"] + summary["patients"]["test"], config.count_epsilon,
                        noise.numpy_generator("count"))
    record_release(config.privacy.ledger_path, reservation, LedgerEntry(
        "", "", "dp", config.count_epsilon, guarantee=noise.guarantee, what="patient count"))
    out.write_text(json.dumps({"count": count, "epsilon": config.count_epsilon, "mechanism": "two-sided geometric",
                               "guarantee": noise.label}))
    run_logger().info("released the patient count with noise (epsilon %g)", config.count_epsilon)
    return count


def check_synthesis_inputs(config: SynthesisConfig) -> None:
    """Refuse, before any record is read or any budget spent, what would fail after training: targets the table
    lacks, a column a synthesizer cannot scale or bin (no bounds), a baseline whose library is missing."""
    spec = load_ehr_spec(config.spec)
    check_targets(spec, *config.targets(spec))
    needs_bounds = [s for s in config.synthesizers if s != "maf" or config.scaling == "bounds"]
    if needs_bounds:
        try:
            TableCodec.from_spec(spec, list(spec.bounds()))
        except ValueError as err:
            raise InputError(f"{spec.name}: {err} (needed by {', '.join(needs_bounds)})") from None
    marginal = [s for s in config.synthesizers if s in MARGINAL_SYNTHESIZERS]
    if marginal and not marginal_available():
        raise InputError(f"the baselines {', '.join(marginal)} need private-pgm (mbi >= 2): pip install "
                         "'privehr[baselines]', or leave them out of synthesizers")


def _decoded_tables(raw: pd.DataFrame, codec: TableCodec) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(raw table without non-finite rows, the table decoded to the spec's types with categories, rows dropped)."""
    finite = np.isfinite(raw.to_numpy(float)).all(axis=1)
    raw = raw[finite].reset_index(drop=True)
    return raw, codec.labels(codec.decode(raw)), int((~finite).sum())


def _fit_maf(x_frame, test, attributes, spec, config, plan, noise, seed, target, job_id):
    """DP-NF: every column continuous, affinely scaled (by the bounds, or the training statistics)."""
    bounds = {a: spec.bounds()[a].code_range() for a in attributes}
    scaling = AffineScaling(bounds if config.scaling == "bounds" else None).fit(x_frame[attributes])  # train only
    x = torch.tensor(scaling.transform(x_frame), dtype=torch.float32, device=target)
    nf = config.dpnf
    flow = seeded_build(lambda: MAF(len(attributes), nf.blocks, nf.hidden_size, nf.hidden_layers), seed).to(target)
    release = train_density(flow, x, density_hyperparameters(nf, len(x), seed), plan, noise,
                            progress=progress_artifact(f"DP-NF {job_id}: DP-SGD steps"))
    x_test = torch.tensor(scaling.transform(test), dtype=torch.float32, device=target)
    held_out = mean_log_likelihood(flow, x_test) - float(np.log(scaling.scale_).sum())
    sample = lambda rows, generator: scaling.inverse_transform(flow.sample(rows, generator).cpu().numpy())  # noqa: E731
    model = {"synthesizer": "maf", "blocks": nf.blocks, "hidden_size": nf.hidden_size,
             "hidden_layers": nf.hidden_layers, "steps": nf.steps}
    return flow, release, held_out, sample, {"kind": config.scaling, "inside_guarantee": not scaling.private_}, model


def _fit_hflow(x_frame, test, attributes, spec, config, plan, noise, seed, target, job_id):
    """DP-HFlow: continuous columns scaled by the bounds, discrete columns as codes (dequantized inside the flow)."""
    codec = TableCodec.from_spec(spec, attributes)
    hf = config.hflow
    x = torch.tensor(codec.flow_inputs(x_frame), dtype=torch.float32, device=target)
    flow = seeded_build(lambda: HFlow(len(codec.continuous), codec.cardinalities, blocks=hf.blocks,
                                      hidden_size=hf.hidden_size, hidden_layers=hf.hidden_layers, bins=hf.bins,
                                      rank=hf.rank, dequantization=hf.dequantization), seed).to(target)
    hp = density_hyperparameters(hf, len(x), seed)
    release = train_density(flow, x, hp, plan, noise, clipping=hf.clipping, sparsity=hf.sparsity,
                            progress=progress_artifact(f"DP-HFlow {job_id}: DP-SGD steps"))
    x_test = torch.tensor(codec.flow_inputs(test), dtype=torch.float32, device=target)
    _, scale = codec.affine()
    held_out = mean_log_likelihood(flow, x_test) - float(np.log(scale).sum())
    sample = lambda rows, generator: codec.from_flow(flow.sample(rows, generator).cpu().numpy())  # noqa: E731
    model = {"synthesizer": "hflow", **hf.model_dump()}
    return flow, release, held_out, sample, {"kind": "bounds", "inside_guarantee": True}, model


FLOW_SYNTHESIZERS = {"maf": _fit_maf, "hflow": _fit_hflow}


def job_plan(config: SynthesisConfig, job: dict, n: int) -> ReleasePlan | None:
    """The DP-SGD plan of a flow job on ``n`` patients (None: non-private), known before training."""
    budget = Budget(**job["budget"])
    nf = config.dpnf if job.get("synthesizer", "maf") == "maf" else config.hflow
    return budget_kind(budget.kind).plan(n, nf.sample_rate, nf.steps, budget.value, delta=config.privacy.delta,
                                         max_grad_norm=nf.max_grad_norm)


def planned_entry(config: SynthesisConfig, job: dict, n: int, guarantee: str) -> LedgerEntry:
    """What the job will enter in the ledger (reserved by the budget check, recorded when trained)."""
    synthesizer = job.get("synthesizer", "maf")
    what = WHAT[synthesizer]
    if synthesizer in MARGINAL_SYNTHESIZERS:
        return LedgerEntry("", "", "dp", Budget(**job["budget"]).value, delta=config.privacy.delta,
                           guarantee=guarantee, what=what)
    plan = job_plan(config, job, n)
    return LedgerEntry("", "", "non_private", what=what) if plan is None else plan.ledger_entry(guarantee, what)


WHAT = {"maf": "DP-NF flow", "hflow": "DP-HFlow flow", "aim": "AIM synthetic data", "mst": "MST synthetic data"}


@task(name="synthesize")
def synthesize(run_dir: str, job: dict, config: SynthesisConfig, reservation: str | None,
               device: str = "auto") -> str:
    """Fit one synthesizer (a flow, or a marginal baseline), record it in the privacy ledger under ``reservation``,
    sample ``config.releases`` synthetic tables; return the release record's path."""
    run = RunLayout(run_dir)
    path = run.release(job["job_id"])
    if config.resume and path.exists():  # written last: the model and its tables are complete (and recorded)
        run_logger().info("synthesize %s: done by an earlier attempt of this run", job["job_id"])
        return str(path)
    if reservation is None:
        raise RuntimeError(f"synthesize {job['job_id']}: no reservation from the budget check")
    share_cores()
    spec = load_ehr_spec(config.spec)
    train, test, summary = imputed_tables(run_dir, job["imputation"])
    attributes = summary["attributes"]
    synthesizer = job.get("synthesizer", "maf")
    budget = Budget(**job["budget"])
    seed = _seed(job)
    noise = NoiseSource.for_release(config.privacy.reproducible_noise, job["job_id"])
    rows = synthetic_rows(run_dir, config, spec, summary)
    codec = TableCodec.from_spec(spec, attributes) if (synthesizer != "maf" or config.scaling == "bounds") else None
    flows_dir = run.flows
    record_extra: dict = {}

    if synthesizer in MARGINAL_SYNTHESIZERS:
        bins = config.marginal.bins
        codes = codec.discretise(train[attributes], bins)
        options = {"max_model_size": config.marginal.max_model_size} if synthesizer == "aim" else {}
        synthetic_codes, info = synthesize_marginal(synthesizer, codes, codec.domain(bins), budget.value,
                                                    config.privacy.delta, rows * config.releases,
                                                    noise.numpy_generator("measurements"), **options)
        guarantee = noise.guarantee
        record_release(config.privacy.ledger_path, reservation, planned_entry(config, job, len(train), guarantee))
        post = np.random.default_rng(seed)  # within-bin draws: post-processing of the release, public seed
        parts = np.array_split(synthetic_codes, config.releases)
        sample_tables = [codec.undiscretise(part, bins, post) for part in parts]
        release_dict = {"mechanism": synthesizer, "noise_source": noise.kind, "epsilon": budget.value,
                        "delta": config.privacy.delta, "epsilon_prv": None,
                        **{k: v for k, v in info.items() if k in ("rho", "mbi_version", "selected")}}
        held_out, scaling_record = None, {"kind": "bounds (bins)", "inside_guarantee": True}
        model = {"synthesizer": synthesizer, "bins": bins, **options}
    else:
        target = resolve_device(device)
        plan = job_plan(config, job, len(train))
        fit = FLOW_SYNTHESIZERS[synthesizer]
        flow, release, held_out, sample, scaling_record, model = fit(train, test, attributes, spec, config, plan,
                                                                     noise, seed, target, job["job_id"])
        guarantee = "non_private" if plan is None else noise.guarantee
        record_release(config.privacy.ledger_path, reservation,  # at once: a later failure loses no entry
                       planned_entry(config, job, len(train), guarantee))
        flows_dir.mkdir(parents=True, exist_ok=True)
        torch.save(flow.state_dict(), flows_dir / f"{job['job_id']}.pt")
        # the loss curve is a statistic of the private training batches: kept with the patient-level files
        (flows_dir / f"{job['job_id']}.history.json").write_text(json.dumps(release.history))
        generator = torch.Generator().manual_seed(seed + 7919)
        sample_tables = [sample(rows, generator) for _ in range(config.releases)]
        release_dict = release.as_dict()
        record_extra = {"flow": str(flows_dir / f"{job['job_id']}.pt"),
                        **({"early_stopping": release.early_stopping} if release.early_stopping else {})}

    if spec.drafted_from_data:  # the bounds and categories were read from the patients: the scaling is private
        scaling_record = {**scaling_record, "inside_guarantee": False, "drafted_from_data": True}
    releasable = guarantee == "dp" and scaling_record["inside_guarantee"]  # everything in it is covered by DP
    out_dir = run.synthetic(releasable)
    for folder in (out_dir, run.releases):
        folder.mkdir(parents=True, exist_ok=True)
    decoder = codec or TableCodec.from_spec(spec, attributes, require_bounds=False)
    files, nonfinite = [], 0
    for k, table in enumerate(sample_tables):
        raw, decoded, dropped = _decoded_tables(table, decoder)
        nonfinite += dropped
        for name, part in ((f"{job['job_id']}-r{k}.csv", raw), (f"{job['job_id']}-r{k}-truncated.csv", decoded)):
            add_derived(part, spec.derived).to_csv(out_dir / name, index=False)
            files.append({"release": k, "truncated": name.endswith("-truncated.csv"), "path": str(out_dir / name)})
    record = {"job": job, "synthesizer": synthesizer, "budget_label": budget.label, **release_dict,
              "guarantee": GUARANTEES[guarantee],
              **({"patients_delivered": summary["decisions"]["records_read"]} if spec.public_patient_count else {}),
              "rows_per_table": rows, "test_log_likelihood": held_out, "nonfinite_rows_dropped": nonfinite,
              "scaling": scaling_record, "releasable": releasable, "files": files, **record_extra, "model": model}
    path.write_text(strict_dumps(record, indent=2, default=float))
    run_logger().info("synthesize %s: %s %s (%s), epsilon %s; %d tables (%d non-finite rows dropped)",
                      job["job_id"], synthesizer, release_dict["mechanism"], GUARANTEES[guarantee],
                      release_dict.get("epsilon"), config.releases, nonfinite)
    return str(path)
