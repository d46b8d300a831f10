"""Database layer: MIMIC-IV schema, connections, overlays, synthetic hospital, MIMIC-IV loader."""
