"""Typed configuration shared by the CLI, the Prefect flows and the deployments.

References: Bridges et al. 2023 (arXiv:2311.09200); Lee et al. 2022 (AAAI); Su et al. 2023 (arXiv:2302.05787).

One pydantic model per stage; ``PipelineConfig`` nests them. Prefect validates deployment parameters
against the same schema, so a bad value is refused before any run starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from privehr.core.errors import InputError

__all__ = ["ExpMNFConfig", "DPNFConfig", "HFlowConfig", "MarginalConfig", "MARGINAL_SYNTHESIZERS", "Budget", "SynthesisConfig", "DataConfig", "ValidationConfig",
           "StewardConfig", "MICEConfig", "StaticImputationConfig", "EHRPrepareConfig", "SplitConfig",
           "NonPrivateSettings", "NonPrivateConfig", "DPSGDSettings", "DPSGDConfig", "GRUDConfig",
           "TrainingConfig",
           "Cell", "AuditConfig", "PrivacyConfig", "VersioningConfig", "PipelineConfig", "EvaluationConfig",
           "PagesConfig", "DEFAULT_PAGES_PORT", "PROFILES", "load_config"]

Label = Literal["mort_hosp", "mort_icu", "los_3", "los_7"]
Model = Literal["logistic_regression", "grud"]
# The training methods' names; each is implemented by one registered class in privehr.tasks.methods (which this
# bottom layer cannot import; tests/tasks/test_training_methods.py fails if the two disagree).
Method = Literal["non_private", "dp_sgd", "expm_nf"]
AuditedMethod = Literal["non_private", "dp_sgd"]
Loss = Literal["bce", "l2"]
# per-sample clipping of DP-SGD (privehr.models.dp_sgd) and of DP-HFlow's fine-grained modes
# (privehr.models.fine_grained_clipping): the models read their mode names from these
DPSGDClipping = Literal["ghost", "hooks", "functorch"]
FineGrainedClipping = Literal["flat", "per_layer", "per_unit", "sparsified"]
# a privacy budget is a finite positive number: inf, nan and "Infinity" are refused (inf is no privacy at all)
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _moved(old: str, new: str):
    """A validator refusing a setting that moved, with where it lives now."""
    def check(cls, data):
        if isinstance(data, dict) and old in data:
            raise ValueError(f"{old} moved to {new} (one setting for every release and the ledger)")
        return data
    return model_validator(mode="before")(check)


def _ledger_beside_runs(config):
    """Unless ``privacy.ledger_path`` is set, the ledger lives in ``artifacts_dir`` (where the runs go), never in a
    directory the user did not name."""
    if "ledger_path" not in config.privacy.model_fields_set:
        privacy = config.privacy.model_copy(update={"ledger_path": _default_ledger(config)})
        privacy.__pydantic_fields_set__.discard("ledger_path")  # still the default, in its place
        config.privacy = privacy
    return config


def _default_ledger(config) -> Path:
    return Path(config.artifacts_dir) / PrivacyConfig.model_fields["ledger_path"].default.name


def _resume_needs_run_id(config):
    if config.resume and not config.run_id:
        raise ValueError("resume needs the run_id of the run to continue")
    return config


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$")


class MICEConfig(_Strict):
    """Multiple imputation by chained equations (scikit-learn IterativeImputer, posterior draws)."""

    m: int = Field(5, ge=1, description="imputed datasets")
    max_iter: int = Field(10, ge=1, description="rounds of the chained equations")
    seed: int = 0
    trace: bool = Field(True, description="record per-round means and R-hat (costs max_iter/2 extra fits)")


class StaticImputationConfig(MICEConfig):
    """MICE for the cohort's per-stay static table (demographics and 24 h means) in privehr-pipeline."""

    max_missing_fraction: float = Field(0.9, ge=0, le=1, description="drop variables missing in more training "
                                                                     "stays than this (recorded)")
    trace: bool = False


class EHRPrepareConfig(_Strict):
    """``privehr-ehr-prepare``: validate a small EHR table, split it by patient, impute it with MICE."""

    path: Path = Field(Path("data/ehr/EHR_dataset.csv"), description="the table (read only)")
    spec: str = Field("harrod_ehr", description="spec name in expectations/specs, or a YAML path")
    test_fraction: float = Field(20 / 84, gt=0, lt=1, description="held-out patients (Su et al. 2023: 20 of 84)")
    split_seed: int = 1
    mice: MICEConfig = MICEConfig()
    stop_on_critical: bool = True
    artifacts_dir: Path = Path("artifacts")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$")


