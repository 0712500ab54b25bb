"""The training grid of ``privehr-pipeline``: the split, each method's settings, the classifiers' and the
test-set evaluation."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from privehr.core.config.base import _moved, _Strict, DPSGDClipping, Label, Loss, Method, Model, PositiveFloat

__all__ = ["Cell", "DPExpMConfig", "DPSGDConfig", "DPSGDSettings", "EvaluationConfig", "ExpMNFConfig", "GRUDConfig",
           "NonPrivateConfig", "NonPrivateSettings", "SplitConfig", "TrainingConfig"]


class SplitConfig(_Strict):
    """Subject-level split: by each subject's hash (stable when one patient is added), or label-stratified."""

    train: float = Field(0.7, gt=0, lt=1)
    dev: float = Field(0.1, gt=0, lt=1)
    test: float = Field(0.2, gt=0, lt=1)
    seed: int = 1
    method: Literal["hash", "stratified"] = Field(
        "hash", description="hash: a subject's split follows from its id and the seed alone, so one patient more "
                            "or less moves no other (what a DP release of a split assumes); stratified: label rates "
                            "equal across splits, but one patient more reshuffles its stratum (a release bundle is "
                            "then not DP end to end)")

    @model_validator(mode="after")
    def _sums_to_one(self):
        if abs(self.train + self.dev + self.test - 1.0) > 1e-9:
            raise ValueError(f"split fractions must sum to 1, got {self.train + self.dev + self.test}")
        return self


class NonPrivateSettings(_Strict):
    """How a non-private model trains: AdamW for ``max_epochs`` (the audit's overfit shadows train by these, with
    the audited run's architecture)."""

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

    #: its ``epsilons`` are accounted targets, held to ``privacy.epsilon_ceiling`` (:meth:`TrainingConfig.targets`)
    accounted: ClassVar[bool] = True

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
                    "stayed at one point with 80 steps and 4 draws: its test AUROC was the same at every eps~ "
                    "(0.721 for los_3, 0.837 for mort_icu; fit gap std 117), so its rows said nothing about the "
                    "mechanism; the full profile adds it with 300 steps and 16 draws")
    seeds: int | None = Field(1, ge=1, description="flows per cell (None: training.seeds); each row reports the "
                                                   "spread of its flow's eval_samples draws")
    flow: Literal["planar", "sylvester"] = "sylvester"
    layers: int = Field(4, ge=1)
    m: int = Field(4, ge=1, description="Sylvester: columns of Q")
    reflections: int = Field(4, ge=1, description="Sylvester: Householder reflections building Q")
    base_sigma: float = Field(1.0, gt=0, description="scale of the base N(0, sigma^2 I). With 0.01, lr 3e-3 and 80 "
                                                    "steps the flow never left theta = 0's neighbourhood: Adam moved "
                                                    "each weight by about lr per step in the sign of u's gradient at "
                                                    "0, whatever eps~ (Adam divides its scale out), so every eps~ "
                                                    "gave the same classifier (demo, mort_icu: AUROC 0.176). With 1.0, "
                                                    "lr 3e-2 and 400 steps the flow reaches the target's width "
                                                    "(README, 'ExpM+NF with a guarantee')")
    affine: bool = Field(True, description="an elementwise affine layer before the flow layers")
    samples: int = Field(8, ge=1, description="parameter draws per step (N)")
    steps: int = Field(400, ge=1, description="Adam steps; 400 at lr 3e-2 came within 0.3-8 % of 2,000 steps' "
                                                 "reverse KL (demo LR, bench/expm_schedule.py)")
    grud_samples: int = Field(4, ge=1, description="GRU-D: parameter draws per step")
    learning_rate: float = Field(3e-2, gt=0)
    optimizer: Literal["adam", "rmsprop"] = "adam"
    l1: float = Field(1e-3, ge=0, description="L1 regulariser in u (makes the target proper)")
    batch_size: int | None = Field(None, ge=1, description="logistic regression: records per utility estimate "
                                                           "(None: all, the exact utility)")
    grud_batch_size: int | None = Field(64, ge=1, description="GRU-D: records per n/B-scaled utility estimate")
    eval_samples: int = Field(50, ge=1, description="parameter draws evaluated per flow (Bridges et al. 2023: 1000)")


