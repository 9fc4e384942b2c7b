"""Tests of zionsim.hardware."""