class PrivacyConfig(_Strict):
    """The privacy ledger, the budget each dataset may spend, the one delta, and where DP noise comes from."""

    ledger_path: Path = Field(Path("artifacts/privacy_ledger.jsonl"),
                              description="append-only record of every release per dataset (proven writable "
                                          "before any private record is read); default: privacy_ledger.jsonl in "
                                          "the run's artifacts_dir")
    budget_epsilon: PositiveFloat | None = Field(
        None, description="refuse runs whose releases would take the dataset's composed epsilon above this; a "
                          "release without a DP guarantee (non-private, ExpM+NF, reproducible noise) never fits")
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta of every DP release and of the ledger's "
                                                      "composition")
    reproducible_noise: bool = Field(
        False, description="seed the noise and sampling of every DP mechanism from the configuration (tests, "
                           "debugging). Every release made so is recorded as not DP; by default they come from "
                           "OS entropy and are never stored")
    dataset_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._:-]+$", description="the dataset's identity in the ledger, assigned by the data "
        "steward; default: sha256 of its sorted subject ids (a re-export of the same patients composes with it)")

    _budget_delta_moved = _moved("budget_delta", "privacy.delta")


class DPNFConfig(_Strict):
    """The masked autoregressive flow and its DP-SGD training (Su et al. 2023 used 15 blocks x 200 hidden, C = 10,
    r = 0.5, T = 8000, SGD lr 2e-5 with batch norm; privehr has no batch norm and uses Adam)."""

    blocks: int = Field(5, ge=1, description="MADE blocks, reversed order between blocks")
    hidden_size: int = Field(64, ge=2)
    hidden_layers: int = Field(1, ge=1)
    steps: int = Field(1000, ge=1, description="DP-SGD steps T")
    sample_rate: float = Field(0.5, gt=0, le=1, description="Poisson rate q (Su et al. 2023: r = 0.5); "
                                                            "the effective q = 1 / ceil(n / ceil(q n)) is recorded")
    max_grad_norm: float = Field(10.0, gt=0, description="per-sample clipping norm C (Su et al. 2023: 10)")
    learning_rate: float = Field(3e-3, gt=0, description="Adam")
    validation_fraction: float = Field(0.2, ge=0, lt=1, description="the non-private flow only: share of its "
                                       "training patients held out for early stopping (0: train all steps)")
    patience: int = Field(5, ge=1, description="the non-private flow only: held-out evaluations (every 50 steps) "
                                               "without improvement before it stops at its best")

    _reproducible_moved = _moved("reproducible_noise", "privacy.reproducible_noise")


class HFlowConfig(_Strict):
    """DP-HFlow (Lee et al. 2022): dequantized discrete columns, conditional autoregressive spline blocks shared
    among the sub-flows, low-rank linear layers, fine-grained clipping."""

    blocks: int = Field(3, ge=1, description="spline + low-rank linear blocks, reversed order between blocks "
                                             "(Lee et al. 2022: 3)")
    hidden_size: int = Field(64, ge=2, description="the shared conditional MADE's hidden units")
    hidden_layers: int = Field(1, ge=1)
    bins: int = Field(8, ge=2, description="rational-quadratic spline bins")
    rank: int = Field(2, ge=1, description="rank of the low-rank linear layers")
    dequantization: Literal["uniform", "variational"] = Field(
        "uniform", description="of discrete columns (Lee et al. 2022: variational helps at large epsilon, uniform "
                               "at small)")
    clipping: FineGrainedClipping = Field(
        "flat", description="per-sample clipping: one norm (flat), per layer, per unit, or per layer after "
                            "stochastic sparsification (fine-grained modes of Lee et al. 2022); every mode bounds a "
                            "sample's whole gradient by max_grad_norm. Flat was as good or better on WHAS500 and GBSG2 "
                            "(bench/mixed_type_synthesis.py)")
    sparsity: float = Field(0.5, ge=0, lt=1, description="share of each layer's gradient entries sparsified "
                                                        "(clipping: sparsified)")
    steps: int = Field(500, ge=1, description="DP-SGD steps T")
    sample_rate: float = Field(0.5, gt=0, le=1, description="Poisson rate q")
    max_grad_norm: float = Field(1.0, gt=0, description="per-sample clipping norm C (split among layers by the "
                                                        "fine-grained modes)")
    learning_rate: float = Field(3e-3, gt=0, description="Adam")
    validation_fraction: float = Field(0.2, ge=0, lt=1, description="the non-private flow only: share of its "
                                       "training patients held out for early stopping (0: train all steps)")
    patience: int = Field(5, ge=1, description="the non-private flow only: held-out evaluations (every 50 steps) "
                                               "without improvement before it stops at its best")


