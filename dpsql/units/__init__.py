"""Privacy units (issue #17; docs/privacy.md, "Privacy units"): protect one unit -- a customer,
a patient -- with every row linked to it, instead of one row.

analysis.py  the query's shape (the row-level analysis) and the unit-level bounds
paths.py     the proof that every row a query reads belongs to one unit, and how to compute it
rewrite.py   the executed query: per-unit contributions, truncated (R2T) or two-stage bounded
noise.py     R2T noise plans and releases (dpsql.noise.r2t per part)
execute.py   reading R2T's truncated sums and releasing them
record.py    the release record's R2T intervals
"""
