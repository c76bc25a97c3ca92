"""Logs and metrics: what the server records, below every layer that records something."""
