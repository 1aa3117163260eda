"""Sample-and-aggregate (issue #18 part 3; docs/privacy.md, "Sample-and-aggregate").

For aggregates no sensitivity rule covers (medians over joins, ratios, any scalar SQL over one
private table), when the owner enabled it on the table (metadata ``sample_aggregate: {blocks:
m, by: col}``) and the analyst asks for it per output (``SAMPLE_AGGREGATE(expr, lo, hi)``):

* the private table's rows are split into m disjoint blocks by a keyed hash of ``by`` (or of
  the whole row), with a fresh secret key per release (dpsql.noise.block_key);
* the query runs per block in one pass (GROUP BY the block id);
* each block's answer is clamped to the declared [lo, hi] (an empty block or a NULL answer
  counts as lo), and their mean is released with Laplace noise for sensitivity 2 (hi - lo) / m
  (or, with ``mechanism='gaussian'``, discrete Gaussian noise for the same sensitivity).

Modules: :mod:`.analysis` (which SQL, refusals), :mod:`.rewrite` (the one-pass SQL),
:mod:`.release` (noise plan, record, clamped noisy mean), :mod:`.gaussian` (the Gaussian's
sigma, refusals and rho), :mod:`.prepared` (what the session
keeps, and one release). The session (dpsql.session) routes a query here when its SQL calls
SAMPLE_AGGREGATE, and keeps the usual order: refusals, charge, read, noise.
"""
