"""Langchain-Chatchat's own API, served by Parley: its chat routes (``rag.py``), knowledge
bases and documents (``kb.py``, ``docs.py``, ``recreate.py``, ``temp.py``), tools
(``tools.py``, ``kb_tool.py``, ``tool_names.py``), prompts, feedback and server routes,
with the shapes its WebUI and client read (``shapes.py``, ``common.py``)."""
