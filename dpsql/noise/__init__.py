"""Noise: the samplers (:mod:`.mechanisms`), smoothing (:mod:`.smooth`), the per-measurement
plan (:mod:`.plan`), applying a plan to exact values (:mod:`.apply`), and private selection
(:mod:`.selection`: the exponential mechanism, Report Noisy Max, grid quantiles)."""
