"""Tests of zionsim.network."""
