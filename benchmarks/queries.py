"""The benchmark's TPC-H-derived query corpus.

``FLEX`` holds the five TPC-H queries of FLEX's evaluation (Johnson, Near, Song, VLDB 2018) in
their counting form: each TPC-H query's joins, filters, subqueries and GROUP BY, with the
released aggregate replaced by COUNT(*) / COUNT(DISTINCT ...) (Q16 already counts), and without
the final LIMIT (post-processing that would make the released rows depend on noise, so rows
could not be matched to the truth for the accuracy part). ``JOINS`` holds five join counts and
sums over lineitem, orders, customer and supplier. ``EXTRA`` adds further TPC-H-shaped
aggregate queries so the analysis timing covers more shapes (it is timed only).

Each entry: (name, sql). Dates, segments and nations are the specification's validation
parameters.
"""

from __future__ import annotations

FLEX: list[tuple[str, str]] = [
    ("Q1", """
SELECT l_returnflag, l_linestatus, COUNT(*) AS count_order
FROM lineitem
WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus
"""),
    ("Q4", """
SELECT o_orderpriority, COUNT(*) AS order_count
FROM orders
WHERE o_orderdate >= DATE '1993-07-01'
  AND o_orderdate < DATE '1993-07-01' + INTERVAL '3' MONTH
  AND EXISTS (SELECT * FROM lineitem
              WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate)
GROUP BY o_orderpriority
ORDER BY o_orderpriority
"""),
    ("Q13", """
SELECT c_count, COUNT(*) AS custdist
FROM (SELECT c_custkey, COUNT(o_orderkey) AS c_count
      FROM customer LEFT OUTER JOIN orders
        ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%'
      GROUP BY c_custkey) AS c_orders
GROUP BY c_count
ORDER BY custdist DESC, c_count DESC
"""),
    ("Q16", """
SELECT p_brand, p_type, p_size, COUNT(DISTINCT ps_suppkey) AS supplier_cnt
FROM partsupp, part
WHERE p_partkey = ps_partkey
  AND p_brand <> 'Brand#45'
  AND p_type NOT LIKE 'MEDIUM POLISHED%'
  AND p_size IN (49, 14, 23, 45, 19, 3, 36, 9)
  AND ps_suppkey NOT IN (SELECT s_suppkey FROM supplier
                         WHERE s_comment LIKE '%Customer%Complaints%')
GROUP BY p_brand, p_type, p_size
ORDER BY supplier_cnt DESC, p_brand, p_type, p_size
"""),
    ("Q21", """
SELECT s_name, COUNT(*) AS numwait
FROM supplier, lineitem l1, orders, nation
WHERE s_suppkey = l1.l_suppkey
  AND o_orderkey = l1.l_orderkey
  AND o_orderstatus = 'F'
  AND l1.l_receiptdate > l1.l_commitdate
  AND EXISTS (SELECT * FROM lineitem l2
              WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey)
  AND NOT EXISTS (SELECT * FROM lineitem l3
                  WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey
                    AND l3.l_receiptdate > l3.l_commitdate)
  AND s_nationkey = n_nationkey
  AND n_name = 'SAUDI ARABIA'
GROUP BY s_name
ORDER BY numwait DESC, s_name
"""),
]

JOINS: list[tuple[str, str]] = [
    ("J1 lineitem-orders count", """
SELECT COUNT(*) AS n
FROM lineitem JOIN orders ON l_orderkey = o_orderkey
WHERE o_orderdate >= DATE '1995-01-01'
"""),
    ("J2 orders-customer by segment", """
SELECT c_mktsegment, COUNT(*) AS n
FROM orders JOIN customer ON o_custkey = c_custkey
GROUP BY c_mktsegment
"""),
    ("J3 lineitem-supplier revenue", """
SELECT SUM(l_extendedprice) AS revenue
FROM lineitem JOIN supplier ON l_suppkey = s_suppkey
WHERE s_nationkey = 7
"""),
    ("J4 customer-orders-lineitem by priority", """
SELECT o_orderpriority, COUNT(*) AS n, SUM(l_quantity) AS qty
FROM customer
JOIN orders ON c_custkey = o_custkey
JOIN lineitem ON o_orderkey = l_orderkey
WHERE c_mktsegment = 'BUILDING'
GROUP BY o_orderpriority
"""),
    ("J5 four-way local supplier", """
SELECT COUNT(*) AS n, AVG(l_discount) AS avg_disc
FROM customer, orders, lineitem, supplier
WHERE c_custkey = o_custkey
  AND l_orderkey = o_orderkey
  AND l_suppkey = s_suppkey
  AND c_nationkey = s_nationkey
  AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
"""),
]

EXTRA: list[tuple[str, str]] = [
    ("Q1 sums", """
SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty,
       SUM(l_extendedprice) AS sum_base_price, AVG(l_quantity) AS avg_qty,
       AVG(l_discount) AS avg_disc, COUNT(*) AS count_order
FROM lineitem
WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus
"""),
    ("Q3 count", """
SELECT COUNT(*) AS n
FROM customer, orders, lineitem
WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
  AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
"""),
    ("Q5 count by nation", """
SELECT n_name, COUNT(*) AS n
FROM customer, orders, lineitem, supplier, nation, region
WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
  AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey
  AND n_regionkey = r_regionkey AND r_name = 'ASIA'
  AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
GROUP BY n_name
"""),
    ("Q6 revenue", """
SELECT SUM(l_extendedprice) AS revenue
FROM lineitem
WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
  AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24
"""),
    ("Q10 count", """
SELECT COUNT(*) AS n
FROM customer, orders, lineitem, nation
WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey
  AND o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01'
  AND l_returnflag = 'R' AND c_nationkey = n_nationkey
"""),
    ("Q12 by shipmode", """
SELECT l_shipmode, COUNT(*) AS n
FROM orders, lineitem
WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP')
  AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate
  AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01'
GROUP BY l_shipmode
"""),
    ("Q14 promo count", """
SELECT COUNT(*) AS n
FROM lineitem, part
WHERE l_partkey = p_partkey AND p_type LIKE 'PROMO%'
  AND l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'
"""),
    ("Q18 big orders", """
SELECT COUNT(*) AS n
FROM customer, orders, lineitem
WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey
                     HAVING SUM(l_quantity) > 300)
  AND c_custkey = o_custkey AND o_orderkey = l_orderkey
"""),
    ("Q19 count", """
SELECT COUNT(*) AS n
FROM lineitem, part
WHERE p_partkey = l_partkey AND p_brand = 'Brand#12'
  AND p_container IN ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
  AND l_quantity >= 1 AND l_quantity <= 11 AND p_size BETWEEN 1 AND 5
  AND l_shipmode IN ('AIR', 'REG AIR') AND l_shipinstruct = 'DELIVER IN PERSON'
"""),
    ("Q22 count", """
SELECT COUNT(*) AS numcust
FROM customer
WHERE SUBSTRING(c_phone, 1, 2) IN ('13', '31', '23', '29', '30', '18', '17')
  AND c_acctbal > 0.00
  AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)
"""),
]


def clean(sql: str) -> str:
    return " ".join(sql.split())


def overhead_corpus() -> list[tuple[str, str]]:
    return [(n, clean(s)) for n, s in FLEX + JOINS]


def analysis_corpus() -> list[tuple[str, str]]:
    return [(n, clean(s)) for n, s in FLEX + JOINS + EXTRA]


def flex_corpus() -> list[tuple[str, str]]:
    return [(n, clean(s)) for n, s in FLEX]