class MarginalConfig(_Strict):
    """AIM and MST (McKenna et al.) through private-pgm (``pip install privehr[baselines]``): the marginal-based
    baselines, run on the same training patients at the same (epsilon, delta)."""

    bins: int = Field(16, ge=2, le=64, description="equal-width bins of each numeric column's bounds (public)")
    max_model_size: float = Field(80.0, gt=0, description="AIM: the model's size limit in MB")


Synthesizer = Literal["maf", "hflow", "aim", "mst"]
MARGINAL_SYNTHESIZERS = ("aim", "mst")


class SynthesisMICEConfig(MICEConfig):
    """MICE before synthesis: no trace by default (it costs max_iter/2 extra fits per imputation)."""

    trace: bool = False


class Budget(_Strict):
    """One privacy budget of a synthesis grid: mu-GDP, an (epsilon, delta) target, or none (non-private)."""

    kind: Literal["mu", "epsilon", "non_private"]
    value: Annotated[float, Field(allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _value_matches_kind(self):
        if (self.kind == "non_private") != (self.value is None) or (self.value is not None and self.value <= 0):
            raise ValueError("mu and epsilon budgets need a positive value; non_private takes none")
        return self

    @property
    def label(self) -> str:
        return "inf" if self.kind == "non_private" else f"{self.kind}{self.value:g}"


class SynthesisConfig(EHRPrepareConfig):
    """``privehr-synthesize``: validate -> split -> MICE -> DP-NF per (imputation, budget, run) -> releases ->
    utility (train on synthetic, test on real) and fidelity -> report and privacy ledger."""

    mice: SynthesisMICEConfig = SynthesisMICEConfig()
    mus: list[PositiveFloat] = Field(default_factory=lambda: [6.10, 3.92, 2.45, 1.49],
                                     description="budgets as mu-GDP (Su et al. 2023); sigma = "
                                                 "1/sqrt(log(1 + (mu/q)^2/T))")
    epsilons: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 4.0],
                                          description="budgets as (epsilon, delta) targets: sigma calibrated by PRV "
                                                      "and RDP")
    non_private: bool = Field(True, description="also a non-private flow (the mu = infinity column of Su et al. 2023)")
    dpnf: DPNFConfig = DPNFConfig()
    runs: int = Field(1, ge=1, description="flows per imputation and budget (Su et al. 2023: 10)")
    releases: int = Field(2, ge=1, description="synthetic tables per flow (Su et al. 2023: 10)")
    rows: int | None = Field(None, ge=1, description="rows per synthetic table (default: as many as the table's "
                                                     "patients, exact where the spec declares the count public, "
                                                     "else a noisy count at count_epsilon)")
    count_epsilon: PositiveFloat = Field(0.1, description="epsilon of the noisy patient count that sizes the tables "
                                                          "(two-sided geometric mechanism; entered in the ledger)")
    scaling: Literal["bounds", "train"] = Field("bounds", description="bounds: center/scale from the spec's "
                                                "bounds (data-independent); train: training mean/sd (not private)")
    synthesizers: list[Synthesizer] = Field(
        default_factory=lambda: ["maf"], min_length=1,
        description="maf: DP-NF (Su et al. 2023); hflow: DP-HFlow (Lee et al. 2022, mixed types); "
                    "aim, mst: marginal-based baselines (epsilon budgets only; pip install privehr[baselines])")
    hflow: HFlowConfig = HFlowConfig()
    marginal: MarginalConfig = MarginalConfig()
    classification_target: str | None = Field(None, description="binary column the utility classifiers predict "
                                                                "(default: the spec's targets.classification)")
    regression_target: str | None = Field(None, description="numeric column the random forest predicts (default: "
                                                            "the spec's targets.regression)")
    excluded_features: list[str] | None = Field(None, description="columns left out of the utility models' inputs "
                                                                  "(default: the spec's targets.excluded_features)")
    privacy: PrivacyConfig = Field(PrivacyConfig(), description="ledger, budget, delta and noise of the table's "
                                                                "releases")
    resume: bool = Field(False, description="continue run_id's directory: flows whose release record exists are "
                                            "not retrained (a retrained flow would be a new, unrecorded release)")

    _resume_needs_run_id = model_validator(mode="after")(lambda self: _resume_needs_run_id(self))
    _ledger_beside_runs = model_validator(mode="after")(lambda self: _ledger_beside_runs(self))
    _delta_moved = _moved("delta", "privacy.delta")
    _ledger_moved = _moved("ledger_path", "privacy.ledger_path")
    _budget_moved = _moved("budget_epsilon", "privacy.budget_epsilon")

    def budgets(self) -> list[Budget]:
        out = [Budget(kind="non_private")] if self.non_private else []
        return out + [Budget(kind="mu", value=m) for m in self.mus] + [Budget(kind="epsilon", value=e)
                                                                       for e in self.epsilons]

    def jobs(self) -> list[dict]:
        """(synthesizer, imputation, budget, run), one release each. The marginal baselines take the epsilon budgets
        only (they have no non-private form and no mu-GDP calibration). The MAF's job ids carry no prefix."""
        return [{"synthesizer": s, "imputation": i, "budget": b.model_dump(), "run": r,
                 "job_id": f"{'' if s == 'maf' else s + '-'}imp{i}-{b.label}-run{r}"}
                for s in self.synthesizers for i in range(self.mice.m) for b in self.budgets() for r in range(self.runs)
                if s not in MARGINAL_SYNTHESIZERS or b.kind == "epsilon"]

    def targets(self, spec) -> tuple[str | None, str | None, list[str]]:
        """(classification target, regression target, excluded features): these settings, else the spec's."""
        t = spec.targets
        return (self.classification_target or t.classification, self.regression_target or t.regression,
                t.excluded_features if self.excluded_features is None else self.excluded_features)


