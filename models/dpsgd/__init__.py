"""DP-SGD: the trainer (Poisson sampling, per-sample clipping, Gaussian noise by a :class:`ReleasePlan`), ghost
clipping with one rule per layer type (as Opacus keeps ``grad_sample/linear.py``), fine-grained clipping, Opacus
rules for privehr's own layers, and the noisy step the clipping paths share."""
