"""The measurement builder: which exact aggregates a query releases, with ES(k) each.

From the relation a top-level SELECT aggregates over (dpsql.analysis.relations), this builds the
:class:`~dpsql.analysis.model.Measurement` s (COUNT: rules.count_sensitivity; SUM / AVG over
declared bounds: rules.sum_sensitivity), the GROUP BY keys with their declared domains, and the
output columns, and rejects outputs that would release raw values.
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.analysis import rules
from dpsql.analysis.aggregates import (
    CENTRED_SQUARES,
    VARIANCE_TYPES,
    filter_condition,
    moment_bounds,
    moment_labels,
    moment_nodes,
    unfilter,
)
from dpsql.analysis.bounds import UnboundedAggregateValue, argument_bounds
from dpsql.analysis.checks import (
    AGGREGATES,
    check_aggregate_args,
    check_filter,
    check_scalar,
    derived_type,
    in_same_select,
    key_of,
    sql_text,
)
from dpsql.analysis.derived_keys import derive_key, listed_domain
from dpsql.analysis.kexpr import is_zero
from dpsql.analysis.keytypes import collation, numeric_or_unknown
from dpsql.analysis.model import (
    Derivation,
    GroupKey,
    Measurement,
    OutputColumn,
    QueryAnalysis,
    Relation,
)
from dpsql.analysis.relations import Analyzer
from dpsql.analysis.trees import copy_tree
from dpsql.errors import (
    MissingMetricError,
    ProtectedBinError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import Domain, Metadata
from dpsql.rewrite.parameters import number_parameters


def build_analysis(query: exp.Select, rel: Relation, analyzer: Analyzer,
                   metadata: Metadata) -> QueryAnalysis:
    """The measurements, group keys and output columns of the top-level SELECT ``query``,
    which aggregates over ``rel`` (its FROM / WHERE relation)."""
    _distinct_as_group(query, rel, metadata)
    keys = list(query.args["group"].expressions) if query.args.get("group") else []
    group_keys = _group_keys(keys, rel, metadata, query.args.get("where"))
    unit = metadata.privacy_unit is not None
    selection_stability = _selection_stability(group_keys, rel, unit)
    grouped = bool(keys)
    check_filter(query.args.get("having"), "HAVING")

    base = rules.count_sensitivity(rel.stability, grouped)
    measurements: list[Measurement] = []
    by_sql: dict[str, int] = {}

    def measure(function: str, node: exp.Expression, bounds=None, label: str = "") -> int:
        key = label or sql_text(node)
        if key in by_sql:
            return by_sql[key]
        if function == "COUNT":
            es = base
        else:
            assert bounds is not None
            if not all(math.isfinite(b) for b in bounds) or not math.isfinite(
                    max(bounds[1], 0.0) - min(bounds[0], 0.0)):
                # e.g. VARIANCE's squared deviations over bounds near 1e300 (metadata alone)
                squared = key.startswith(("SUM_CENTRED(", CENTRED_SQUARES))
                why = ("VARIANCE and STDDEV square the declared range" if squared
                       else "their width, upper minus lower, is past it")
                raise UnsupportedConstructError(
                    f"the bounds derived for {key[:60]}, {bounds!r}, overflow a double "
                    f"({why}): declare bounds of a usual magnitude (rescale the column)")
            es = rules.sum_sensitivity(rel.stability, grouped, bounds)
        m = Measurement(len(measurements), function, node, es, bounds, key)
        measurements.append(m)
        by_sql[key] = m.index
        return m.index

    names: dict[int, str] = {}

    def named(node: exp.Expression) -> exp.Expression:
        """``node``, or a copy whose ``?`` carry the names the rewrite gives them
        (dpsql.rewrite.parameters): the exact and post-processing queries are built from
        the measurements' nodes and labels, and bind a parameter by its name."""
        if node.find(exp.Placeholder) is None:
            return node
        if not names:
            numbered = number_parameters(query)
            names.update((id(p), q.this) for p, q in zip(
                query.find_all(exp.Placeholder), numbered.find_all(exp.Placeholder),
                strict=True))
        copy = copy_tree(node)
        for p, q in zip(node.find_all(exp.Placeholder), copy.find_all(exp.Placeholder),
                        strict=True):
            q.set("this", names[id(p)])
        return copy

    def aggregate_measurements(agg: exp.Expression) -> tuple[int, ...]:
        if isinstance(agg.parent, exp.Filter):
            # agg(x) FILTER (WHERE p) is agg(CASE WHEN p THEN x END): a filter only removes
            # rows, so the measurement and its sensitivity are the aggregate's own
            check_filter(filter_condition(agg.parent), "FILTER")
            agg = unfilter(named(agg.parent))
        else:
            agg = named(agg)
        if isinstance(agg, exp.Count):
            check_scalar(agg, "COUNT argument")
            return (measure("COUNT", agg),)
        if agg.args.get("distinct") or isinstance(agg.this, exp.Distinct):
            raise UnsupportedConstructError(
                f"{sql_text(agg)}: DISTINCT is supported only in COUNT(DISTINCT x)"
            )
        arg = agg.this.unnest()
        bounds = _sum_bounds(agg, arg, rel)
        if isinstance(agg, VARIANCE_TYPES):
            count, first, square = moment_nodes(arg, bounds)
            first_bounds, square_bounds = moment_bounds(bounds)
            _, first_label, square_label = moment_labels(arg)
            return (measure("COUNT", count), measure("SUM", first, first_bounds, first_label),
                    measure("SUM", square, square_bounds, square_label))
        sum_node = exp.Sum(this=copy_tree(arg))
        if isinstance(agg, exp.Sum):
            return (measure("SUM", sum_node, bounds),)
        count_node = exp.Count(this=copy_tree(arg))
        return (measure("SUM", sum_node, bounds), measure("COUNT", count_node))

    columns: list[OutputColumn] = []
    key_sql = {key_of(k): i for i, k in enumerate(keys)}
    for item in query.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        name = item.alias_or_name
        aggs = [a for a in inner.find_all(*AGGREGATES) if in_same_select(a, inner)]
        if not aggs:
            _check_over_keys(inner, key_sql, name)
            kind = "group_key" if key_of(inner) in key_sql else "expression"
            columns.append(OutputColumn(name, kind, None, (), item))
            continue
        check_aggregate_args(inner)
        ids: list[int] = []
        for agg in aggs:
            ids.extend(i for i in aggregate_measurements(agg) if i not in ids)
        bare = inner.this if isinstance(inner, exp.Filter) else inner  # FILTER: its aggregate's
        function = type(bare).__name__.upper() if isinstance(bare, AGGREGATES) else None
        columns.append(OutputColumn(name, "aggregate", function, tuple(ids), item))
    # Aggregates used only by HAVING / ORDER BY are measured (and noised) too.
    for clause in ("having", "order"):
        node = query.args.get(clause)
        if node is None:
            continue
        for agg in node.find_all(*AGGREGATES):
            if in_same_select(agg, node):
                aggregate_measurements(agg)
        _check_over_keys_or_aggs(node, key_sql, clause.upper(), {c.name for c in columns})
    if not measurements and selection_stability is None:
        # a key-only GROUP BY over private rows asks which keys occur: the selected ones
        selection_stability = _key_only_stability(group_keys, rel, unit)
    if not measurements and selection_stability is None:
        # (a key-only GROUP BY over partition-selected keys releases the selected keys)
        raise UnsupportedQueryError(
            "the query releases no aggregate: dpsql answers COUNT / SUM / AVG queries, never "
            "raw rows; wrap the columns in an aggregate or GROUP BY them and COUNT(*)"
        )
    details = (f"ES(k) = {'2 * ' if grouped else ''}S(k) per COUNT"
               + (" (histogram: one row moves between two bins)" if grouped else ""),)
    tree = Derivation("aggregate", base, details, (rel.tree,))
    return QueryAnalysis(
        query=query, columns=tuple(columns), measurements=tuple(measurements),
        group_keys=tuple(group_keys), tree=tree,
        max_frequencies_used=tuple(analyzer.used_mf),
        unchecked_key_types=tuple(analyzer.unchecked),
        selection_stability=selection_stability,
    )