class DPExpMConfig(_Strict):
    """DP-trained ExpM flows: ExpM+NF's target exp(eps~ u / 2s) fitted by DP-SGD over records (a diagonal Gaussian
    flow over the classifier's parameters); each release is DP at its target epsilon, eps~ (``temperature``) only
    shapes the target. The classifier released is the flow's mean."""

    accounted: ClassVar[bool] = True  # as DP-SGD's

    epsilons: list[PositiveFloat] = Field(default_factory=lambda: [0.1, 1.0, 3.5, 10.0], min_length=1,
                                          description="target epsilons (PRV and RDP both stay below each), as "
                                                      "DP-SGD's so the figure compares them at the same epsilon")
    losses: list[Loss] = Field(
        default_factory=lambda: ["bce"], min_length=1,
        description="the utility's per-record loss: l2 is ExpM+NF's squared error on the sigmoid (s = 1); bce the "
                    "cross-entropy (the Gibbs density of the logistic likelihood). No privacy rests on s here")
    models: list[Model] = Field(default_factory=lambda: ["logistic_regression"], min_length=1,
                                description="the models it trains (among training.models); GRU-D's per-record "
                                            "scores go through torch.func, about 4x a DP-SGD step per draw")
    temperature: PositiveFloat = Field(
        20.0, description="eps~ of the targeted density exp(eps~ u / 2): a utility knob, no privacy claim. Chosen "
                          "between 2 and 20 on a tuning extract (bench/dp_expm.py --tag tune: 2,000 simulated stays, "
                          "seed 1), never on the demo's")
    draws: int = Field(4, ge=1, description="parameter draws per step, shared by every record")
    init_scale: PositiveFloat = Field(0.01, description="sigma0: the flow starts at N(0, sigma0^2 I), as ExpM+NF's "
                                                        "base_sigma")
    l1: float = Field(1e-3, ge=0, description="L1 regulariser in u (as ExpM+NF's)")
    max_grad_norm: PositiveFloat = 1.0
    epochs: int = Field(5, ge=1, description="as DP-SGD's, so both spend the same plan at each epsilon")
    batch_size: int = Field(128, ge=1, description="expected batch size q * n")
    learning_rate: PositiveFloat = Field(1e-2, description="Adam on the flow's mean and log-scale, as DP-SGD's")
    eval_samples: int = Field(50, ge=1, description="draws from the released flow scored on test (post-processing)")


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
    methods: list[Method] = Field(default_factory=lambda: ["non_private", "dp_sgd", "expm_nf", "dp_expm_nf"],
                                  min_length=1)
    losses: list[Loss] = Field(default_factory=lambda: ["bce"], min_length=1,
                               description="bce, and/or l2 (squared error on the sigmoid, as ExpM+NF)")
    seeds: int = Field(3, ge=1, description="final fits per cell; results are medians over seeds")
    search_budget: int = Field(1, ge=1, description="random configurations tried on train/dev (1 = defaults)")
    search_seed: int = 0
    tuning: Literal["dp", "exact"] = Field(
        "dp", description="how a search with search_budget > 1 chooses among DP-SGD trials: dp = each trial's dev "
                          "AUROC from a DP mechanism (noisy per-class score histograms on dev, search_score_epsilon "
                          "each), composed with the trials and the final fit in the ledger, so the tuned model is "
                          "DP; exact = exact dev AUROC, the tuned model is recorded as not DP. Non-private and "
                          "ExpM+NF cells choose by exact dev AUROC either way (they carry no guarantee)")
    search_score_epsilon: PositiveFloat = Field(
        0.5, description="tuning: dp's (epsilon, privacy.delta) of each trial's noisy dev score histograms "
                         "(release.evaluation_bins bins)")
    non_private: NonPrivateConfig = NonPrivateConfig()
    dp_sgd: DPSGDConfig = DPSGDConfig()
    expm_nf: ExpMNFConfig = ExpMNFConfig()
    dp_expm_nf: DPExpMConfig = DPExpMConfig()
    grud: GRUDConfig = GRUDConfig()
    batched: Literal["auto", "on", "off"] = Field(
        "auto", description="train a cell family's final fits (one label, model, method and loss: its epsilons x "
                            "seeds) as one batched model, each release with its own Poisson sample, clipping, noise, "
                            "plan and ledger entry (DP-SGD, models/dpsgd/batched.py: the members stacked into one "
                            "module and clipped by ghost clipping, or by torch.func where dp_sgd.clipping is "
                            "functorch; ExpM+NF's flows whose utility reads every record, which share each step's pass "
                            "over them; other methods fit one by one): auto = on CUDA, and on CPU in groups of at "
                            "most 12 where group_size is 0, DP-SGD only with ghost clipping (on 2 CPU cores a GRU-D "
                            "group of 12 trained 1.5x as fast as its fits one at a time, of 48 0.8x: "
                            "bench/README.md); on (groups of group_size, 0: whole families, any clipping); off")
    group_size: int = Field(0, ge=0, description="at most this many fits per batched group (0: the whole family); "
                                                 "memory is bounded either way (the per-sample gradients go through "
                                                 "in chunks of members)")

    def targets(self) -> dict[str, list[float]]:
        """The target epsilons each method of ``methods`` calibrates noise to, by where they are set: the epsilons of
        every method whose settings (the field named as the method) say they are ``accounted``, and the epsilon of a
        DP search's noisy dev scores. What the privacy ceiling holds; ExpM+NF's eps~ shapes a density and is no
        guarantee, so it is not one."""
        targets = {f"training.{name}.epsilons": list(getattr(self, name).epsilons) for name in self.methods
                   if getattr(type(getattr(self, name, None)), "accounted", False)}  # a method without settings: none
        if targets and self.search_budget > 1 and self.tuning == "dp":  # each trial's noisy dev scores: a release
            targets["training.search_score_epsilon"] = [self.search_score_epsilon]
        return targets


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
