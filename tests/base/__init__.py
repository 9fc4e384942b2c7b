"""Tests of zionsim.base."""
