"""Textual-free models shared by the two front ends: scan, timeline model, runs, filters, export rows, formatting."""
