"""Speed and size measurements of olympia (see benchmarks/README.md)."""
