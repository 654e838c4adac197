"""Performance benchmarks (``r2a bench perf ...``): cost of building and querying r2a's data structures."""
