"""A small built-in TPC-H generator (numpy + DuckDB, no optional dependency).

It follows the TPC-H 3.0 specification (clause 4.2.3) for what the dpsql benchmarks depend on:
the eight tables and their columns and types, the cardinalities (SF * 10k suppliers, 200k
parts, 800k partsupp rows, 150k customers, 1.5M orders, ~6M lineitems), the key distributions
(sparse order keys, 8 of every 32; customers whose key is divisible by 3 place no orders; 1 to
7 lines per order; each line's supplier is one of the part's 4 partsupp suppliers), the value
ranges and formulas (retail price, extended price, ship/commit/receipt dates, return flag and
line status from the current date 1995-06-17, order status and total price from the lines),
and the fixed nation/region rows. Text columns are drawn from a small pool of sentences over
the specification's word lists (so Q13's ``'%special%requests%'`` and Q16's
``'%Customer%Complaints%'`` filters select a small fraction), not from the full grammar.

Max frequencies, join fan-outs and filter selectivities are therefore those of real TPC-H data
to within sampling noise; exact query answers differ from dbgen's. ``tpchgen-cli`` (a port of
dbgen) is used instead when installed; see :mod:`benchmarks.tpch_data`.
"""

from __future__ import annotations

import numpy as np

SEED = 20180801  # any fixed seed: the data must be the same on every run

NATIONS = [
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0), ("MOROCCO", 0),
    ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3), ("SAUDI ARABIA", 4),
    ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3), ("UNITED STATES", 1),
]
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SHIP_INSTRUCT = ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]
SHIP_MODES = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
TYPE_S1 = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"]
TYPE_S2 = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"]
TYPE_S3 = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"]
CONTAINER_S1 = ["SM", "LG", "MED", "JUMBO", "WRAP"]
CONTAINER_S2 = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"]
COLORS = [
    "almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue",
    "blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral",
    "cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab",
    "firebrick", "floral", "forest", "frosted", "gainsboro", "ghost", "goldenrod", "green",
    "grey", "honeydew", "hot", "indian", "ivory", "khaki", "lace", "lavender", "lawn", "lemon",
    "light", "lime", "linen", "magenta", "maroon", "medium", "metallic", "midnight", "mint",
    "misty", "moccasin", "navajo", "navy", "olive", "orange", "orchid", "pale", "papaya",
    "peach", "peru", "pink", "plum", "powder", "puff", "purple", "red", "rose", "rosy",
    "royal", "saddle", "salmon", "sandy", "seashell", "sienna", "sky", "slate", "smoke",
    "snow", "spring", "steel", "tan", "thistle", "tomato", "turquoise", "violet", "wheat",
    "white", "yellow",
]
_NOUNS = ["foxes", "ideas", "theodolites", "pinto beans", "instructions", "dependencies",
          "excuses", "platelets", "asymptotes", "courts", "dolphins", "multipliers", "sauternes",
          "warthogs", "frets", "dinos", "attainments", "somas", "Tiresias'", "patterns",
          "forges", "braids", "hockey players", "frays", "warhorses", "dugouts", "notornis",
          "epitaphs", "pearls", "tithes", "waters", "orbits", "gifts", "sheaves", "depths",
          "sentiments", "decoys", "realms", "pains", "grouches", "escapades", "accounts",
          "deposits", "packages", "requests", "pending", "special"]
_VERBS = ["sleep", "wake", "are", "cajole", "haggle", "nag", "use", "boost", "affix", "detect",
          "integrate", "maintain", "nod", "was", "lose", "sublate", "solve", "thrash", "promise",
          "engage", "hinder", "print", "x-ray", "breach", "eat", "grow", "impress", "mold",
          "poach", "serve", "run", "dazzle", "snooze", "doze", "unwind", "kindle", "play",
          "hang", "believe", "doubt"]
_ADJECTIVES = ["furious", "sly", "careful", "blithe", "quick", "fluffy", "slow", "quiet",
               "ruthless", "thin", "close", "dogged", "daring", "brave", "stealthy", "permanent",
               "enticing", "idle", "busy", "regular", "final", "ironic", "even", "bold",
               "silent", "special", "express", "unusual", "pending"]
