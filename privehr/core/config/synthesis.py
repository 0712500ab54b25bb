"""``privehr-ehr-prepare`` and ``privehr-synthesize``: MICE, the flows (DP-NF, DP-HFlow), the marginal
baselines and the synthesis budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from privehr.core.config.base import _moved, _resume_needs_run_id, _Strict, FineGrainedClipping, PositiveFloat, RunId
from privehr.core.config.privacy import _ledger_beside_runs, PrivacyConfig
from privehr.core.registry import NAME_PATTERN

__all__ = ["default_synthesizers",
           "Budget", "DPNFConfig", "EHRPrepareConfig", "HFlowConfig", "MarginalConfig",
           "MICEConfig", "StaticImputationConfig", "SynthesisConfig", "SynthesisMICEConfig", "Synthesizer",
           "BUILTIN_SYNTHESIZERS"]


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
    test_fraction: float = Field(20 / 84, gt=0, lt=1, description="expected share of held-out patients (Su et al. "
                                                                "2023: 20 of 84); each patient's split is a hash of "
                                                                "itself and split_seed, so the count varies around it")
    split_seed: int = Field(1, description="public: part of the split's hash")
    mice: MICEConfig = MICEConfig()
    stop_on_critical: bool = True
    artifacts_dir: Path = Path("artifacts")
    run_id: RunId | None = None


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
    """AIM and MST (McKenna et al.) through private-pgm (a dependency): the marginal-based
    baselines, run on the same training patients at the same (epsilon, delta)."""

    bins: int = Field(16, ge=2, le=64, description="equal-width bins of each numeric column's bounds (public)")
    max_model_size: float = Field(80.0, gt=0, description="AIM: the model's size limit in MB")
    within_share: float = Field(0.1, gt=0, lt=1, description="aim_dyadic: the share of the budget's zCDP rho spent "
                                                             "on the continuous columns' dyadic histograms")
    within_levels: int = Field(4, ge=1, le=10, description="aim_dyadic: how many times each bin is halved")
    within_stop: float = Field(2.0, gt=0, description="aim_dyadic: sampling stops where a node's two noisy child "
                                                      "counts sum below this many of their noise's SD")


# A synthesizer is one registered class in privehr.models.synthesis, found by its name: a module that registers
# another is all it takes (the registry refuses a name it does not hold, in one line). The ones privehr ships:
BUILTIN_SYNTHESIZERS = ("maf", "hflow", "aim", "mst", "aim_dyadic")
Synthesizer = Annotated[str, Field(pattern=NAME_PATTERN,
                                   json_schema_extra={"examples": list(BUILTIN_SYNTHESIZERS)})]


def default_synthesizers(spec) -> list[str]:
    """aim_dyadic for a spec with a discrete (binary, categorical, ordinal) attribute, maf for an all-numeric one (and
    for a run with no epsilon budget, ``models.synthesis.choose_synthesizers``; aim_dyadic takes epsilon budgets only):
    on mixed-type clinical tables the flows lost to AIM on tau RMSE and discrete TV, and aim_dyadic was within one SD
    of AIM or better on 26 of 30 comparisons on the tables it was not tuned on, with a lower KS where bins are heavy;
    what it loses against the MAF on small tables at epsilon 1 is in bench/README.md."""
    return ["aim_dyadic"] if any(a.discrete for a in spec.attributes) else ["maf"]


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
    mus: list[PositiveFloat] = Field(
        default_factory=lambda: [2.45, 1.49],
        description="budgets as mu-GDP; sigma = 1/sqrt(log(1 + (mu/q)^2/T)). Su et al. 2023 also ran 6.10 and 3.92, "
                    "epsilon 44 and 24 at delta 1e-5, above privacy.epsilon_ceiling: the full profile runs all four "
                    "with allow_above_ceiling (labelled weak)")
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
    missing: Literal["in_release", "mice_first"] = Field(
        "in_release", description="where missing values are handled: in_release (each attribute gets a 0/1 "
                                  "missingness column the synthesizer learns, its missing values a public placeholder; "
                                  "the synthetic tables are imputed by MICE afterwards, which is post-processing: DP "
                                  "end to end; one synthesizer per budget and run, on the table as delivered) or "
                                  "mice_first (the papers' order: MICE fitted on all training patients, then a "
                                  "synthesizer per imputation; one patient moves others' imputations, so the tables "
                                  "are recorded as not DP end to end)")
    scaling: Literal["bounds", "train"] = Field("bounds", description="bounds: center/scale from the spec's "
                                                "bounds (data-independent); train: training mean/sd (not private)")
    synthesizers: list[Synthesizer] | None = Field(
        None, min_length=1,
        description="maf: DP-NF (Su et al. 2023); hflow: DP-HFlow (Lee et al. 2022, mixed types); aim, mst: "
                    "marginal-based (McKenna et al.); aim_dyadic: AIM plus DP values within its bins (the marginal "
                    "ones take epsilon budgets only: mus and non_private make no release of theirs). Default: "
                    "aim_dyadic for a table with a binary, categorical or ordinal attribute (within one SD of AIM or "
                    "better on 26 of 30 comparisons on clinical tables it was not tuned on; "
                    "bench/mixed_type_synthesis.py), maf for an all-numeric one or a run without epsilon budgets")
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
    _below_ceiling = model_validator(mode="after")(
        lambda self: self.privacy.check_targets([*self.epsilons, self.count_epsilon], "epsilons") or self)
    _delta_moved = _moved("delta", "privacy.delta")
    _ledger_moved = _moved("ledger_path", "privacy.ledger_path")
    _budget_moved = _moved("budget_epsilon", "privacy.budget_epsilon")

    def budgets(self) -> list[Budget]:
        out = [Budget(kind="non_private")] if self.non_private else []
        return out + [Budget(kind="mu", value=m) for m in self.mus] + [Budget(kind="epsilon", value=e)
                                                                       for e in self.epsilons]

    def targets(self, spec) -> tuple[str | None, str | None, list[str]]:
        """(classification target, regression target, excluded features): these settings, else the spec's."""
        t = spec.targets
        return (self.classification_target or t.classification, self.regression_target or t.regression,
                t.excluded_features if self.excluded_features is None else self.excluded_features)
