"""Knowledge bases: ingestion (``ingest.py``: extract, chunk, embed, write), the index
(``index.py``: lexical + vectors, fused by reciprocal rank), and ``service.py``, which
the routes, the knowledge tools and the knowledge transformer use.

Importing the package imports nothing else: ``settings.py`` is read by the settings at
start-up, and the rest only where it is used.
"""
