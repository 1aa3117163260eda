"""The pieces of PostgreSQL's ``pg_catalog`` that DuckDB's emulation lacks, for the shadow schema
(:mod:`dpsql.server.catalog`): relations served from definitions inlined as subqueries, macros
for missing functions, and functions renamed to DuckDB's equivalent.

Everything here is about the *schema*: the relations are DuckDB's own catalog plus constant
columns, or empty (dpsql's analyst-facing schema has no keys, indexes, sequences, defaults,
policies, triggers or comments), so no shim can read a row of data.
"""

from __future__ import annotations

# pg_catalog relations whose DuckDB emulation lacks columns or rows clients read: served from
# these definitions, inlined as subqueries (``pg_catalog.pg_class`` → ``(SELECT ...) pg_class``).
EXTENDED = {
    "pg_class": "SELECT *, false AS relforcerowsecurity FROM pg_catalog.pg_class",
    "pg_database": (
        "SELECT *, 10 AS datdba, 6 AS encoding, 'C' AS datcollate, 'C' AS datctype, "
        "'c' AS datlocprovider, -1 AS datconnlimit, CAST(NULL AS VARCHAR) AS datacl, "
        "CAST(NULL AS VARCHAR) AS daticulocale FROM pg_catalog.pg_database"),
    "pg_roles": (
        "SELECT 10 AS oid, {user} AS rolname, false AS rolsuper, false AS rolinherit, "
        "false AS rolcreaterole, false AS rolcreatedb, true AS rolcanlogin, "
        "false AS rolreplication, false AS rolbypassrls, -1 AS rolconnlimit, "
        "CAST(NULL AS TIMESTAMP) AS rolvaliduntil"),
    "pg_auth_members": (
        "SELECT 0 AS oid, 0 AS roleid, 0 AS member, 0 AS grantor, false AS admin_option "
        "WHERE false"),
    # the features dpsql's schema never has: empty, with the columns psql's \\d reads
    "pg_policy": (
        "SELECT 0 AS oid, '' AS polname, 0 AS polrelid, '' AS polcmd, true AS polpermissive, "
        "[0] AS polroles, CAST(NULL AS VARCHAR) AS polqual, "
        "CAST(NULL AS VARCHAR) AS polwithcheck WHERE false"),
    "pg_statistic_ext": (
        "SELECT 0 AS oid, 0 AS stxrelid, '' AS stxname, 0 AS stxnamespace, 0 AS stxowner, "
        "-1 AS stxstattarget, [0] AS stxkeys, [''] AS stxkind, "
        "CAST(NULL AS VARCHAR) AS stxexprs WHERE false"),
    "pg_publication": (
        "SELECT 0 AS oid, '' AS pubname, 0 AS pubowner, false AS puballtables, "
        "false AS pubinsert, false AS pubupdate, false AS pubdelete, false AS pubtruncate, "
        "false AS pubviaroot WHERE false"),
    "pg_publication_rel": (
        "SELECT 0 AS oid, 0 AS prpubid, 0 AS prrelid, CAST(NULL AS VARCHAR) AS prqual, "
        "[0] AS prattrs WHERE false"),
    "pg_publication_namespace": "SELECT 0 AS oid, 0 AS pnpubid, 0 AS pnnspid WHERE false",
    "pg_inherits": (
        "SELECT 0 AS inhrelid, 0 AS inhparent, 0 AS inhseqno, false AS inhdetachpending "
        "WHERE false"),
    "pg_trigger": (
        "SELECT 0 AS oid, 0 AS tgrelid, '' AS tgname, 0 AS tgfoid, 0 AS tgtype, "
        "'' AS tgenabled, false AS tgisinternal, 0 AS tgparentid WHERE false"),
    "pg_rewrite": (
        "SELECT 0 AS oid, '' AS rulename, 0 AS ev_class, '' AS ev_type, '' AS ev_enabled, "
        "false AS is_instead WHERE false"),
    # PostgreSQL 15's column SQLAlchemy reads for primary keys and unique constraints
    "pg_index": "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index",
    "pg_collation": (
        "SELECT *, (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'pg_catalog') "
        "AS collnamespace, 10 AS collowner, 'c' AS collprovider, true AS collisdeterministic, "
        "-1 AS collencoding, 'C' AS collcollate, 'C' AS collctype FROM pg_catalog.pg_collation"),
    "pg_opclass": (
        "SELECT 0 AS oid, 0 AS opcmethod, '' AS opcname, 0 AS opcnamespace, 0 AS opcowner, "
        "0 AS opcfamily, 0 AS opcintype, true AS opcdefault, 0 AS opckeytype WHERE false"),
    "pg_user": (
        "SELECT {user} AS usename, 10 AS usesysid, false AS usecreatedb, false AS usesuper, "
        "false AS userepl, false AS usebypassrls, CAST(NULL AS TIMESTAMP) AS valuntil"),
}

# Functions PostgreSQL clients call that DuckDB's pg_catalog emulation lacks.
MACROS = (
    "CREATE MACRO obj_description(x, y := NULL) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO col_description(x, y) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO shobj_description(x, y) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_encoding_to_char(x) AS 'UTF8'",
    "CREATE MACRO pg_get_indexdef(x, y := 0, z := false) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_get_constraintdef(x, y := false) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_get_viewdef(x, y := false) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_get_partkeydef(x) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_relation_is_publishable(x) AS false",
    "CREATE MACRO pg_table_size(x) AS CAST(NULL AS BIGINT)",
    "CREATE MACRO pg_total_relation_size(x) AS CAST(NULL AS BIGINT)",
    "CREATE MACRO pg_relation_size(x) AS CAST(NULL AS BIGINT)",
    "CREATE MACRO pg_get_serial_sequence(x, y) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_collation_is_visible(x) AS true",
    # format_type as PostgreSQL spells its types (DuckDB's says int4, float8, varchar, ...):
    # clients map these names to their types (SQLAlchemy's reflection, psql's \\d)
    "CREATE MACRO dpsql_format_type(t, m) AS CASE t WHEN 16 THEN 'boolean' "
    "WHEN 21 THEN 'smallint' WHEN 23 THEN 'integer' WHEN 20 THEN 'bigint' WHEN 700 THEN 'real' "
    "WHEN 701 THEN 'double precision' WHEN 1043 THEN 'character varying' WHEN 25 THEN 'text' "
    "WHEN 1082 THEN 'date' WHEN 1083 THEN 'time without time zone' "
    "WHEN 1114 THEN 'timestamp without time zone' WHEN 1184 THEN 'timestamp with time zone' "
    "ELSE format_type(t, m) END",
    "CREATE MACRO to_regtype(x) AS "
    "(SELECT oid FROM pg_catalog.pg_type WHERE typname = x LIMIT 1)",
    "CREATE MACRO to_regclass(x) AS "
    "(SELECT oid FROM pg_catalog.pg_class WHERE relname = x LIMIT 1)",
    "CREATE MACRO array_upper(a, d) AS len(a)",
    "CREATE MACRO array_lower(a, d) AS 1",
    "CREATE MACRO pg_get_statisticsobjdef_columns(x) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_get_triggerdef(x, y := false) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO pg_get_ruledef(x, y := false) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO has_table_privilege(x, y, z := NULL) AS true",
    "CREATE MACRO has_schema_privilege(x, y, z := NULL) AS true",
    "CREATE MACRO has_database_privilege(x, y, z := NULL) AS true",
)

#: PostgreSQL functions DuckDB has under another name (same arguments, same result)
RENAMED = {
    "json_build_object": "json_object",  # SQLAlchemy's get_columns: identity and collation
    "format_type": "dpsql_format_type",
}