class SplitConfig(_Strict):
    """Subject-level split, stratified by the label combination."""

    train: float = Field(0.7, gt=0, lt=1)
    dev: float = Field(0.1, gt=0, lt=1)
    test: float = Field(0.2, gt=0, lt=1)
    seed: int = 1

    @model_validator(mode="after")
    def _sums_to_one(self):
        if abs(self.train + self.dev + self.test - 1.0) > 1e-9:
            raise ValueError(f"split fractions must sum to 1, got {self.train + self.dev + self.test}")
        return self


class NonPrivateSettings(_Strict):
    """How a non-private model trains: AdamW for ``max_epochs`` (the audit's overfit shadows use these alone)."""

    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-2, ge=0, description="decoupled (AdamW)")
    batch_size: int = Field(128, ge=1)
    max_epochs: int = Field(40, ge=1)


class NonPrivateConfig(NonPrivateSettings):
    """Non-private training: AdamW, early stopping on dev during the search (the epoch count of the final fit)."""

    patience: int = Field(6, ge=1)
    early_stopping: Literal["auroc", "loss"] = Field(
        "auroc", description="dev criterion of the best epoch: AUROC, or the loss (BCE/l2) over every dev row, "
                             "far less noisy when the dev split holds few positives (the demo profile uses it)")


class DPSGDSettings(_Strict):
    """How a DP-SGD model trains: Poisson sampling, clipping, Adam(W); the target epsilon comes with the release
    (the grid's ``epsilons``, the audit's ``epsilon``)."""

    clipping: DPSGDClipping = Field(
        "ghost", description="per-sample clipping: privehr's ghost clipping (norms from each layer's inputs and "
                             "output gradients, no per-sample gradient; about 1.2x a non-private GRU-D epoch on "
                             "CPU), or Opacus's hooks or functorch; all three sample, clip and noise alike")
    max_grad_norm: float = Field(1.0, gt=0)
    epochs: int = Field(5, ge=1, description="at lr 1e-2, 10 epochs overfit at large epsilon (los_3 on the demo "
                                             "lost 0.01 AUROC from epsilon 1 to 10); 5 also lowers sigma at small ones")
    batch_size: int = Field(128, ge=1, description="expected batch size q * n")
    learning_rate: float = Field(1e-2, gt=0)
    weight_decay: float = Field(0.0, ge=0, description="decoupled (AdamW): post-processing, no privacy cost")

    _delta_moved = _moved("delta", "privacy.delta")


