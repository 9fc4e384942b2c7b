"""Tests of zionsim.measure."""
