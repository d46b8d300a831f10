"""Validity probes of a built benchmark: checks that a shortcut (the question text, how noise is
stored) does not reveal the variant or the expected outcome."""