class DPSGDConfig(DPSGDSettings):
    """DP-SGD in the grid: sigma calibrated to each target epsilon."""

    epsilons: list[PositiveFloat] = Field(default_factory=lambda: [0.1, 1.0, 3.5, 10.0], min_length=1,
                                          description="target epsilons (PRV and RDP both stay below each)")


class ExpMNFConfig(_Strict):
    """ExpM+NF (Bridges et al. 2023): a flow fitted by reverse KL to exp(eps~ u / 2s), u = -sum of squared errors.

    eps~ is a training parameter: no differential-privacy guarantee is proven for ExpM+NF."""

    epsilons: list[PositiveFloat] = Field(default_factory=lambda: [0.1, 1.0, 3.5, 10.0], min_length=1,
                                          description="eps~ of the targeted exponential mechanism")
    models: list[Model] = Field(
        default_factory=lambda: ["logistic_regression"], min_length=1,
        description="the models ExpM+NF trains (among training.models). GRU-D's flow over ~27,000 parameters "
                    "stays at one point with the default 80 steps and 4 draws: its test AUROC was the same at "
                    "every eps~ (0.721 for los_3, 0.837 for mort_icu; fit gap std 117), so its rows said nothing "
                    "about the mechanism; the full profile adds it with 300 steps and 16 draws")
    seeds: int | None = Field(2, ge=1, description="flows per cell (None: training.seeds)")
    flow: Literal["planar", "sylvester"] = "sylvester"
    layers: int = Field(4, ge=1)
    m: int = Field(4, ge=1, description="Sylvester: columns of Q")
    reflections: int = Field(4, ge=1, description="Sylvester: Householder reflections building Q")
    base_sigma: float = Field(0.01, gt=0, description="scale of the base N(0, sigma^2 I)")
    affine: bool = Field(True, description="an elementwise affine layer before the flow layers")
    samples: int = Field(8, ge=1, description="parameter draws per step (N)")
    steps: int = Field(80, ge=1)
    grud_samples: int = Field(4, ge=1, description="GRU-D: parameter draws per step")
    learning_rate: float = Field(3e-3, gt=0)
    optimizer: Literal["adam", "rmsprop"] = "adam"
    l1: float = Field(1e-3, ge=0, description="L1 regulariser in u (makes the target proper)")
    batch_size: int | None = Field(None, ge=1, description="logistic regression: records per utility estimate "
                                                           "(None: all, the exact utility)")
    grud_batch_size: int | None = Field(64, ge=1, description="GRU-D: records per n/B-scaled utility estimate")
    eval_samples: int = Field(50, ge=1, description="parameter draws evaluated per flow (Bridges et al. 2023: 1000)")


class GRUDConfig(_Strict):
    hidden_size: int = Field(32, ge=1)
    batch_norm: bool = Field(False, description="non-private GRU-D only: batch norm mixes samples, so DP "
                                                "runs never use it")


class Cell(_Strict):
    """One cell of the training grid; its runs differ only in the seed."""

    label: Label
    model: Model
    method: Method
    loss: Loss
    target_epsilon: float | None = None

    @property
    def cell_id(self) -> str:
        eps = "inf" if self.target_epsilon is None else f"{self.target_epsilon:g}"
        return f"{self.label}-{self.model}-{self.method}-{self.loss}-eps{eps}"


class TrainingConfig(_Strict):
    """The grid: label x model x method x loss x epsilon, each cell searched once and fitted per seed."""

    models: list[Model] = Field(default_factory=lambda: ["logistic_regression", "grud"], min_length=1)
    methods: list[Method] = Field(default_factory=lambda: ["non_private", "dp_sgd", "expm_nf"], min_length=1)
    losses: list[Loss] = Field(default_factory=lambda: ["bce"], min_length=1,
                               description="bce, and/or l2 (squared error on the sigmoid, as ExpM+NF)")
    seeds: int = Field(3, ge=1, description="final fits per cell; results are medians over seeds")
    search_budget: int = Field(1, ge=1, description="random configurations tried on train/dev (1 = defaults)")
    search_seed: int = 0
    non_private: NonPrivateConfig = NonPrivateConfig()
    dp_sgd: DPSGDConfig = DPSGDConfig()
    expm_nf: ExpMNFConfig = ExpMNFConfig()
    grud: GRUDConfig = GRUDConfig()


