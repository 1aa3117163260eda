"""dpsql's DB-API example: a tiny database, its metadata and ledger, two private queries.

Run it with ``python docs/dbapi_example.py``; tests/system/test_readme_dbapi_example.py runs it.
"""

import tempfile
from pathlib import Path

import duckdb

import dpsql
from dpsql.accounting import Ledger

with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    database = folder / "shop.duckdb"

    # The data owner: a database, metadata naming the ledger, and a budget for alice.
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE orders (order_id INTEGER, customer_id INTEGER, "
                    "status VARCHAR, cost DOUBLE)")
        con.execute("INSERT INTO orders SELECT i, i % 400, ['new', 'shipped'][i % 2 + 1], "
                    "(i % 97) * 2.5 FROM range(2000) t(i)")
    (folder / "shop.yaml").write_text("""\
ledger: ledger.sqlite
tables:
  orders:
    columns:
      order_id:    {max_freq: 1}
      customer_id: {max_freq: 5}
      status:      {max_freq: 1000, releasable: true, domain: {values: [new, shipped, returned]}}
      cost:        {bounds: [0, 250]}
""")
    with Ledger(folder / "ledger.sqlite") as ledger:
        ledger.set_budget(database, "alice", epsilon=1.0, delta=0.0)

    # The analyst: an ordinary DB-API connection; every query is charged before it runs.
    with dpsql.connect(database, folder / "shop.yaml", analyst="alice", epsilon=0.25) as conn:
        cur = conn.cursor()
        cur.execute("SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY status")
        print([d[0] for d in cur.description], cur.fetchall())
        print("spent", cur.release.epsilon, "cached", cur.release.cached)

        cur.execute("SELECT AVG(cost) AS mean_cost FROM orders WHERE status = ?", ["new"])
        print("mean cost of new orders:", round(cur.fetchone()[0], 2))

        # The same question again returns the same noisy answer, at no cost.
        cur.execute("SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY status")
        print("again:", cur.fetchall(), "cached", cur.release.cached)

        budget = conn.budget
        print(f"budget: spent {budget.epsilon_spent}, remaining {budget.epsilon_remaining}")
        for bound in conn.budget_report(delta_prime=1e-6).bounds():
            print(f"  {bound.method}: epsilon {bound.epsilon:.3f}, delta {bound.delta:g}")
