"""Execution backends: where exact aggregates are computed (DuckDB by default)."""
