"""The benchmark: `python bench/run.py` (see run.py)."""
