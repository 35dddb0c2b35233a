"""Unit tests of the pure modules."""
