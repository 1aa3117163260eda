"""Tests of dpsql.metadata: loading both formats, validation errors, dumping, and drafting."""