class EvaluationConfig(_Strict):
    """Test-set evaluation beyond the median AUROC: calibration, bootstrap intervals and subgroups.

    None of these statistics carries a DP guarantee: they are computed on the private test split and
    reported to the team that owns it.
    """

    bootstrap_resamples: int = Field(1000, ge=100, description="stratified bootstrap resamples of the test stays")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="of the percentile intervals")
    bootstrap_seed: int = Field(0, description="of the resampling (public: not a privacy mechanism)")
    calibration_bins: int = Field(10, ge=2, description="equal-mass bins of the ECE and the reliability diagram "
                                                        "(fewer where a bin would hold under min_group_stays)")
    min_group_stays: int = Field(50, ge=1, description="a subgroup with fewer test stays is reported as too small, "
                                                       "and no calibration bin is smaller")
    min_group_per_class: int = Field(10, ge=1, description="... and one with fewer stays of either class")


class VersioningConfig(_Strict):
    """Version each run directory with DVC (``dvc add artifacts/<run-id>``, then push)."""

    dvc: bool = True
    push: bool = Field(True, description="push to the default DVC remote when one is configured")


class PipelineConfig(_Strict):
    """Everything one run of ``privehr-pipeline`` needs."""

    data: DataConfig = DataConfig()
    validation: ValidationConfig = ValidationConfig()
    split: SplitConfig = SplitConfig()
    static_imputation: StaticImputationConfig | None = Field(
        None, description="also impute the cohort's static table with MICE (off by default)")
    synthesis: SynthesisConfig | None = Field(
        None, description="also synthesise an EHR table with DP-NF; its run goes to <run>/synthesis/")
    labels: list[Label] = Field(default_factory=lambda: ["mort_icu", "los_3"], min_length=1, description=(
        "MIMIC-Extract's labels of the cohort to train for: mort_hosp, mort_icu, los_3, los_7 (each adds a "
        "grid); every run evaluates calibration, intervals and subgroups for each"))
    training: TrainingConfig = TrainingConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    pages: PagesConfig = PagesConfig()
    versioning: VersioningConfig = VersioningConfig()
    artifacts_dir: Path = Field(Path("artifacts"), description="runs go to <artifacts_dir>/<run-id>/")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$",
                               description="defaults to a UTC timestamp plus a random suffix")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    resume: bool = Field(False, description="continue run_id's directory: grid cells whose results exist for "
                                            "the same input, cell, hyperparameters and seed are not retrained")

    def synthesis_run(self, run_dir: str | Path) -> SynthesisConfig:
        """The synthesis settings of a pipeline run: its own run directory <run>/synthesis, and the pipeline's
        ledger, budget, delta and noise (the table keeps its own dataset id)."""
        privacy = self.privacy.model_copy(update={"dataset_id": self.synthesis.privacy.dataset_id})
        return self.synthesis.model_copy(update={"artifacts_dir": Path(run_dir), "run_id": "synthesis",
                                                 "privacy": privacy, "resume": self.resume})

    @model_validator(mode="after")
    def _one_privacy_section(self):
        if self.synthesis is not None:
            # a field set to its default changes nothing (and every field is set in a saved config.json)
            given = self.synthesis.privacy
            shared = [f for f in given.model_fields_set - {"dataset_id"}
                      if getattr(given, f) != type(given).model_fields[f].get_default(call_default_factory=True)
                      and not (f == "ledger_path" and given.ledger_path == _default_ledger(self.synthesis))]
            if shared:
                raise ValueError(f"synthesis.privacy.{sorted(shared)[0]}: the synthesis subflow uses the pipeline's "
                                 "privacy settings; set them under privacy (synthesis.privacy takes only dataset_id, "
                                 "the EHR table's own identity)")
        return self

    _resume_needs_run_id = model_validator(mode="after")(lambda self: _resume_needs_run_id(self))
    _ledger_beside_runs = model_validator(mode="after")(lambda self: _ledger_beside_runs(self))


