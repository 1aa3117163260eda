"""Noise: the samplers (:mod:`.mechanisms`), smoothing (:mod:`.smooth`), the per-measurement
plan (:mod:`.plan`), applying a plan to exact values (:mod:`.apply`), private selection
(:mod:`.selection`: the exponential mechanism, Report Noisy Max, grid quantiles), R2T under
a privacy unit (:mod:`.r2t`), the per-release secret key of sample-and-aggregate's blocks
(:mod:`.block_key`), and partition selection (:mod:`.partition`, :mod:`.unit_partition`; at
kappa = 1 the optimal mechanism, :mod:`.optimal_partition`, drawn by :mod:`.bernoulli`)."""
