"""EHR-RobustGym: evaluate and train clinical agents on noisy MIMIC-IV-shaped EHRs."""

__version__ = "0.1.0"
