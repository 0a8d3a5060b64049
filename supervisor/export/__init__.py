"""Pricing and export of recorded runs: genai-prices costs (``pricing``), OTLP/JSON files (``otlp``), OTLP/HTTP (``otlp_http``).

Imports nothing optional: each optional package is imported inside the one module that needs it, when it is used.
"""
