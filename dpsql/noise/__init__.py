"""Noise: the samplers (:mod:`.mechanisms`), smoothing (:mod:`.smooth`), the per-measurement
plan (:mod:`.plan`) and applying a plan to exact values (:mod:`.apply`)."""
