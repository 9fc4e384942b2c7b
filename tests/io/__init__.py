"""Tests of zionsim.io."""
