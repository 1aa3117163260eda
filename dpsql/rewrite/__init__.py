"""The SQL dpsql runs: one module per rewrite pass, composed by :mod:`.plan`."""
