"""`dpsql serve`: the privacy boundary as a PostgreSQL-compatible server (docs/design.md,
"Server"). Modules: wire (framing), pgtypes (OIDs, value formats), auth (SCRAM, throttling),
catalog (introspection from the analyst-facing schema), placeholders ($n to ?), statements (what
a statement means for an analyst), connection (the protocol state machine), app (the process)."""
