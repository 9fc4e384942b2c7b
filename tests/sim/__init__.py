"""Tests of zionsim.sim."""
