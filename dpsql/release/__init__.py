"""What one query releases: its record (:mod:`.record`) and the answer cache (:mod:`.cache`)."""
