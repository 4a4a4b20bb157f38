"""Helpers for process-level tests: the kairos CLI as a real subprocess, and scriptable loopback servers."""
