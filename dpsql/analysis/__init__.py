"""SQL -> privacy analysis. sqlglot lives only here and in dpsql.rewrite."""
