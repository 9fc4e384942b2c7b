"""Tests of zionsim.dlrm."""