BRIDGES_2023_EPSILONS = [1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0]

DEMO_SYNTHESIS = {"path": "data/ehr/EHR_dataset.csv", "mice": {"m": 2}, "runs": 1, "releases": 2}

PROFILES: dict[str, dict] = {
    # the demo's dev split holds ~18 deaths: its AUROC keeps rising while the model overfits, its loss does not
    "demo": {"synthesis": DEMO_SYNTHESIS, "training": {"non_private": {"early_stopping": "loss"}}},
    # Bridges et al. 2023: epsilon 1e-4 ... 10, both losses, 10 seeds (10 flows x 1000 samples), a real search
    "full": {"training": {"seeds": 10, "search_budget": 10, "losses": ["bce", "l2"],
                          "dp_sgd": {"epsilons": BRIDGES_2023_EPSILONS},
                          "expm_nf": {"epsilons": BRIDGES_2023_EPSILONS, "seeds": 10, "eval_samples": 1000,
                                      "models": ["logistic_regression", "grud"],
                                      "steps": 300, "samples": 32, "grud_samples": 16, "grud_batch_size": 256}},
             # Su et al. 2023: 5 imputations x 10 flows x 10 releases, T = 8000
             "synthesis": {**DEMO_SYNTHESIS, "mice": {"m": 5}, "runs": 10, "releases": 10, "dpnf": {"steps": 8000}}},
}


class AuditConfig(_Strict):
    """Membership-inference audit of a finished run: LiRA with shadow models and the one-run bound.

    Shadows are trained with the same mechanism as the audited model, on random halves of the run's
    training split (the audit population); each shadow in turn is the target. The attack statistics are
    computed from the private training split without noise: the audit is recorded in the ledger as a
    release without a DP guarantee.
    """

    run_dir: Path = Field(..., description="a finished privehr-pipeline run (its features are reused)")
    label: Label = "mort_icu"
    model: Model = "logistic_regression"
    mechanisms: list[AuditedMethod] = Field(default_factory=lambda: ["non_private", "dp_sgd"], min_length=1)
    shadows: int = Field(16, ge=4, description="even; every example is IN for exactly half; at least 4, so that "
                                                "leaving one out still leaves IN and OUT shadows for every example")
    epsilon: PositiveFloat = Field(1.0, description="target epsilon of the DP-SGD shadows")
    privacy: PrivacyConfig = Field(PrivacyConfig(), description="the ledger the audit's (non-DP) statistics are "
                                   "recorded in, the shadows' delta, and the noise switch (reproducible_noise also "
                                   "seeds the canary draw)")
    non_private: NonPrivateSettings = Field(default_factory=lambda: NonPrivateSettings(
        learning_rate=3e-3, weight_decay=0.0, max_epochs=30), description="an overfit non-private model")
    dp_sgd: DPSGDSettings = Field(DPSGDSettings(), description="the DP-SGD shadows' training (their target is "
                                                              "``epsilon``)")
    seed: int = Field(0, description="initialisation of the shadows (public: it is not DP randomness)")
    significance: float = Field(0.05, gt=0, lt=1, description="of the one-run epsilon lower bound")

    _delta_moved = _moved("delta", "privacy.delta")

    @model_validator(mode="after")
    def _even(self):
        if self.shadows % 2:
            raise ValueError("shadows must be even (every example IN for exactly half of them)")
        return self


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(path: str | Path | None = None, profile: str = "demo", **overrides) -> PipelineConfig:
    """A ``PipelineConfig``: a profile, then a YAML/JSON file (optional), then dotted overrides.

    ``overrides`` maps dotted keys to values, e.g. ``{"data.hdf5_path": "x.h5"}``.
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise InputError(f"config file not found: {path}")
        text = path.read_text()
        try:
            raw = (json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)) or {}
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise InputError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                             f"{err}; fix the line it names") from None
        if not isinstance(raw, dict):
            raise InputError(f"config file {path} must hold a mapping of settings")
    raw = _merge(PROFILES[profile], raw)
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    try:
        return PipelineConfig.model_validate(raw)
    except ValueError as err:
        raise InputError(f"invalid configuration: {err}") from None