def _distinct_as_group(query: exp.Select, rel: Relation, metadata: Metadata) -> None:
    """``SELECT DISTINCT k1, k2 FROM ...`` over releasable columns (no aggregate, no GROUP BY)
    is ``SELECT k1, k2 FROM ... GROUP BY k1, k2``: the same rows in SQL, and a key-only GROUP
    BY releases the keys the selection keeps. Rewritten in place (the exact
    query and the fingerprint then read the GROUP BY form); anything else is left as written."""
    distinct = query.args.get("distinct")
    if distinct is None or distinct.args.get("on") is not None or query.args.get("group"):
        return
    columns = []
    for item in query.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        facts = (rel.columns.get((inner.table, inner.name)) if isinstance(inner, exp.Column)
                 else None)
        if facts is None or facts.origin is None:
            return
        column = metadata.table(facts.origin[0]).column(facts.origin[1])
        if not column.releasable:
            return
        columns.append(inner)
    query.set("group", exp.Group(expressions=[copy_tree(c) for c in columns]))
    query.set("distinct", None)


def _key_only_stability(keys: list[GroupKey], rel: Relation, unit: bool = False
                        ) -> float | None:
    """A key-only GROUP BY (no aggregate anywhere) over private rows, every key with a
    declared or derived domain: the keys that occur are chosen by DP partition selection (as
    for a partition-selected key), restricted to the domains, never the whole domain (SQL
    returns only the keys present). None when nothing private is read (public keys stay
    refused as before) or there is no key. Refuses a k-dependent stability as
    :func:`_selection_stability` does (not under a privacy unit). Depends on the SQL and the
    public metadata alone."""
    if not keys or is_zero(rel.stability):
        return None
    if unit:
        return 1.0  # dpsql.units.analysis bounds the groups one unit changes
    if rel.stability.depends_on_k:
        raise ProtectedBinError(
            f"GROUP BY {sql_text(keys[0].node)} without an aggregate asks which keys occur, "
            "which dpsql answers by partition selection only when the query reads one private "
            "table (joins with public tables allowed): add COUNT(*) to release every key of "
            "the domain with a noisy count instead"
        )
    return rel.stability.at(0)


