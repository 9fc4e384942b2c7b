"""Tests of zionsim.studies."""
