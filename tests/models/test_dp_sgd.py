import torch

from models.dp_sgd import DPSGDHyperparameters, train_dp_sgd
from models.grud import GRUD
from models.logistic_regression import LogisticRegression


def test_dp_sgd_survives_empty_poisson_batches_and_stays_within_budget():
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 5, 3, generator=g), torch.ones(4, 5, 3), torch.zeros(4, 5, 3))
    y = torch.tensor([0.0, 1.0, 0.0, 1.0])
    torch.manual_seed(0)
    model = GRUD(3, 4)
    before = [p.detach().clone() for p in model.parameters()]
    # q = 1/4 with 4 examples: each of the 40 steps is empty with probability (3/4)^4 = 0.32
    model, result = train_dp_sgd(model, x, y, DPSGDHyperparameters(batch_size=1, epochs=10), target_epsilon=5.0)
    assert sum(h["empty_batches"] for h in result.history) > 0
    assert result.privacy.steps == 40 and result.privacy.sample_rate == 0.25
    assert result.privacy.epsilon_prv <= 5.0 and result.privacy.epsilon_rdp <= 5.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_dp_sgd_learns_a_strong_signal_at_large_epsilon():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 5, generator=g)
    y = (x[:, 0] > 0).float()
    torch.manual_seed(0)
    model, result = train_dp_sgd(LogisticRegression(5), x, y,
                                 DPSGDHyperparameters(batch_size=200, epochs=5, learning_rate=0.05), target_epsilon=8.0)
    with torch.no_grad():
        accuracy = ((model(x) > 0).float() == y).float().mean()
    assert accuracy > 0.9
    assert result.privacy.epsilon <= 8.0


def test_dp_sgd_is_reproducible_whatever_the_global_rng_state():
    """Poisson sampling and noise use per-run seeded generators (concurrent runs share torch's global RNG)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 5, generator=g)
    y = (x[:, 0] > 0).float()
    weights = []
    for global_seed in (100, 101):
        torch.manual_seed(0)
        model = LogisticRegression(5)
        torch.manual_seed(global_seed)
        model, _ = train_dp_sgd(model, x, y, DPSGDHyperparameters(batch_size=30, epochs=2), target_epsilon=1.0)
        weights.append(model.linear.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])
