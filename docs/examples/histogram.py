"""A noisy histogram next to the true one, with its 95% intervals (notebook-style example).

Run it from anywhere (it builds the demo shop on first use, as `dpsql demo` does)::

    pip install 'dpsql[pandas]' matplotlib
    python docs/examples/histogram.py                      # writes histogram.png
    python docs/examples/histogram.py --epsilon 0.01 --out small-eps.png

Two roles side by side, as in the demo's tour: the data owner's TRUE counts come from a plain
read-only DuckDB connection (the owner may see the data); the analyst's NOISY counts come from
dpsql as analyst ``demo``, charged to the demo's ledger. The release record gives each noisy
count's 95% half-width (over all bins at once), so the plot can draw the interval without
knowing anything about the data. Running it again plots the same noisy answer, for free: the
ledger caches it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

import dpsql
from dpsql.demo import DEMO_ANALYST, create_demo, existing_demo

SQL = "SELECT country, COUNT(*) AS customers FROM customers GROUP BY country ORDER BY country"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=0.01,
                        help="epsilon the noisy histogram spends (default 0.01: visible noise)")
    parser.add_argument("--out", type=Path, default=Path("histogram.png"),
                        help="the PNG to write (default histogram.png)")
    parser.add_argument("--demo-folder", type=Path, default=None,
                        help="where the demo shop is (default: dpsql's cache folder)")
    args = parser.parse_args()

    files = existing_demo(args.demo_folder) or create_demo(args.demo_folder)

    # The owner's view: exact counts.
    with duckdb.connect(str(files.database), read_only=True) as owner:
        true = dict(owner.execute(SQL).fetchall())

    # The analyst's view: noisy counts and the release record.
    with dpsql.connect(files.database, files.metadata, analyst=DEMO_ANALYST,
                       epsilon=args.epsilon) as conn:
        cur = conn.execute(SQL)
        noisy = dict(cur.fetchall())
        release = cur.release
    assert release is not None
    (column,) = [c for c in release.columns if c.name == "customers"]
    half_width = column.half_width_95 or 0.0

    countries = sorted(true)
    print(f"epsilon={release.epsilon:g} (cached: {release.cached}); "
          f"95% interval: ±{half_width:.1f} per bin")
    for country in countries:
        print(f"{country}: true {true[country]}, noisy {noisy[country]}")

    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.rcParams["figure.dpi"] = 100
    x = range(len(countries))
    width = 0.4
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar([i - width / 2 for i in x], [true[c] for c in countries], width,
           label="true (owner only)", color="#9aa5b1")
    ax.bar([i + width / 2 for i in x], [noisy[c] for c in countries], width,
           yerr=half_width, capsize=4, label="noisy (dpsql), 95% interval", color="#2f6fb5")
    ax.set_xticks(list(x), countries)
    ax.set_ylabel("customers")
    ax.set_title(f"Customers per country: true and differentially private (ε = {args.epsilon:g})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
