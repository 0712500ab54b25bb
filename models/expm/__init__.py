"""The exponential mechanism by a normalizing flow (ExpM+NF, Bridges et al. 2023): its flow training and the
utility evaluated for many parameter vectors at once."""