_ADVERBS = ["sometimes", "always", "never", "furiously", "slyly", "carefully", "blithely",
            "quickly", "fluffily", "slowly", "quietly", "ruthlessly", "thinly", "closely",
            "doggedly", "daringly", "bravely", "stealthily", "permanently", "enticingly",
            "idly", "busily", "regularly", "finally", "ironically", "evenly", "boldly",
            "silently"]

START = np.datetime64("1992-01-01")
END = np.datetime64("1998-12-31")
CURRENT = np.datetime64("1995-06-17")


def _sentence_pool(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` pseudo-text sentences (object array) from the specification's word lists."""
    words = [_ADVERBS, _ADJECTIVES, _NOUNS, _VERBS, _ADVERBS, _ADJECTIVES, _NOUNS]
    picks = [np.array(w, dtype=object)[rng.integers(0, len(w), n)] for w in words]
    lengths = rng.integers(3, len(words) + 1, n)
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = " ".join(str(p[i]) for p in picks[: lengths[i]])
    return out


def _text(rng: np.random.Generator, pool: np.ndarray, n: int) -> np.ndarray:
    return pool[rng.integers(0, len(pool), n)]


def _phone(rng: np.random.Generator, nationkey: np.ndarray) -> np.ndarray:
    n = len(nationkey)
    parts = [nationkey + 10, rng.integers(100, 1000, n), rng.integers(100, 1000, n),
             rng.integers(1000, 10000, n)]
    return np.array([f"{a}-{b}-{c}-{d}" for a, b, c, d in zip(*parts, strict=True)],
                    dtype=object)


def _formatted(prefix: str, keys: np.ndarray) -> np.ndarray:
    return np.char.add(prefix, np.char.zfill(keys.astype(str), 9)).astype(object)


def retail_cents(partkey: np.ndarray) -> np.ndarray:
    """p_retailprice in cents (clause 4.2.3)."""
    return 90000 + (partkey // 10) % 20001 + 100 * (partkey % 1000)


def generate(scale: float, seed: int = SEED) -> dict[str, dict[str, np.ndarray]]:
    """The eight TPC-H tables at scale factor ``scale`` as ``{table: {column: array}}``.

    Decimal columns are int64 cents (suffix-free names; :data:`DECIMAL_COLUMNS` lists them),
    dates are ``datetime64[D]``, strings object arrays.
    """
    rng = np.random.default_rng(seed)
    n_supp = max(round(10_000 * scale), 4)
    n_part = max(round(200_000 * scale), 4)
    n_cust = max(round(150_000 * scale), 3)
    n_orders = max(round(1_500_000 * scale), 1)
    pool = _sentence_pool(rng, 4096)
    tables: dict[str, dict[str, np.ndarray]] = {}

    tables["region"] = {
        "r_regionkey": np.arange(5, dtype=np.int64),
        "r_name": np.array(REGIONS, dtype=object),
        "r_comment": _text(rng, pool, 5),
    }
    tables["nation"] = {
        "n_nationkey": np.arange(25, dtype=np.int64),
        "n_name": np.array([n for n, _ in NATIONS], dtype=object),
        "n_regionkey": np.array([r for _, r in NATIONS], dtype=np.int64),
        "n_comment": _text(rng, pool, 25),
    }

    suppkey = np.arange(1, n_supp + 1, dtype=np.int64)
    s_nation = rng.integers(0, 25, n_supp)
    s_comment = _text(rng, pool, n_supp).copy()
    # clause 4.2.3: 5 suppliers per 10,000 get "Customer ... Complaints", 5 "... Recommends"
    n_special = max(round(5 * scale), 1)
    chosen = rng.choice(n_supp, size=min(2 * n_special, n_supp), replace=False)
    for j, i in enumerate(chosen):
        word = "Complaints" if j < n_special else "Recommends"
        s_comment[i] = f"{s_comment[i]} Customer slyly {word}"
    tables["supplier"] = {
        "s_suppkey": suppkey,
        "s_name": _formatted("Supplier#", suppkey),
        "s_address": _text(rng, pool, n_supp),
        "s_nationkey": s_nation.astype(np.int64),
        "s_phone": _phone(rng, s_nation),
        "s_acctbal": rng.integers(-99_999, 999_999 + 1, n_supp),
        "s_comment": s_comment,
    }

    partkey = np.arange(1, n_part + 1, dtype=np.int64)
    colors = np.array(COLORS, dtype=object)
    name = colors[rng.integers(0, len(COLORS), n_part)]
    for _ in range(4):
        name = name + " " + colors[rng.integers(0, len(COLORS), n_part)]
    mfgr = rng.integers(1, 6, n_part)
    brand = mfgr * 10 + rng.integers(1, 6, n_part)
    types = np.array([f"{a} {b} {c}" for a in TYPE_S1 for b in TYPE_S2 for c in TYPE_S3],
                     dtype=object)
    containers = np.array([f"{a} {b}" for a in CONTAINER_S1 for b in CONTAINER_S2], dtype=object)
    p_retail = retail_cents(partkey)
    tables["part"] = {
        "p_partkey": partkey,
        "p_name": name,
        "p_mfgr": np.char.add("Manufacturer#", mfgr.astype(str)).astype(object),
        "p_brand": np.char.add("Brand#", brand.astype(str)).astype(object),
        "p_type": types[rng.integers(0, len(types), n_part)],
        "p_size": rng.integers(1, 51, n_part).astype(np.int32),
        "p_container": containers[rng.integers(0, len(containers), n_part)],
        "p_retailprice": p_retail,
        "p_comment": _text(rng, pool, n_part),
    }

    # partsupp: 4 suppliers per part, clause 4.2.3's formula
    ps_part = np.repeat(partkey, 4)
    ps_i = np.tile(np.arange(4, dtype=np.int64), n_part)
    ps_supp = _part_supplier(ps_part, ps_i, n_supp)
    tables["partsupp"] = {
        "ps_partkey": ps_part,
        "ps_suppkey": ps_supp,
        "ps_availqty": rng.integers(1, 10_000, 4 * n_part).astype(np.int32),
        "ps_supplycost": rng.integers(100, 100_001, 4 * n_part),
        "ps_comment": _text(rng, pool, 4 * n_part),
    }

    custkey = np.arange(1, n_cust + 1, dtype=np.int64)
    c_nation = rng.integers(0, 25, n_cust)
    tables["customer"] = {
        "c_custkey": custkey,
        "c_name": _formatted("Customer#", custkey),
        "c_address": _text(rng, pool, n_cust),
        "c_nationkey": c_nation.astype(np.int64),
        "c_phone": _phone(rng, c_nation),
        "c_acctbal": rng.integers(-99_999, 999_999 + 1, n_cust),
        "c_mktsegment": np.array(SEGMENTS, dtype=object)[rng.integers(0, 5, n_cust)],
        "c_comment": _text(rng, pool, n_cust),
    }

    # orders: sparse keys (the first 8 of every 32), customers with key % 3 != 0
    i = np.arange(n_orders, dtype=np.int64)
    orderkey = (i // 8) * 32 + (i % 8) + 1
    eligible = custkey[custkey % 3 != 0] if n_cust >= 3 else custkey
    o_cust = eligible[rng.integers(0, len(eligible), n_orders)]
    last_order_day = (END - START).astype(int) - 151
    o_date = START + rng.integers(0, last_order_day + 1, n_orders).astype("timedelta64[D]")

    # lineitem: 1..7 lines per order
    lines = rng.integers(1, 8, n_orders)
    n_lines = int(lines.sum())
    l_order_idx = np.repeat(i, lines)
    starts = np.cumsum(lines) - lines
    l_number = (np.arange(n_lines) - np.repeat(starts, lines) + 1).astype(np.int32)
    l_part = rng.integers(1, n_part + 1, n_lines)
    l_supp = _part_supplier(l_part, rng.integers(0, 4, n_lines), n_supp)
    qty = rng.integers(1, 51, n_lines)
    ext_cents = qty * retail_cents(l_part)
    disc = rng.integers(0, 11, n_lines)  # hundredths
    tax = rng.integers(0, 9, n_lines)
    l_odate = o_date[l_order_idx]
    ship = l_odate + rng.integers(1, 122, n_lines).astype("timedelta64[D]")
    commit = l_odate + rng.integers(30, 91, n_lines).astype("timedelta64[D]")
    receipt = ship + rng.integers(1, 31, n_lines).astype("timedelta64[D]")
    returned = rng.integers(0, 2, n_lines).astype(bool)
    flag = np.where(receipt <= CURRENT, np.where(returned, "R", "A"), "N").astype(object)
    status = np.where(ship > CURRENT, "O", "F").astype(object)
    tables["lineitem"] = {
        "l_orderkey": orderkey[l_order_idx],
        "l_partkey": l_part,
        "l_suppkey": l_supp,
        "l_linenumber": l_number,
        "l_quantity": qty * 100,
        "l_extendedprice": ext_cents,
        "l_discount": disc,
        "l_tax": tax,
        "l_returnflag": flag,
        "l_linestatus": status,
        "l_shipdate": ship,
        "l_commitdate": commit,
        "l_receiptdate": receipt,
        "l_shipinstruct": np.array(SHIP_INSTRUCT, dtype=object)[rng.integers(0, 4, n_lines)],
        "l_shipmode": np.array(SHIP_MODES, dtype=object)[rng.integers(0, 7, n_lines)],
        "l_comment": _text(rng, pool, n_lines),
    }

    # order status and total price from the lines (clause 4.2.3)
    is_f = (status == "F").astype(np.int64)
    n_f = np.add.reduceat(is_f, starts)
    o_status = np.where(n_f == lines, "F", np.where(n_f == 0, "O", "P")).astype(object)
    line_total = ext_cents * (100 + tax) * (100 - disc)  # cents * 10^4
    o_total = np.rint(np.add.reduceat(line_total, starts) / 10_000).astype(np.int64)
    n_clerks = max(round(1000 * scale), 1)
    tables["orders"] = {
        "o_orderkey": orderkey,
        "o_custkey": o_cust,
        "o_orderstatus": o_status,
        "o_totalprice": o_total,
        "o_orderdate": o_date,
        "o_orderpriority": np.array(PRIORITIES, dtype=object)[rng.integers(0, 5, n_orders)],
        "o_clerk": _formatted("Clerk#", rng.integers(1, n_clerks + 1, n_orders)),
        "o_shippriority": np.zeros(n_orders, dtype=np.int32),
        "o_comment": _text(rng, pool, n_orders),
    }
    return tables


def _part_supplier(partkey: np.ndarray, i: np.ndarray, n_supp: int) -> np.ndarray:
    """The i-th (0..3) supplier of a part: clause 4.2.3's ps_suppkey formula."""
    return (partkey + i * (n_supp // 4 + (partkey - 1) // n_supp)) % n_supp + 1


#: Columns generate() returns as int64 hundredths, stored as DECIMAL(15,2).
DECIMAL_COLUMNS = frozenset({
    "s_acctbal", "p_retailprice", "ps_supplycost", "c_acctbal", "o_totalprice",
    "l_quantity", "l_extendedprice", "l_discount", "l_tax",
})

#: Table order for loading (dimension tables first).
TABLES = ("region", "nation", "supplier", "part", "partsupp", "customer", "orders", "lineitem")


def load_into(con, tables: dict[str, dict[str, np.ndarray]]) -> None:
    """Create the eight tables in the DuckDB connection ``con`` from :func:`generate`'s arrays.

    Column types follow the TPC-H schema as DuckDB's tpch extension declares it (BIGINT keys,
    DECIMAL(15,2) money, DATE dates, VARCHAR text).
    """
    for name in TABLES:
        cols = tables[name]
        view = f"__gen_{name}"
        dates = {c for c, a in cols.items() if a.dtype.kind == "M"}
        con.register(view, {c: (a.astype("datetime64[D]").astype(np.int64) if c in dates else a)
                            for c, a in cols.items()})
        exprs = []
        for col, arr in cols.items():
            if col in DECIMAL_COLUMNS:
                exprs.append(f"CAST({col} / 100 AS DECIMAL(15,2)) AS {col}")
            elif arr.dtype == np.int64:
                exprs.append(f"CAST({col} AS BIGINT) AS {col}")
            elif col in dates:
                exprs.append(f"CAST(DATE '1970-01-01' + CAST({col} AS INTEGER) AS DATE) AS {col}")
            elif arr.dtype == object:
                exprs.append(f"CAST({col} AS VARCHAR) AS {col}")
            else:
                exprs.append(col)
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT {', '.join(exprs)} FROM {view}")
        con.unregister(view)
