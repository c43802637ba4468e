"""XLA's HLO text format: scanner, attribute codecs, parser and printer."""
