"""Semantic search over observation groups (spec §12): index projection, vector store, rendering."""
