"""Privacy: the plan of a release (sigma, q, T), the accountants (PRV, RDP, PLD; GDP and zCDP beside them), budget
kinds, where a mechanism's noise comes from, the noisy count, and the ledger's arithmetic (composition, never
understated). Pure math: the ledger file lives in :mod:`privehr.io.ledger`."""