def _selection_stability(keys: list[GroupKey], rel: Relation, unit: bool = False
                         ) -> float | None:
    """The constant stability S partition selection needs (dpsql.noise.partition), or None
    when no key is partition-selected. A k-dependent stability (a join of private tables) is
    refused: the selection's delta bound counts the groups one change can empty or create,
    which there depends on the data. Under a privacy unit (``unit``) the row-level stability
    is not what bounds the selection: dpsql.units.analysis replaces it by the unit's bound (the
    two-stage GROUP BY keeps each unit in at most max_groups groups, joins included). Depends
    on the SQL and the public metadata alone."""
    selected = [k for k in keys if k.partition]
    if not selected:
        return None
    if unit:
        return 1.0  # replaced by dpsql.units.analysis (max_groups)
    if rel.stability.depends_on_k and _is_count(selected[0], rel):
        raise ProtectedBinError(
            f"GROUP BY {sql_text(selected[0].node)}: the column is a COUNT computed in a "
            "subquery, whose groups dpsql selects from the data only when the subquery's "
            "stability is a constant: group the subquery by one key that every private table "
            "is joined on (SELECT c.k, COUNT(o.x) FROM c LEFT JOIN o ON c.k = o.k GROUP BY "
            "c.k), or clamp the count, LEAST(COUNT(...), n), to group by 0..n"
        )
    if rel.stability.depends_on_k:
        raise ProtectedBinError(
            f"GROUP BY {sql_text(selected[0].node)}: the column has no declared domain, and its "
            "groups can be selected from the data only when the query reads one private table "
            "(joins with public tables allowed); this query joins private tables: ask the owner "
            "to declare the column's domain, or group by a column that has one"
        )
    return rel.stability.at(0)


def _is_count(key: GroupKey, rel: Relation) -> bool:
    """Whether the partition-selected ``key`` is a subquery's per-group COUNT."""
    node = key.node
    facts = rel.columns.get((node.table, node.name)) if isinstance(node, exp.Column) else None
    return facts is not None and facts.count


def _check_over_keys(node: exp.Expression, key_sql: dict[tuple[str, str] | str, int],
                     name: str) -> None:
    """A non-aggregate output must be built from group keys only (else it is a raw row)."""
    if key_of(node) in key_sql:
        return
    if isinstance(node, exp.Column):
        raise UnsupportedQueryError(
            f"column {name!r} is neither aggregated nor a GROUP BY key, so it would release "
            "raw values: aggregate it (COUNT/SUM/AVG) or add it to GROUP BY"
        )
    if node.find(exp.Subquery, exp.Select) is not None:
        raise UnsupportedConstructError("a scalar subquery in the SELECT list is not supported")
    for child in node.iter_expressions():
        _check_over_keys(child, key_sql, name)


def _check_over_keys_or_aggs(node, key_sql, clause: str, aliases: set[str]) -> None:
    for col in node.find_all(exp.Column):
        if any(isinstance(a, (*AGGREGATES, exp.Filter)) for a in _ancestors(col, node)):
            continue
        if key_of(col) in key_sql or (not col.table and col.name in aliases):
            continue
        if any(key_of(a) in key_sql for a in _ancestors(col, node)):
            continue  # inside a computed key (HAVING y > 1995, y = YEAR(d), qualified)
        raise UnsupportedQueryError(
            f"{clause} uses {sql_text(col)}, which is neither a GROUP BY key nor an aggregate: "
            "use a key or an aggregate of it"
        )


def _ancestors(node: exp.Expression, stop: exp.Expression):
    node = node.parent
    while node is not None and node is not stop:
        yield node
        node = node.parent


