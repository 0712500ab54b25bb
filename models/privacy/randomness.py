"""Where the randomness of a differentially private mechanism comes from.

A DP guarantee holds only if the mechanism's noise and sampling are unpredictable to the attacker.
The attacker is assumed to have privehr's code, the configuration, the run id and every artifact,
so a seed derived from any of them (a hash of the cell name, a job id, a config seed) lets the
attacker replay training under "record in" and "record out" and compare with the released weights:
the guarantee is then void, whatever epsilon the accountant prints.

:class:`NoiseSource` is the one way a DP mechanism in privehr gets randomness:

* ``NoiseSource.secret()`` (the default): every generator it hands out is seeded with 64 fresh
  bits from the operating system's CSPRNG (:mod:`secrets`, i.e. ``getrandom``/``/dev/urandom``).
  The seed is never returned, stored, logged or written anywhere; two releases never share one.
* ``NoiseSource.reproducible(*key)``: seeds derived from ``key`` (the release's identity in the
  configuration), for tests and debugging only. A release made this way is *not DP* against an
  attacker who has the configuration, and the ledger and the report say so.

What the OS seed does not make cryptographic: torch's CPU generator is a Mersenne Twister and its
CUDA generator Philox, neither a CSPRNG. Their raw outputs are never released (only sums of many
draws with gradients), and :func:`gaussian_noise` draws each Gaussian coordinate as the sum of four
draws (Holohan and Braghin, "Secure Random Sampling in Differential Privacy", ESORICS 2021,
arXiv:2107.10138, Section 5.1), which is what Opacus's ``secure_mode`` does against the
floating-point attack on Gaussian samplers (Jin, McMurtry, Rubinstein, Ohrimenko, "Are We There
Yet? Timing and Floating-Point Attacks on Differential Privacy Systems", S&P 2022,
arXiv:2112.05307). Opacus's ``secure_mode`` also swaps in torchcsprng's generator; torchcsprng has
no release for torch 2.x, so privehr cannot offer that part.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["NoiseSource", "gaussian_noise", "public_seed", "SEED_BITS"]

SEED_BITS = 64  # bits of OS entropy per generator (torch seeds are 64-bit)


@dataclass(frozen=True)
class NoiseSource:
    """Hands out the generators of one release's DP noise and sampling.

    >>> NoiseSource.secret().kind, NoiseSource.secret().is_dp
    ('os_entropy', True)
    >>> a, b = NoiseSource.reproducible("cell", 0), NoiseSource.reproducible("cell", 0)
    >>> bool(torch.equal(torch.rand(3, generator=a.torch_generator("noise")),
    ...                  torch.rand(3, generator=b.torch_generator("noise"))))
    True
    >>> a.is_dp, a.label
    (False, 'not DP (reproducible noise)')
    """

    _key: str | None = None  # None: OS entropy; else the reproducible key (a config-derived string)

    @classmethod
    def secret(cls) -> "NoiseSource":
        """Fresh OS entropy for every generator (the only source a DP claim may rest on)."""
        return cls(None)

    @classmethod
    def reproducible(cls, *key) -> "NoiseSource":
        """Seeds derived from ``key``: identical runs give identical noise. Not DP; for tests and debugging."""
        return cls("/".join(str(k) for k in key))

    @classmethod
    def for_release(cls, reproducible: bool, *key) -> "NoiseSource":
        """The source of one release: OS entropy, or (the ``privacy.reproducible_noise`` switch) seeded by ``key``."""
        return cls.reproducible(*key) if reproducible else cls.secret()

    @property
    def is_dp(self) -> bool:
        return self._key is None

    @property
    def kind(self) -> str:
        return "os_entropy" if self._key is None else "reproducible"

    @property
    def guarantee(self) -> str:
        """The ledger's guarantee of a DP mechanism run on this source (``privehr.models.privacy.ledger.GUARANTEES``)."""
        return "dp" if self._key is None else "reproducible"

    @property
    def label(self) -> str:
        """How a release made from this source is labelled in the ledger and the report."""
        return "DP" if self._key is None else "not DP (reproducible noise)"

    def _seed(self, stream: str) -> int:
        if self._key is None:
            return secrets.randbits(SEED_BITS)
        digest = hashlib.sha256(f"{self._key}|{stream}".encode()).digest()
        return int.from_bytes(digest[:8], "little")

    def torch_generator(self, stream: str, device: torch.device | str = "cpu") -> torch.Generator:
        """A torch generator for ``stream`` ("noise", "sampling", ...): distinct streams never share a seed."""
        return torch.Generator(device=device).manual_seed(self._seed(stream))

    def numpy_generator(self, stream: str) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(self._seed(stream)))

    def __repr__(self) -> str:  # never print a key into a log line
        return f"NoiseSource({self.kind})"


def public_seed(name: str) -> int:
    """A seed for what is *not* DP randomness (initial weights, sampling a released flow): distinct per ``name``,
    public by design (anyone with the code and the name can recompute it).

    >>> public_seed("job-1") == public_seed("job-1") != public_seed("job-2")
    True
    """
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def gaussian_noise(shape, std: float, generator: torch.Generator, device=None, dtype=torch.float32) -> torch.Tensor:
    """N(0, std^2 I) as (z1 + z2 + z3 + z4) / 2 with z_i ~ N(0, std^2 I), after one discarded draw.

    The sum has the same distribution as one draw, but its floating-point values no longer reveal
    which sampler output produced them (Holohan and Braghin 2021, Section 5.1; Opacus's
    ``_generate_noise`` in secure mode does exactly this).
    """
    device = device if device is not None else generator.device
    if std == 0:
        return torch.zeros(shape, device=device, dtype=dtype)
    torch.normal(0.0, std, size=(1,), generator=generator, device=device, dtype=dtype)
    total = torch.zeros(shape, device=device, dtype=dtype)
    for _ in range(4):
        total += torch.normal(0.0, std, size=tuple(shape), generator=generator, device=device, dtype=dtype)
    return total / 2
