"""Cluster sources: where the model comes from and where bindings go (cluster file, real API)."""
