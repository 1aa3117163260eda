"""The `dpsql` command."""
