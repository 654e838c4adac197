"""Offline: demonstrations → spatiotemporal motion-primitive graph with a FAISS index."""
