"""Episode environment: overlays, SQL gate, Python worker, verifier, trajectories, Gymnasium."""
