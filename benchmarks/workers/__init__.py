"""Subprocess workers: each runs one measurement in a fresh interpreter and writes JSON."""
