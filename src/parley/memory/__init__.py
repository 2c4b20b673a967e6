"""Long-term memory: short texts an owner keeps per assistant or globally, managed over
the API (``api/memories.py``) and by the model's memory tools (``tools.py``), and brought
into requests by retrieval or plain injection (``service.py``).

The only SQL for memories is in ``store.py``; ranking (lexical and vector, fused) is in
``service.py``.
"""