def _sum_bounds(agg: exp.Expression, arg: exp.Expression, rel: Relation) -> tuple[float, float]:
    """The clamp bounds of a SUM / AVG / variance argument: a column's declared bounds, or
    those interval arithmetic derives for an expression (dpsql.analysis.bounds)."""
    fn = agg.sql_name() if isinstance(agg, VARIANCE_TYPES) else type(agg).__name__.upper()
    if not isinstance(arg, exp.Column):
        return argument_bounds(fn, arg, lambda c: rel.columns.get((c.table, c.name)))
    facts = rel.columns.get((arg.table, arg.name))
    if facts is not None and facts.from_aggregate and facts.bounds is None:
        # (LEAST(COUNT(...), n) in the subquery has the bounds [0, n]: keyed_groups)
        raise UnboundedAggregateValue(f"{fn}({sql_text(arg)})", arg.table, arg.name,
                                      summed=True)
    if facts is not None and not numeric_or_unknown(facts.type):
        # DuckDB would cast each stored value to a number: one unparsable row would make the
        # whole query fail, an error that depends on the data (the rewrite also uses TRY_CAST
        # for columns of unknown type). Checked before the bounds: declaring bounds on a text
        # column is no fix, so the message must not suggest it.
        raise UnsupportedConstructError(
            f"{fn}({sql_text(arg)}) needs a numeric column, and {arg.name!r} is "
            f"{facts.type}: sum a numeric column, or store this one as a number"
        )
    if facts is None or facts.bounds is None:
        raise MissingMetricError(
            f"{fn}({sql_text(arg)}) needs bounds: declare bounds: [lower, upper] for column "
            f"{arg.name!r} in the metadata, or clamp it in SQL with "
            f"LEAST(GREATEST({sql_text(arg)}, lower), upper)"
        )
    return facts.bounds


def _group_keys(keys: list[exp.Expression], rel: Relation, metadata: Metadata,
                where: exp.Expression | None = None) -> list[GroupKey]:
    out: list[GroupKey] = []
    for i, key in enumerate(keys):
        facts = rel.columns.get((key.table, key.name)) if isinstance(key, exp.Column) else None
        if not isinstance(key, exp.Column) or (facts is not None and (
                facts.derived_domain is not None or _days_only(facts, metadata))):
            # computed, computed in a subquery, or a date column with day bounds only
            try:
                derived = derive_key(key, rel.columns, metadata)
            except ProtectedBinError:
                listed = (listed_domain(key, where)
                          if key.find(exp.Placeholder, exp.AggFunc) is None else None)
                if listed is None:
                    raise
                derived = listed
            name = key.name if isinstance(key, exp.Column) else sql_text(key)
            out.append(GroupKey(i, key, Domain(), name, derived_type(key),
                                derived_domain=derived))
            continue
        origin = facts.origin if facts is not None else None
        if origin is None and facts is not None and facts.count:
            # a per-group COUNT of a subquery (TPC-H Q13's c_count): integers, no owner-held
            # content; its groups come from the data by DP partition selection (under a
            # privacy unit only a derived table grouped by the unit gets here:
            # dpsql.units.derived; every other aggregate below the top level is refused)
            out.append(GroupKey(i, key, Domain(), key.name, "BIGINT", partition=True))
            continue
        if origin is None:
            raise ProtectedBinError(
                f"GROUP BY {sql_text(key)}: the column is computed in a subquery and has no "
                "declared or derivable domain, so its values are not releasable: group by a "
                "declared releasable column, a function of one, a date part of a column with "
                "day bounds, or a CASE with constant results"
            )
        table = metadata.table(origin[0])
        column = table.column(origin[1])
        if not (table.public or column.releasable):
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: the column is not releasable; the owner must "
                "declare it releasable with a domain, or with partition_selection: true (groups "
                "released when enough rows share them), or group by a public table's column"
            )
        if collation(column.type) is not None:
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: the column is stored with the collation "
                f"{collation(column.type)}, under which different values compare equal, so one "
                "row could fall in several bins: store it without a collation"
            )
        domain = column.domain
        if domain is None and table.public:
            domain = Domain(table=table.name, column=column.name)
        if domain is None and column.partition_selection:
            # no declared domain: bins from the data, by DP partition selection
            out.append(GroupKey(i, key, Domain(), key.name, column.type, partition=True))
            continue
        if domain is None:
            raise ProtectedBinError(
                f"GROUP BY {origin[0]}.{origin[1]}: no domain is declared, so which bins exist "
                "would depend on private data; the owner must declare domain: {values: [...]} "
                "or domain: {table: <public table>, column: <column>}, or mark it "
                "partition_selection: true (groups released when enough rows share them)"
            )
        out.append(GroupKey(i, key, domain, key.name, column.type))
    return out


def _days_only(facts, metadata: Metadata) -> bool:
    """A base column with day bounds and no domain: its bins are the days (derived_keys)."""
    if facts.origin is None:
        return False
    table = metadata.table(facts.origin[0])
    column = table.column(facts.origin[1])
    return column.domain is None and not table.public and column.date_bounds is not None
