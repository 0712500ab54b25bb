"""Normalizing flows: MADE, MAF, rational-quadratic splines, planar and Sylvester layers, dequantization, DP-HFlow
and its low-rank linear layer, flows over parameters and for variational inference, and DP-NF training
(density estimation by DP-SGD)."""
